import { spawnSync } from 'node:child_process';
import { chmodSync, promises as fs, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { findOpaqueDirs, isWhiteout, makeWhiteouts, markOpaque } from '../../../core/layers/index.js';
import { leftovers } from '../../helpers/mounts.js';
import { rejectionOf } from '../../unit/layers/helpers.js';
import { makeStoreWorkspace, refOf, type StoreWorkspace } from './helpers.js';

let ws: StoreWorkspace;
beforeEach(async () => {
  ws = await makeStoreWorkspace();
});
afterEach(async () => {
  await ws.cleanup();
});

const hexOf = (digest: string) => digest.slice('sha256:'.length);
const layersDir = () => join(ws.store.dir, 'layers');
/** Whether the unprivileged user `nobody` can reach `path` on the host. */
const nobodyReaches = (path: string): boolean => spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', 'test', '-e', path]).status === 0;
/** A layer holding what a sandbox can plant in its writable layer, and a snapshot or build publishes: a setuid-root program. */
const publishSetuid = (store: StoreWorkspace) =>
  store.publishDir('planted@1.0.0', { 'bin/escalate': '#!/bin/sh\nid\n' }, 'base', (dir) => fs.chmod(join(dir, 'bin/escalate'), 0o4755));
/** The options a mount point is mounted with, from /proc/self/mounts. */
function mountOptions(path: string): string[] {
  const line = readFileSync('/proc/self/mounts', 'utf8').split('\n').find((entry) => entry.split(' ')[1] === path);
  return line?.split(' ')[3]?.split(',') ?? [];
}

describe('the EROFS format', () => {
  it('publishes a layer as an lz4 EROFS image (the default) with its sha256 recorded, and says so in the record', async () => {
    const record = await ws.publishDir('base@1.0.0', { 'etc/os-release': 'ID=erofs\n' });
    expect(record.format).toBe('erofs');
    const hex = hexOf(record.digest);
    expect((await fs.readdir(layersDir())).sort()).toEqual([`${hex}.erofs`, `${hex}.json`]);
    const image = JSON.parse(await fs.readFile(join(layersDir(), `${hex}.json`), 'utf8'));
    expect(image).toMatchObject({ digest: record.digest, layout: 'whole', image: { sha256: expect.stringMatching(/^[0-9a-f]{64}$/) } });
    expect((await ws.store.list()).map((layer) => layer.format)).toEqual(['erofs']);
    expect(ws.logged.join('\n')).toContain('test-store: format erofs');
    expect((await ws.store.stats()).description).toBe('erofs (lz4 images, mounted read-only once per node)');
  });

  it('mounts an image once per node, read-only, shared by its sandboxes, and unmounts it with the loop device after the last one', async () => {
    const record = await ws.publishDir('base@1.0.0', { 'etc/os-release': 'ID=erofs\n' });
    const [first] = await ws.store.resolve('sb-1', [refOf(record)]);
    const [second] = await ws.store.resolve('sb-2', [refOf(record)]);
    expect(second.path).toBe(first.path);
    expect(first.path).toBe(join(ws.store.dir, 'mnt', hexOf(record.digest)));
    expect(await fs.readFile(join(first.path, 'etc/os-release'), 'utf8')).toBe('ID=erofs\n');
    expect(leftovers(ws.root).mounts).toEqual([first.path]);
    expect(mountOptions(first.path)).toContain('ro');
    await expect(fs.writeFile(join(first.path, 'x'), 'x')).rejects.toThrow(/EROFS|read-only/);
    const stats = await ws.store.stats();
    expect(stats.mounts).toEqual([
      expect.objectContaining({ digest: record.digest, path: first.path, users: 2, device: expect.stringMatching(/^\/dev\/loop\d+$/) }),
    ]);
    expect(stats.mounts[0].bytesRead).toBeGreaterThan(0);
    await ws.store.release('sb-1');
    expect(leftovers(ws.root).mounts).toEqual([first.path]);
    await ws.store.release('sb-2');
    expect(leftovers(ws.root)).toEqual({ mounts: [], loops: [] });
    await ws.store.release('sb-2');
  });

  it('keeps layer content (setuid programs included) out of host users\' reach: root-only store folders, images mounted nosuid and nodev', async () => {
    // A store in a world-traversable place, as /var/lib/dsec would be.
    chmodSync(ws.root, 0o755);
    const record = await publishSetuid(ws);
    const [layer] = await ws.store.resolve('sb-1', [refOf(record)]);
    try {
      const planted = join(layer.path, 'bin/escalate');
      expect((await fs.stat(planted)).mode & 0o7777).toBe(0o4755);
      expect(mountOptions(layer.path)).toEqual(expect.arrayContaining(['ro', 'nosuid', 'nodev']));
      expect(nobodyReaches(ws.store.dir)).toBe(true);
      expect(nobodyReaches(planted)).toBe(false);
      for (const folder of ['layers', 'staging', 'mnt']) expect((await fs.stat(join(ws.store.dir, folder))).mode & 0o777, folder).toBe(0o700);
    } finally {
      await ws.store.release('sb-1');
    }
  });

  it('builds lz4hc images instead of lz4 when asked', async () => {
    const tight = ws.reopen({ dir: join(ws.root, 'lz4hc-store'), compression: 'lz4hc' });
    const dir = join(ws.root, 'lz4hc-src');
    await fs.mkdir(dir);
    writeFileSync(join(dir, 'text.txt'), 'compressible text\n'.repeat(10_000));
    const { publishLayer } = await import('../../../core/layers/index.js');
    const record = await publishLayer(tight, { ref: 'fast@1.0.0', name: 'fast', version: '1.0.0', kind: 'base', source: { type: 'dir', path: dir } });
    expect((await tight.stats()).description).toBe('erofs (lz4hc images, mounted read-only once per node)');
    const [mounted] = await tight.resolve('sb-1', [refOf(record)]);
    expect(await fs.readFile(join(mounted.path, 'text.txt'), 'utf8')).toBe('compressible text\n'.repeat(10_000));
    await tight.release('sb-1');
  });

  it('keeps whiteouts and opaque directories inside the image', async () => {
    const record = await ws.publishDir('tool@1.0.0', { 'fresh/new': 'n\n' }, 'toolkit', async (dir) => {
      await makeWhiteouts([join(dir, 'gone')]);
      await markOpaque([join(dir, 'fresh')]);
    });
    const [mounted] = await ws.store.resolve('sb-1', [refOf(record)]);
    expect(isWhiteout(await fs.lstat(join(mounted.path, 'gone')))).toBe(true);
    expect(await findOpaqueDirs(mounted.path)).toEqual(new Set([join(mounted.path, 'fresh')]));
    await ws.store.release('sb-1');
  });

  it('refuses to mount an image changed after it was published, naming the layer, and leaves nothing mounted', async () => {
    const record = await ws.publishDir('base@1.0.0', { 'etc/passwd': 'root\n', 'big.bin': 'x'.repeat(100_000) });
    const image = join(layersDir(), `${hexOf(record.digest)}.erofs`);
    const handle = await fs.open(image, 'r+');
    await handle.write(Buffer.from('corrupted'), 0, 9, 8192);
    await handle.close();
    const error = await rejectionOf(ws.store.resolve('sb-1', [refOf(record)]));
    expect(error.code).toBe('DSEC_LAYER_CONTENT_MISMATCH');
    expect(error.message).toMatch(new RegExp(`^layer base@1\\.0\\.0: the image ${image} does not match what was published \\(expected sha256:[0-9a-f]{64}`));
    expect(leftovers(ws.root)).toEqual({ mounts: [], loops: [] });
    expect(await fs.readdir(join(ws.store.dir, 'inuse'))).toEqual([]);
  });

  it('refuses a truncated image the same way', async () => {
    const record = await ws.publishDir('base@1.0.0', { 'big.bin': 'y'.repeat(200_000) });
    const image = join(layersDir(), `${hexOf(record.digest)}.erofs`);
    await fs.truncate(image, 4096);
    const error = await rejectionOf(ws.store.resolve('sb-1', [refOf(record)]));
    expect(error.code).toBe('DSEC_LAYER_CONTENT_MISMATCH');
    expect(error.params).toMatchObject({ ref: 'base@1.0.0', what: 'the image', actual: expect.stringContaining('(4096 bytes)') });
    expect(leftovers(ws.root)).toEqual({ mounts: [], loops: [] });
  });

  it('publishes nothing when mkfs.erofs writes a truncated image', async () => {
    const fakeBin = join(ws.root, 'bin');
    await fs.mkdir(fakeBin);
    const fake = join(fakeBin, 'mkfs.erofs');
    // The real mkfs, then the image cut in half: what a full disk or a killed mkfs leaves.
    writeFileSync(fake, '#!/bin/sh\n/usr/bin/mkfs.erofs "$@" || exit $?\nfor last; do :; done\nfor a; do [ "$a" = "$last" ] && break; image="$a"; done\nsize=$(stat -c %s "$image")\ntruncate -s $((size / 2)) "$image"\n');
    chmodSync(fake, 0o755);
    await ws.store.formats();
    const path = process.env.PATH;
    process.env.PATH = `${fakeBin}:${path}`;
    try {
      const error = await rejectionOf(ws.publishDir('cut@1.0.0', { 'big.bin': 'z'.repeat(300_000) }));
      expect(error.code).toBe('DSEC_LAYER_SOURCE');
      expect(error.message).toMatch(/^layer cut@1\.0\.0: storing it failed: .* is truncated: /);
    } finally {
      process.env.PATH = path;
    }
    expect(await ws.store.list()).toEqual([]);
    expect(await fs.readdir(layersDir())).toEqual([]);
    expect(await fs.readdir(join(ws.store.dir, 'staging'))).toEqual([]);
  });

  it('finds its mounts again after a restart, and unmounts them when their last user goes', async () => {
    const record = await ws.publishDir('base@1.0.0', { a: 'a\n' });
    const [mounted] = await ws.store.resolve('sb-1', [refOf(record)]);
    const restarted = ws.reopen();
    const [again] = await restarted.resolve('sb-2', [refOf(record)]);
    expect(again.path).toBe(mounted.path);
    expect(leftovers(ws.root).mounts).toEqual([mounted.path]);
    await restarted.release('sb-1');
    expect(leftovers(ws.root).mounts).toEqual([mounted.path]);
    await restarted.release('sb-2');
    expect(leftovers(ws.root)).toEqual({ mounts: [], loops: [] });
  });

  it('unmounts what a failed resolve mounted and forgets the sandbox', async () => {
    const good = await ws.publishDir('base@1.0.0', { a: 'a\n' });
    const bad = await ws.publishDir('tool@1.0.0', { b: 'b\n' }, 'toolkit');
    await fs.truncate(join(layersDir(), `${hexOf(bad.digest)}.erofs`), 1024);
    const error = await rejectionOf(ws.store.resolve('sb-1', [refOf(good), refOf(bad)]));
    expect(error.code).toBe('DSEC_LAYER_CONTENT_MISMATCH');
    expect(leftovers(ws.root)).toEqual({ mounts: [], loops: [] });
    expect(await fs.readdir(join(ws.store.dir, 'inuse'))).toEqual([]);
  });

  it('removes the image and its mount point when the layer is unpublished', async () => {
    const record = await ws.publishDir('base@1.0.0', { a: 'a\n' });
    await ws.store.resolve('sb-1', [refOf(record)]);
    await ws.store.release('sb-1');
    await ws.store.remove('base', '1.0.0');
    expect(await fs.readdir(layersDir())).toEqual([]);
    expect(await fs.readdir(join(ws.store.dir, 'mnt'))).toEqual([]);
  });

  it('keeps serving layers stored as trees before the store used EROFS', async () => {
    const asTree = ws.reopen({ format: 'tree' });
    const dir = join(ws.root, 'old');
    await fs.mkdir(dir);
    writeFileSync(join(dir, 'old.txt'), 'old\n');
    const { publishLayer } = await import('../../../core/layers/index.js');
    const record = await publishLayer(asTree, { ref: 'old@1.0.0', name: 'old', version: '1.0.0', kind: 'base', source: { type: 'dir', path: dir } });
    expect(record.format).toBe('tree');
    const [resolved] = await ws.store.resolve('sb-1', [refOf(record)]);
    expect(resolved.path).toBe(join(layersDir(), hexOf(record.digest)));
    expect(await fs.readFile(join(resolved.path, 'old.txt'), 'utf8')).toBe('old\n');
    await ws.store.release('sb-1');
  });
});

describe('the fallback to directory trees', () => {
  it('stores trees when EROFS cannot be mounted, and says why in the log and in its stats', async () => {
    const store = ws.reopen({ format: 'auto', probe: async () => ({ whole: 'unknown filesystem type erofs', split: 'unknown filesystem type erofs' }) });
    const stats = await store.stats();
    expect(stats).toMatchObject({ format: 'tree', reason: 'unknown filesystem type erofs', mounts: [] });
    expect(ws.logged).toContain(`warn: test-store: format tree (erofs unavailable: unknown filesystem type erofs), store ${store.dir}`);
  });

  it('refuses to open when EROFS is demanded and cannot be mounted', async () => {
    const store = ws.reopen({ format: 'erofs', probe: async () => ({ whole: 'no loop devices' }) });
    await expect(store.list()).rejects.toThrow('test-store: format erofs was asked for, but EROFS cannot be mounted here: no loop devices');
  });

  it('keeps layer trees (setuid programs included) out of host users\' reach', async () => {
    chmodSync(ws.root, 0o755);
    const trees = await makeStoreWorkspace({ format: 'tree' });
    try {
      chmodSync(trees.root, 0o755);
      const record = await publishSetuid(trees);
      const planted = join(trees.store.dir, 'layers', hexOf(record.digest), 'bin/escalate');
      expect((await fs.stat(planted)).mode & 0o7777).toBe(0o4755);
      expect(nobodyReaches(trees.store.dir)).toBe(true);
      expect(nobodyReaches(planted)).toBe(false);
    } finally {
      await trees.cleanup();
    }
  });

  it('re-digests a tree before its first use and refuses one changed in the store', async () => {
    const store = ws.reopen({ format: 'tree' });
    const dir = join(ws.root, 'src');
    await fs.mkdir(dir);
    writeFileSync(join(dir, 'a.txt'), 'a\n');
    const { publishLayer } = await import('../../../core/layers/index.js');
    const record = await publishLayer(store, { ref: 'a@1.0.0', name: 'a', version: '1.0.0', kind: 'base', source: { type: 'dir', path: dir } });
    writeFileSync(join(layersDir(), hexOf(record.digest), 'a.txt'), 'tampered\n');
    const error = await rejectionOf(ws.reopen({ format: 'tree' }).resolve('sb-1', [refOf(record)]));
    expect(error.code).toBe('DSEC_LAYER_CONTENT_MISMATCH');
    expect(error.params).toMatchObject({ ref: 'a@1.0.0', what: 'the tree', expected: record.digest });
  });
});
