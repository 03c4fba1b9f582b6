import { execFileSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import type { LayerRecord, Logger, SandboxContext } from '../../../core/plugin-api.js';
import storageLocal, { PLUGIN_NAME } from '../../../plugins/storage-local/index.js';
import { sandboxContext, sandboxSpec } from '../../helpers/contexts.js';
import { layerModel, makeWorkspace, rejectionOf, writeTree, type Workspace } from '../layers/helpers.js';

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.cleanup();
});

let sources = 0;
async function dirLayer(ref: string, files: Record<string, string>) {
  return layerModel(ref, { type: 'dir', path: await writeTree(join(ws.root, 'sources', String(++sources)), files) });
}

function sandbox(id: string, ...records: LayerRecord[]): SandboxContext {
  return sandboxContext(sandboxSpec(id, records), ws.node, join(ws.root, 'sandboxes', id));
}

const hexOf = (record: LayerRecord) => record.digest.slice('sha256:'.length);

describe('publishing', () => {
  it('refuses other content under a published name@version with DSEC_LAYER_IMMUTABLE naming both digests', async () => {
    const first = await ws.publish(await dirLayer('app@1.0.0', { 'a.txt': 'one\n' }));
    const changed = await dirLayer('app@1.0.0', { 'a.txt': 'two\n' });
    const error = await rejectionOf(ws.publish(changed));
    expect(error.code).toBe('DSEC_LAYER_IMMUTABLE');
    const digest = await ws.digest(changed);
    expect(error.params).toEqual({ ref: 'app@1.0.0', existing: first.digest, digest });
    expect(error.message).toBe(
      `layer app@1.0.0 is already published with digest ${first.digest}; its content now has digest ${digest}. Publish a new version.`,
    );
    expect(await ws.storeEntries('layers')).toEqual([hexOf(first)]);
  });

  it('stores the same content once for two refs and keeps the tree until the last of them is unpublished', async () => {
    const one = await ws.publish(await dirLayer('app@1.0.0', { 'a.txt': 'same\n' }));
    const two = await ws.publish(await dirLayer('app@1.0.1', { 'a.txt': 'same\n' }));
    expect(two.digest).toBe(one.digest);
    expect(await ws.storeEntries('layers')).toEqual([hexOf(one)]);
    await ws.dsec.hooks.unpublishLayer.promise(ws.node, 'app', '1.0.0');
    expect(await ws.storeEntries('layers')).toEqual([hexOf(one)]);
    const user = sandbox('user-1', two);
    await ws.dsec.hooks.resolveLayers.promise(user);
    expect(await fs.readFile(join(user.lowerDirs[0], 'a.txt'), 'utf8')).toBe('same\n');
    await ws.dsec.hooks.destroy.promise(user);
    await ws.dsec.hooks.unpublishLayer.promise(ws.node, 'app', '1.0.1');
    expect(await ws.storeEntries('layers')).toEqual([]);
    expect(await ws.storeEntries('refs')).toEqual([]);
  });

  it('leaves no tree behind when the ref cannot be written', async () => {
    const kept = await ws.publish(await dirLayer('kept@1.0.0', { 'k.txt': 'k\n' }));
    const refs = join(ws.store, 'refs');
    execFileSync('chattr', ['+i', refs]);
    try {
      const error = await rejectionOf(ws.publish(await dirLayer('lost@1.0.0', { 'l.txt': 'l\n' })));
      expect(error.message).toMatch(/EPERM|not permitted/);
    } finally {
      execFileSync('chattr', ['-i', refs]);
    }
    expect(await ws.storeEntries('layers')).toEqual([hexOf(kept)]);
    expect(await ws.storeEntries('refs')).toEqual(['kept@1.0.0.json']);
    expect(await ws.storeEntries('staging')).toEqual([]);
  });

  it('gives concurrent publishes of the same layer one record and one tree', async () => {
    const layer = await dirLayer('app@1.0.0', { 'a.txt': 'a\n', 'b/c.txt': 'c\n' });
    const records = await Promise.all([ws.publish(layer), ws.publish(layer), ws.publish(layer)]);
    expect(records[1]).toEqual(records[0]);
    expect(records[2]).toEqual(records[0]);
    expect(await ws.storeEntries('layers')).toEqual([hexOf(records[0])]);
    expect(await ws.storeEntries('staging')).toEqual([]);
  });

  it('lets exactly one of two concurrent publishes of different content under one name@version win', async () => {
    const results = await Promise.allSettled([
      ws.publish(await dirLayer('app@1.0.0', { 'a.txt': 'one\n' })),
      ws.publish(await dirLayer('app@1.0.0', { 'a.txt': 'two\n' })),
    ]);
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    const refused = results.find((result) => result.status === 'rejected') as PromiseRejectedResult;
    expect(refused.reason.code).toBe('DSEC_LAYER_IMMUTABLE');
    expect(await ws.storeEntries('layers')).toHaveLength(1);
  });

  it('refuses a name that cannot be a file name with DSEC_LAYER_SOURCE', async () => {
    const layer = { ...(await dirLayer('x@1.0.0', { 'a.txt': 'a' })), name: '../evil', ref: '../evil@1.0.0' };
    const error = await rejectionOf(ws.publish(layer));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain('name "../evil" cannot be stored');
  });

  it('removes staging dirs left by a process that is gone', async () => {
    const deadPid = 4_000_000; // above Linux's pid_max, so never alive
    const leftover = join(ws.store, 'staging', `${deadPid}-0123456789abcdef`, 'tree');
    await fs.mkdir(leftover, { recursive: true });
    await fs.writeFile(join(leftover, 'half.txt'), 'half');
    await ws.publish(await dirLayer('app@1.0.0', { 'a.txt': 'a\n' }));
    expect(await ws.storeEntries('staging')).toEqual([]);
  });
});

describe('resolving and the in-use registry', () => {
  it('records the layers a sandbox resolved and forgets them on destroy', async () => {
    const base = await ws.publish(await dirLayer('base@1.0.0', { 'etc/os': 'x\n' }));
    const tool = await ws.publish(await dirLayer('tool@1.0.0', { 'opt/tool': 't\n' }));
    const user = sandbox('sb-1', base, tool);
    await ws.dsec.hooks.resolveLayers.promise(user);
    expect(user.lowerDirs).toEqual([join(ws.store, 'layers', hexOf(base)), join(ws.store, 'layers', hexOf(tool))]);
    expect(user.storage).toEqual({
      plugin: PLUGIN_NAME,
      store: ws.store,
      layers: [
        { ref: 'base@1.0.0', digest: base.digest, path: user.lowerDirs[0] },
        { ref: 'tool@1.0.0', digest: tool.digest, path: user.lowerDirs[1] },
      ],
    });
    const inUse = JSON.parse(await fs.readFile(join(ws.store, 'inuse', 'sb-1.json'), 'utf8'));
    expect(inUse.layers).toEqual([
      { ref: 'base@1.0.0', digest: base.digest },
      { ref: 'tool@1.0.0', digest: tool.digest },
    ]);
    await ws.dsec.hooks.destroy.promise(user);
    expect(await ws.storeEntries('inuse')).toEqual([]);
  });

  it('refuses a digest other than the published one with DSEC_LAYER_DIGEST_MISMATCH naming both', async () => {
    const base = await ws.publish(await dirLayer('base@1.0.0', { 'a.txt': 'a\n' }));
    const wanted = `sha256:${'a'.repeat(64)}`;
    const error = await rejectionOf(ws.dsec.hooks.resolveLayers.promise(sandbox('sb-2', { ...base, digest: wanted })));
    expect(error.code).toBe('DSEC_LAYER_DIGEST_MISMATCH');
    expect(error.params).toEqual({ ref: 'base@1.0.0', published: base.digest, digest: wanted });
    expect(await ws.storeEntries('inuse')).toEqual([]);
  });

  it('reports a published layer whose tree vanished as DSEC_LAYER_STORE_CORRUPT, and publishing it again repairs it', async () => {
    const layer = await dirLayer('base@1.0.0', { 'a.txt': 'a\n' });
    const base = await ws.publish(layer);
    await fs.rm(join(ws.store, 'layers', hexOf(base)), { recursive: true });
    const error = await rejectionOf(ws.dsec.hooks.resolveLayers.promise(sandbox('sb-3', base)));
    expect(error.code).toBe('DSEC_LAYER_STORE_CORRUPT');
    expect(error.message).toContain(join(ws.store, 'layers', hexOf(base)));
    expect(await ws.publish(layer)).toEqual(base);
    const user = sandbox('sb-3', base);
    await ws.dsec.hooks.resolveLayers.promise(user);
    expect(await fs.readFile(join(user.lowerDirs[0], 'a.txt'), 'utf8')).toBe('a\n');
    await ws.dsec.hooks.destroy.promise(user);
  });

  it('refuses a sandbox id that cannot be a file name', async () => {
    const base = await ws.publish(await dirLayer('base@1.0.0', { 'a.txt': 'a\n' }));
    const error = await rejectionOf(ws.dsec.hooks.resolveLayers.promise(sandbox('../../escape', base)));
    expect(error.code).toBe('DSEC_USAGE');
  });
});

describe('listing', () => {
  it('skips a damaged ref file and says so in the log', async () => {
    const warnings: string[] = [];
    const log: Logger = { info() {}, debug() {}, warn: (message) => warnings.push(message) };
    const node = { ...ws.node, log };
    const dsec = new Dsec().use(storageLocal({ format: 'tree' }));
    const good = (await dsec.hooks.publishLayer.promise({ layer: await dirLayer('good@1.0.0', { 'a': 'a' }), node }))!;
    await fs.writeFile(join(ws.store, 'refs', 'bad@1.0.0.json'), '{ not json');
    expect(await dsec.hooks.listLayers.promise(node)).toEqual([good]);
    expect(warnings.join('\n')).toContain('bad@1.0.0.json');
  });
});

describe('options', () => {
  it('refuses an unknown option with DSEC_PLUGIN_OPTIONS', () => {
    expect(() => storageLocal({ rooot: '/x' } as never)).toThrow(
      'plugin storage-local has invalid options: unknown option rooot (known: root, format, compression)',
    );
  });

  it('refuses an unknown format with DSEC_PLUGIN_OPTIONS', () => {
    expect(() => storageLocal({ format: 'squashfs' } as never)).toThrow('option format must be one of auto, erofs, tree, got "squashfs"');
  });

  it('refuses a relative root with DSEC_PLUGIN_OPTIONS', () => {
    expect(() => storageLocal({ root: 'store' })).toThrow('option root must be an absolute path, got "store"');
  });

  it('keeps the store under the root option instead of the node root', async () => {
    const root = join(ws.root, 'elsewhere');
    const dsec = new Dsec().use(storageLocal({ root, format: 'tree' }));
    await dsec.hooks.publishLayer.promise({ layer: await dirLayer('app@1.0.0', { 'a': 'a' }), node: ws.node });
    expect(await fs.readdir(join(root, 'refs'))).toEqual(['app@1.0.0.json']);
    expect(await ws.storeEntries('refs')).toEqual([]);
  });

  it('taps every storage hook under its plugin name at the storage stage, and destroy at cleanup', () => {
    const dsec = new Dsec().use(storageLocal());
    const hooks = dsec.hooks;
    for (const hook of [hooks.digestLayer, hooks.publishLayer, hooks.listLayers, hooks.unpublishLayer, hooks.resolveLayers]) {
      expect(hook.taps.map((tap) => [tap.name, tap.stage])).toEqual([[PLUGIN_NAME, -10]]);
    }
    expect(hooks.destroy.taps.map((tap) => [tap.name, tap.stage])).toEqual([[PLUGIN_NAME, 20]]);
  });
});
