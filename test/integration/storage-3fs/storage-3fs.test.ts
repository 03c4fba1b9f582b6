import { randomBytes } from 'node:crypto';
import { promises as fs, readFileSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import type { LayerModel, LayerRecord, Logger, NodeContext, SandboxContext, StorageStats } from '../../../core/plugin-api.js';
import storage3fs, { findMount, type Storage3fsOptions } from '../../../plugins/storage-3fs/index.js';
import { nodeContext, sandboxContext, sandboxSpec } from '../../helpers/contexts.js';
import { leftovers, sweepMounts } from '../../helpers/mounts.js';
import { rejectionOf, writeTree } from '../../unit/layers/helpers.js';

let root: string;
let mount: string;
let logged: string[];
beforeEach(async () => {
  root = realpathSync(await fs.mkdtemp(join(tmpdir(), 'dsec-3fs-')));
  mount = join(root, 'shared-3fs');
  await fs.mkdir(mount);
  logged = [];
});
afterEach(async () => {
  sweepMounts(root);
  await fs.rm(root, { recursive: true, force: true });
});

interface Node {
  readonly node: NodeContext;
  readonly dsec: Dsec;
  publish(ref: string, files: Record<string, string | Buffer>): Promise<LayerRecord>;
  resolve(id: string, ...records: LayerRecord[]): Promise<SandboxContext>;
  destroy(sandbox: SandboxContext): Promise<void>;
  stats(): Promise<StorageStats>;
}

let sources = 0;
function nodeOn(name: string, options: Partial<Storage3fsOptions> = {}): Node {
  const log: Logger = { info: (m) => logged.push(m), warn: (m) => logged.push(`warn: ${m}`), debug: () => {} };
  const node = nodeContext(name, join(root, name), { log });
  const dsec = new Dsec().use(storage3fs({ mount, format: 'erofs', ...options }));
  return {
    node,
    dsec,
    async publish(ref, files) {
      const dir = join(root, 'sources', String(++sources));
      for (const [path, content] of Object.entries(files)) {
        await writeTree(dir, { [path]: '' });
        await fs.writeFile(join(dir, path), content);
      }
      const [layerName, version] = ref.split('@');
      const layer: LayerModel = { ref, name: layerName, version, kind: 'base', source: { type: 'dir', path: dir } };
      return (await dsec.hooks.publishLayer.promise({ layer, node }))!;
    },
    async resolve(id, ...records) {
      const sandbox = sandboxContext(sandboxSpec(id, records), node, join(root, name, 'sandboxes', id));
      await dsec.hooks.resolveLayers.promise(sandbox);
      return sandbox;
    },
    destroy: (sandbox) => dsec.hooks.destroy.promise(sandbox),
    stats: async () => (await dsec.hooks.storageStats.promise(node))!,
  };
}

const hexOf = (record: LayerRecord) => record.digest.slice('sha256:'.length);

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('storage-3fs options', () => {
  it('requires the mount and refuses unknown or relative options with DSEC_PLUGIN_OPTIONS', () => {
    expect(() => storage3fs({} as never)).toThrow('plugin storage-3fs has invalid options: option mount is required (the 3FS mount path, or a folder in it');
    expect(() => storage3fs({ mount: 'rel' })).toThrow('option mount must be an absolute path, got "rel"');
    expect(() => storage3fs({ mount: '/m', cache: { size: 1 } } as never)).toThrow('unknown option cache.size (known in cache: dir, maxBytes)');
    expect(() => storage3fs({ mount: '/m', cache: { dir: 'c' } })).toThrow('option cache.dir must be an absolute path, got "c"');
  });

  it('refuses to use a mount path that does not exist, rather than filling the local disk', async () => {
    await fs.rmdir(mount);
    const error = await rejectionOf(nodeOn('node-a').publish('base@1.0.0', { a: 'a' }));
    expect(error.code).toBe('DSEC_LAYER_STORE_CORRUPT');
    expect(error.message).toContain(`${mount}: the 3FS mount is not there`);
    await expect(fs.stat(mount)).rejects.toThrow(/ENOENT/);
  });
});

describe('3FS detection', () => {
  it('says when the path is an ordinary directory, in the log and the stats', async () => {
    const node = nodeOn('node-a');
    const stats = await node.stats();
    expect(stats.backing).toMatch(new RegExp(`^not a 3FS mount: using ${mount} as an ordinary directory \\(it is on /`));
    expect(logged).toContain(`storage-3fs: ${stats.backing}`);
  });

  it('recognises a 3FS FUSE mount by its fstype, the innermost mount winning', async () => {
    const table = [
      { target: '/', fstype: 'ext4', source: '/dev/vda' },
      { target: root, fstype: 'fuse.hf3fs', source: 'hf3fs' },
      { target: join(root, 'other'), fstype: 'tmpfs', source: 'tmpfs' },
    ];
    expect(await findMount(mount, table)).toEqual({ is3fs: true, on: root, fstype: 'fuse.hf3fs' });
    expect(await findMount(mount, [...table, { target: mount, fstype: 'fuse.3fs', source: '3fs' }])).toMatchObject({ is3fs: true, fstype: 'fuse.3fs' });
    expect(await findMount(mount, [table[0]])).toEqual({ is3fs: false, on: '/', fstype: 'ext4' });
  });
});

describe('split images on the shared store', () => {
  it('keeps a metadata image and a data blob on the mount, and mounts from a local metadata copy', async () => {
    const node = nodeOn('node-a');
    const record = await node.publish('base@1.0.0', { 'etc/os-release': 'ID=3fs\n', 'data/big.bin': randomBytes(3 * 1024 * 1024) });
    expect(record.format).toBe('erofs');
    const hex = hexOf(record);
    expect((await fs.readdir(join(mount, 'layers'))).sort()).toEqual([`${hex}.blob`, `${hex}.json`, `${hex}.meta.erofs`]);
    const sandbox = await node.resolve('sb-1', record);
    const local = join(node.node.root, 'storage-3fs');
    expect(sandbox.lowerDirs).toEqual([join(local, 'mnt', hex)]);
    expect(await fs.readFile(join(sandbox.lowerDirs[0], 'etc/os-release'), 'utf8')).toBe('ID=3fs\n');
    expect(await fs.readFile(join(local, 'meta', `${hex}.erofs`))).toEqual(await fs.readFile(join(mount, 'layers', `${hex}.meta.erofs`)));
    const [mounted] = (await node.stats()).mounts;
    expect(mounted).toMatchObject({ digest: record.digest, source: 'store', data: join(mount, 'layers', `${hex}.blob`), users: 1 });
    // The metadata device's read-ahead is the filesystem's window: on-demand reads reach the store in large requests.
    for (const device of [mounted.device!, mounted.metadataDevice!]) {
      expect(readFileSync(`/sys/block/${basename(device)}/queue/read_ahead_kb`, 'utf8').trim()).toBe('4096');
    }
    // Nothing this node did wrote to the mount but the published layer and the registry.
    expect((await fs.readdir(mount)).sort()).toEqual(['inuse', 'layers', 'refs', 'staging']);
    await node.destroy(sandbox);
    expect(leftovers(root)).toEqual({ mounts: [], loops: [] });
  });

  it('reads file data on demand: opening one small file reads a small part of the blob', async () => {
    const node = nodeOn('node-a');
    const files: Record<string, Buffer | string> = { 'small.txt': 'small\n' };
    for (let index = 0; index < 8; index++) files[`lib/module-${index}.bin`] = randomBytes(2 * 1024 * 1024);
    const record = await node.publish('base@1.0.0', files);
    const sandbox = await node.resolve('sb-1', record);
    const before = (await node.stats()).mounts[0];
    // Counted from the mount: a reused loop device's earlier reads are not in it.
    expect(before.bytesRead).toBeLessThan(1024 * 1024);
    expect(await fs.readFile(join(sandbox.lowerDirs[0], 'small.txt'), 'utf8')).toBe('small\n');
    const afterSmall = (await node.stats()).mounts[0];
    expect(afterSmall.bytesRead! - before.bytesRead!).toBeLessThan(afterSmall.dataBytes! / 2);
    await fs.readFile(join(sandbox.lowerDirs[0], 'lib/module-3.bin'));
    const afterModule = (await node.stats()).mounts[0];
    expect(afterModule.bytesRead! - afterSmall.bytesRead!).toBeGreaterThanOrEqual(2 * 1024 * 1024);
    await node.destroy(sandbox);
  });

  it('refuses a truncated blob or a changed metadata image before mounting, naming the layer', async () => {
    const node = nodeOn('node-a');
    const cut = await node.publish('cut@1.0.0', { 'big.bin': randomBytes(2 * 1024 * 1024) });
    await fs.truncate(join(mount, 'layers', `${hexOf(cut)}.blob`), 1024 * 1024);
    const truncated = await rejectionOf(node.resolve('sb-1', cut));
    expect(truncated.code).toBe('DSEC_LAYER_CONTENT_MISMATCH');
    expect(truncated.params).toMatchObject({ ref: 'cut@1.0.0', what: 'the blob', actual: '1048576 bytes' });

    const changed = await node.publish('meta@1.0.0', { 'a.txt': 'a\n' });
    const meta = join(mount, 'layers', `${hexOf(changed)}.meta.erofs`);
    const bytes = await fs.readFile(meta);
    bytes[bytes.length - 1] ^= 0xff;
    await fs.writeFile(meta, bytes);
    const error = await rejectionOf(node.resolve('sb-2', changed));
    expect(error.code).toBe('DSEC_LAYER_CONTENT_MISMATCH');
    expect(error.params).toMatchObject({ ref: 'meta@1.0.0', what: 'the metadata image', path: meta });
    expect(leftovers(root)).toEqual({ mounts: [], loops: [] });
  });

  it('shares the in-use registry between nodes: a layer one node uses cannot be unpublished by another', async () => {
    const a = nodeOn('node-a');
    const b = nodeOn('node-b');
    const record = await a.publish('base@1.0.0', { a: 'a' });
    const sandbox = await a.resolve('sb-on-a', record);
    const refused = await rejectionOf(b.dsec.hooks.unpublishLayer.promise(b.node, 'base', '1.0.0'));
    expect(refused.code).toBe('DSEC_LAYER_IN_USE');
    expect(refused.message).toContain('sb-on-a');
    // Each node mounts for itself, and only releases its own mounts.
    const onB = await b.resolve('sb-on-b', record);
    expect(onB.lowerDirs[0].startsWith(join(root, 'node-b'))).toBe(true);
    await b.destroy(onB);
    expect(await fs.readFile(join(sandbox.lowerDirs[0], 'a'), 'utf8')).toBe('a');
    await a.destroy(sandbox);
    expect(await b.dsec.hooks.unpublishLayer.promise(b.node, 'base', '1.0.0')).toBe(true);
    expect(leftovers(root)).toEqual({ mounts: [], loops: [] });
  });
});

describe('the node-local blob cache', () => {
  it('copies a blob to local disk after its first mount, and mounts the copy the next time', async () => {
    const node = nodeOn('node-a', { cache: { maxBytes: 32 * 1024 * 1024 } });
    const record = await node.publish('base@1.0.0', { 'big.bin': randomBytes(3 * 1024 * 1024) });
    const first = await node.resolve('sb-1', record);
    expect((await node.stats()).mounts[0].source).toBe('store');
    const cached = await until('the blob to be cached', async () => ((await node.stats()).cache?.entries === 1 ? (await node.stats()).cache : undefined));
    expect(cached).toMatchObject({ dir: join(node.node.root, 'storage-3fs', 'cache'), maxBytes: 32 * 1024 * 1024 });
    expect(cached.bytes).toBeGreaterThanOrEqual(3 * 1024 * 1024);
    await node.destroy(first);
    const second = await node.resolve('sb-2', record);
    const [mounted] = (await node.stats()).mounts;
    expect(mounted).toMatchObject({ source: 'cache', data: join(cached.dir, `${hexOf(record)}.blob`) });
    expect((await fs.readFile(join(second.lowerDirs[0], 'big.bin'))).length).toBe(3 * 1024 * 1024);
    await node.destroy(second);
    expect(leftovers(root)).toEqual({ mounts: [], loops: [] });
  });

  it('evicts the least recently used blob to stay under maxBytes, and never caches a blob bigger than that', async () => {
    const node = nodeOn('node-a', { cache: { maxBytes: 5 * 1024 * 1024 } });
    const one = await node.publish('one@1.0.0', { 'one.bin': randomBytes(3 * 1024 * 1024) });
    const two = await node.publish('two@1.0.0', { 'two.bin': randomBytes(3 * 1024 * 1024) });
    const huge = await node.publish('huge@1.0.0', { 'huge.bin': randomBytes(6 * 1024 * 1024) });
    const cacheDir = join(node.node.root, 'storage-3fs', 'cache');
    const cachedBlobs = async () => (await fs.readdir(cacheDir).catch(() => [] as string[])).filter((name) => name.endsWith('.blob')).sort();
    for (const [id, record] of [['sb-1', one], ['sb-2', two]] as const) {
      const sandbox = await node.resolve(id, record);
      await until(`${id}'s blob to be cached`, async () => ((await cachedBlobs()).includes(`${hexOf(record)}.blob`) ? true : undefined));
      await node.destroy(sandbox);
    }
    expect(await cachedBlobs()).toEqual([`${hexOf(two)}.blob`]);
    expect(logged.join('\n')).toContain(`evicted the cached blob of ${one.digest}`);
    const sandbox = await node.resolve('sb-3', huge);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await cachedBlobs()).toEqual([`${hexOf(two)}.blob`]);
    await node.destroy(sandbox);
  });

  it('does not cache a blob whose bytes differ from what was published, and says so', async () => {
    const node = nodeOn('node-a', { cache: { maxBytes: 32 * 1024 * 1024 } });
    const record = await node.publish('base@1.0.0', { 'big.bin': randomBytes(2 * 1024 * 1024) });
    const blob = join(mount, 'layers', `${hexOf(record)}.blob`);
    const handle = await fs.open(blob, 'r+');
    await handle.write(Buffer.from('flipped'), 0, 7, 1024 * 1024 + 10);
    await handle.close();
    const sandbox = await node.resolve('sb-1', record);
    await until('the failed fill to be logged', async () => (logged.some((line) => line.includes('not the published')) ? true : undefined));
    expect((await node.stats()).cache?.entries).toBe(0);
    await node.destroy(sandbox);
  });
});
