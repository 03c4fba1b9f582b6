/**
 * The SDK's pure helpers for files, tasks and capabilities, and the CLI's
 * parsing of --mode and --timeout.
 */
import { describe, expect, it } from 'vitest';
import { parseTimeout } from '../../../core/cli/commands/fn.js';
import { parseMode } from '../../../core/cli/commands/sandbox-files.js';
import type { NodeInfo } from '../../../core/live.js';
import { MAX_FILE_BYTES } from '../../../core/live.js';
import { capabilitiesOf } from '../../../core/sdk/index.js';
import { sandboxSpec, writeFileRequest } from '../../../core/sdk/requests.js';

const nodeInfo = (name: string, extra: Partial<NodeInfo>): NodeInfo => ({
  name,
  backends: [],
  capacity: { cpu: 1, memoryMiB: 1024 },
  sandboxes: 0,
  agentVersion: 'test',
  pid: 1,
  ...extra,
});

describe('SDK helpers', () => {
  it('encodes a string as utf-8 and bytes as they are, and refuses content over 32 MiB before sending it', () => {
    expect(writeFileRequest('b', '/x', 'héllo')).toEqual({ path: '/x', data: Buffer.from('héllo').toString('base64') });
    expect(writeFileRequest('b', '/x', new Uint8Array([0, 255]), { mode: 0o600 })).toEqual({ path: '/x', data: 'AP8=', mode: 0o600 });
    expect(() => writeFileRequest('b', '/big', Buffer.alloc(MAX_FILE_BYTES + 1))).toThrow(
      `file /big in sandbox b is ${MAX_FILE_BYTES + 1} bytes, more than the ${MAX_FILE_BYTES} asked for`,
    );
  });

  it('carries backendOptions and an image into the spec only when given', () => {
    const spec = sandboxSpec({ backend: 'vm', layers: [], backendOptions: { display: 'vnc' }, image: { path: '/d.qcow2', format: 'qcow2' } });
    expect(spec.backendOptions).toEqual({ display: 'vnc' });
    expect(spec.image).toEqual({ path: '/d.qcow2', format: 'qcow2' });
    const plain = sandboxSpec({ backend: 'container', layers: [] });
    expect('backendOptions' in plain || 'image' in plain).toBe(false);
  });

  it('merges capabilities over healthy nodes in operation order, and lists a backend a node runs without reporting any', () => {
    const merged = capabilitiesOf([
      nodeInfo('a', { backends: ['container'], capabilities: { container: ['writeFile', 'exec'] } }),
      nodeInfo('b', { backends: ['container', 'vm'], capabilities: { container: ['readFile', 'exec'], vm: [] } }),
      nodeInfo('c', { backends: ['fncall'], capabilities: { fncall: ['invoke'] }, health: 'unhealthy' }),
      nodeInfo('old', { backends: ['microvm'] }),
    ]);
    expect(merged).toEqual({ container: ['exec', 'readFile', 'writeFile'], microvm: [], vm: [] });
  });
});

describe('CLI parsing', () => {
  it('reads --mode in octal with or without a leading 0 or 0o', () => {
    expect(parseMode('644')).toBe(0o644);
    expect(parseMode('0755')).toBe(0o755);
    expect(parseMode('0o600')).toBe(0o600);
    expect(() => parseMode('999')).toThrow('expected permission bits in octal');
  });

  it('reads --timeout as seconds (fractions too) or a duration, in milliseconds', () => {
    expect(parseTimeout('30')).toBe(30_000);
    expect(parseTimeout('0.25')).toBe(250);
    expect(parseTimeout('2m')).toBe(120_000);
    expect(() => parseTimeout('soon')).toThrow('expected seconds');
    expect(() => parseTimeout('0')).toThrow('expected seconds');
  });
});
