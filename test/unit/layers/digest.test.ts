import { execFileSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DigestCache, signTree } from '../../../core/layers/digest-cache.js';
import { LISTING_VERSION, digestTree, walkTree } from '../../../core/layers/digest.js';
import { layerModel, makeWorkspace, rejectionOf, writeTree, type Workspace } from './helpers.js';

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.cleanup();
});

/** A small tree with a file, a nested file, an executable and a symlink. */
async function sampleTree(dir: string, order: 'forward' | 'reverse' = 'forward'): Promise<string> {
  const files: Array<[string, string]> = [
    ['etc/app.conf', 'a=1\n'],
    ['bin/tool', '#!/bin/sh\necho tool\n'],
    ['readme.txt', 'hello\n'],
  ];
  for (const [path, content] of order === 'forward' ? files : [...files].reverse()) {
    await writeTree(dir, { [path]: content });
  }
  await fs.chmod(join(dir, 'bin/tool'), 0o755);
  await fs.symlink('../etc/app.conf', join(dir, 'bin/conf'));
  return dir;
}

describe('layer digests', () => {
  it('gives the same digest to the same content whatever the mtimes and the order it was written in', async () => {
    const a = await sampleTree(join(ws.root, 'a'), 'forward');
    const b = await sampleTree(join(ws.root, 'b'), 'reverse');
    await fs.utimes(join(b, 'readme.txt'), new Date('2001-01-01'), new Date('2001-01-01'));
    await fs.utimes(join(b, 'etc'), new Date('1999-01-01'), new Date('1999-01-01'));
    const [digestA, digestB] = await Promise.all([digestTree(a, 'a@1'), digestTree(b, 'b@1')]);
    expect(digestA.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(digestB.digest).toBe(digestA.digest);
    expect(digestB.listing).toBe(digestA.listing);
  });

  it('lists entries sorted by path with type, mode, owner, size and content hash or link target', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    const { listing, entries, sizeBytes } = await digestTree(dir, 'tree@1');
    const lines = listing.trimEnd().split('\n');
    expect(lines[0]).toBe(LISTING_VERSION);
    const rows = lines.slice(1).map((line) => JSON.parse(line) as unknown[]);
    expect(rows.map((row) => row[0])).toEqual(['bin', 'bin/conf', 'bin/tool', 'etc', 'etc/app.conf', 'readme.txt']);
    expect(rows[1]).toEqual(['bin/conf', 'symlink', '0777', 0, 0, 0, '../etc/app.conf']);
    expect(rows[2].slice(0, 6)).toEqual(['bin/tool', 'file', '0755', 0, 0, 20]);
    expect(rows[2][6]).toMatch(/^[0-9a-f]{64}$/);
    expect(rows[0]).toEqual(['bin', 'dir', '0755', 0, 0, 0, '']);
    expect(entries).toBe(6);
    expect(sizeBytes).toBe(4 + 20 + 6);
  });

  it('gives a different digest when a mode changes', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    const before = await digestTree(dir, 'tree@1');
    await fs.chmod(join(dir, 'readme.txt'), 0o600);
    expect((await digestTree(dir, 'tree@1')).digest).not.toBe(before.digest);
  });

  it('gives a different digest when a symlink target changes', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    const before = await digestTree(dir, 'tree@1');
    await fs.rm(join(dir, 'bin/conf'));
    await fs.symlink('/etc/app.conf', join(dir, 'bin/conf'));
    expect((await digestTree(dir, 'tree@1')).digest).not.toBe(before.digest);
  });

  it('gives a different digest when an owner changes', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    const before = await digestTree(dir, 'tree@1');
    await fs.chown(join(dir, 'readme.txt'), 1234, 1234);
    expect((await digestTree(dir, 'tree@1')).digest).not.toBe(before.digest);
  });

  it('gives a different digest when content changes but the size does not', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    const before = await digestTree(dir, 'tree@1');
    await fs.writeFile(join(dir, 'readme.txt'), 'HELLO\n');
    expect((await digestTree(dir, 'tree@1')).digest).not.toBe(before.digest);
  });

  it('digests a dir source in place to the digest its published copy gets', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    await fs.chmod(join(dir, 'readme.txt'), 0o4755);
    await fs.chown(join(dir, 'etc/app.conf'), 1000, 2000);
    const layer = layerModel('tree@1.0.0', { type: 'dir', path: dir });
    const digest = await ws.digest(layer);
    expect((await ws.publish(layer)).digest).toBe(digest);
  });

  it('refuses a FIFO in a dir source with DSEC_LAYER_SOURCE naming its path', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    execFileSync('mkfifo', [join(dir, 'etc/pipe')]);
    const error = await rejectionOf(ws.publish(layerModel('tree@1.0.0', { type: 'dir', path: dir })));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain(`layer tree@1.0.0: ${join(dir, 'etc/pipe')} is a FIFO`);
    expect(await ws.list()).toEqual([]);
  });

  it('refuses a socket in a dir source with DSEC_LAYER_SOURCE naming its path', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    const server: Server = createServer();
    await new Promise<void>((resolve) => server.listen(join(dir, 'agent.sock'), resolve));
    try {
      const error = await rejectionOf(ws.digest(layerModel('tree@1.0.0', { type: 'dir', path: dir })));
      expect(error.code).toBe('DSEC_LAYER_SOURCE');
      expect(error.message).toContain(`${join(dir, 'agent.sock')} is a socket`);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('refuses a missing dir source with DSEC_LAYER_SOURCE', async () => {
    const missing = join(ws.root, 'nope');
    const error = await rejectionOf(ws.digest(layerModel('gone@1.0.0', { type: 'dir', path: missing })));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toBe(`layer gone@1.0.0: directory ${missing} does not exist`);
  });
});

describe('the source digest cache', () => {
  async function signature(dir: string) {
    const entries = await walkTree(dir, 'tree@1');
    return signTree('key', await fs.stat(dir, { bigint: true }), entries);
  }

  it('answers from the cache while the stat signature is unchanged, and misses once a file is rewritten', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    const cache = new DigestCache(join(ws.root, 'cache.json'), { racyWindowMs: 0 });
    await cache.set(await signature(dir), 'sha256:cached');
    expect(await cache.get(await signature(dir))).toBe('sha256:cached');
    // Same size, mtime put back: only ctime (which userland cannot set) tells.
    const { mtime, atime } = await fs.stat(join(dir, 'readme.txt'));
    await new Promise((resolve) => setTimeout(resolve, 20));
    await fs.writeFile(join(dir, 'readme.txt'), 'HELLO\n');
    await fs.utimes(join(dir, 'readme.txt'), atime, mtime);
    expect(await cache.get(await signature(dir))).toBeUndefined();
  });

  it('keeps entries across instances in its file', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    const file = join(ws.root, 'cache.json');
    await new DigestCache(file, { racyWindowMs: 0 }).set(await signature(dir), 'sha256:kept');
    expect(await new DigestCache(file).get(await signature(dir))).toBe('sha256:kept');
  });

  it('does not store a signature younger than the racy window', async () => {
    const dir = await sampleTree(join(ws.root, 'tree'));
    const cache = new DigestCache(join(ws.root, 'cache.json'), { racyWindowMs: 60_000 });
    await cache.set(await signature(dir), 'sha256:racy');
    expect(await cache.get(await signature(dir))).toBeUndefined();
  });
});
