import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { encodeState, parseManifest } from '../../../core/state/etcd-chunks.js';
import { LocalStateStore } from '../../../core/state/index.js';

describe('encodeState', () => {
  it('keeps a state text within the value limit as one plain value', () => {
    const text = '{\n  "serial": 1\n}\n';
    expect(encodeState(text, 1024)).toEqual({ value: text, chunks: [] });
    expect(parseManifest(text)).toBeUndefined();
  });

  it('splits a bigger text into byte chunks of the limit, named by a manifest with their count, size and digest', () => {
    const text = `{"resources": "${'é'.repeat(3000)}"}`;
    const encoded = encodeState(text, 1000);
    const bytes = Buffer.byteLength(text);
    expect(encoded.chunks.map((chunk) => chunk.length)).toEqual([1000, 1000, 1000, 1000, 1000, 1000, bytes - 6000]);
    expect(Buffer.concat(encoded.chunks).toString('utf8')).toBe(text);
    const manifest = parseManifest(encoded.value);
    expect(manifest).toEqual({
      dsec_chunked_state: 1,
      generation: encoded.generation,
      chunks: 7,
      bytes,
      sha256: createHash('sha256').update(text).digest('hex'),
    });
  });
});

describe('StateStore.location', () => {
  it('is the state file path for the local store', () => {
    const store = new LocalStateStore('/tmp/some-project/.dsec');
    expect(store.location).toBe('/tmp/some-project/.dsec/state.json');
  });
});
