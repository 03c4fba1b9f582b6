import { execFileSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { digestTree, findOpaqueDirs, isWhiteout, makeWhiteouts, markOpaque, squashLayers, walkTree } from '../../../core/layers/index.js';
import type { LayerRecord } from '../../../core/plugin-api.js';
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

/** The four layers of an environment: a base, a workspace, two toolkits deleting and replacing things below them. */
async function environment(): Promise<LayerRecord[]> {
  const base = await ws.publishDir('base@1.0.0', {
    'etc/passwd': 'root\n',
    'etc/secret': 'base secret\n',
    'opt/tool/old.sh': 'old\n',
    'usr/lib/x': 'x\n',
  });
  const workspace = await ws.publishDir('repo@1.0.0', { 'work/main.py': 'print(1)\n' }, 'workspace');
  const first = await ws.publishDir('tool@1.0.0', { 'opt/tool/new.sh': 'new\n', 'etc/motd': 'tool 1\n' }, 'toolkit', async (dir) => {
    await markOpaque([join(dir, 'opt/tool')]);
  });
  const second = await ws.publishDir('harness@1.0.0', { 'etc/motd': 'harness\n', 'usr/lib/y': 'y\n' }, 'toolkit', async (dir) => {
    await fs.mkdir(join(dir, 'work'));
    await makeWhiteouts([join(dir, 'etc/secret'), join(dir, 'work/main.py')]);
  });
  return [base, workspace, first, second];
}

/** What a read-only overlay of `lowerDirs` (bottom to top) shows: its canonical listing. */
async function overlayView(lowerDirs: readonly string[], name: string): Promise<string> {
  // overlayfs wants two lower dirs at least when it has no upper one; one tree is its own view.
  if (lowerDirs.length === 1) return (await digestTree(lowerDirs[0], name)).listing;
  const target = join(ws.root, 'views', name);
  await fs.mkdir(target, { recursive: true });
  execFileSync('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${[...lowerDirs].reverse().join(':')}`, target]);
  try {
    return (await digestTree(target, name)).listing;
  } finally {
    execFileSync('umount', [target]);
  }
}

describe('squashing a run of layers', () => {
  it('merges a run that starts at the base into one image without whiteouts, with what the overlay of its layers shows', async () => {
    const layers = await environment();
    const unsquashed = await ws.store.resolve('before', layers.map(refOf));
    expect(unsquashed).toHaveLength(4);
    const expected = await overlayView(unsquashed.map((layer) => layer.path), 'before');
    await ws.store.release('before');

    const squash = await squashLayers(ws.store, layers.map(refOf));
    expect(squash).toMatchObject({ bottom: true, format: 'erofs', layers: layers.map(refOf) });
    const resolved = await ws.store.resolve('after', layers.map(refOf));
    expect(resolved).toEqual([
      { ref: 'base@1.0.0+repo@1.0.0+tool@1.0.0+harness@1.0.0', digest: squash.digest, path: join(ws.store.dir, 'mnt', squash.digest.slice(7)), squashed: layers.map((layer) => layer.digest),
        // The squashed image itself, for VM backends that hand layers to a guest as block devices.
        image: { format: 'erofs', path: join(ws.store.dir, 'layers', `${squash.digest.slice(7)}.erofs`) } },
    ]);
    const merged = resolved[0].path;
    expect((await walkTree(merged, 'merged')).map((entry) => entry.type)).not.toContain('whiteout');
    expect(await findOpaqueDirs(merged)).toEqual(new Set());
    await expect(fs.readFile(join(merged, 'etc/secret'))).rejects.toThrow(/ENOENT/);
    expect(await fs.readdir(join(merged, 'opt/tool'))).toEqual(['new.sh']);
    expect(await overlayView([merged], 'after')).toBe(expected);
    await ws.store.release('after');
    expect(leftovers(ws.root)).toEqual({ mounts: [], loops: [] });
  });

  it('keeps whiteouts and opaque marks in a run above the base, so they still hide what is below it', async () => {
    const layers = await environment();
    const all = layers.map(refOf);
    const unsquashed = await ws.store.resolve('before', all);
    const expected = await overlayView(unsquashed.map((layer) => layer.path), 'before');
    await ws.store.release('before');

    const squash = await squashLayers(ws.store, all.slice(2));
    expect(squash.bottom).toBe(false);
    const resolved = await ws.store.resolve('after', all);
    expect(resolved.map((layer) => layer.digest)).toEqual([layers[0].digest, layers[1].digest, squash.digest]);
    const merged = resolved[2].path;
    // The whiteout of a base file, kept: the base is still below.
    expect(isWhiteout(await fs.lstat(join(merged, 'etc/secret')))).toBe(true);
    expect(isWhiteout(await fs.lstat(join(merged, 'work/main.py')))).toBe(true);
    expect(await findOpaqueDirs(merged)).toEqual(new Set([join(merged, 'opt/tool')]));
    expect(await overlayView(resolved.map((layer) => layer.path), 'after')).toBe(expected);
    await ws.store.release('after');
  });

  it('uses a squash only where a sandbox stacks exactly its run, and a bottom squash only at the bottom', async () => {
    const [base, workspace, first, second] = await environment();
    const upper = await squashLayers(ws.store, [first, second].map(refOf));
    const bottom = await squashLayers(ws.store, [base, workspace].map(refOf));
    const partial = await ws.store.resolve('partial', [base, first].map(refOf));
    expect(partial.map((layer) => layer.digest)).toEqual([base.digest, first.digest]);
    const stacked = await ws.store.resolve('stacked', [base, workspace, first, second].map(refOf));
    expect(stacked.map((layer) => layer.digest)).toEqual([bottom.digest, upper.digest]);
    await ws.store.release('partial');
    await ws.store.release('stacked');
    expect(leftovers(ws.root)).toEqual({ mounts: [], loops: [] });
  });

  it('answers a second squash of the same run with the same record', async () => {
    const layers = (await environment()).slice(2).map(refOf);
    const once = await squashLayers(ws.store, layers);
    expect(await squashLayers(ws.store, layers)).toEqual(once);
  });

  it('refuses a run of one layer, and a layer not published with the given digest, with DSEC_LAYER_SQUASH', async () => {
    const [base, workspace] = await environment();
    const single = await rejectionOf(squashLayers(ws.store, [refOf(base)]));
    expect(single.code).toBe('DSEC_LAYER_SQUASH');
    expect(single.message).toBe('cannot squash base@1.0.0: a squash needs at least two consecutive layers');
    const wrong = await rejectionOf(squashLayers(ws.store, [refOf(base), { ...refOf(workspace), digest: `sha256:${'0'.repeat(64)}` }]));
    expect(wrong.code).toBe('DSEC_LAYER_SQUASH');
    expect(wrong.message).toContain(`repo@1.0.0 is published with digest ${workspace.digest}`);
    expect(leftovers(ws.root)).toEqual({ mounts: [], loops: [] });
  });

  it('drops the squash and its image once one of its layers is unpublished', async () => {
    const [, , first, second] = await environment();
    const squash = await squashLayers(ws.store, [first, second].map(refOf));
    await ws.store.remove('harness', '1.0.0');
    expect(await fs.readdir(join(ws.store.dir, 'squashes'))).toEqual([]);
    const layers = await fs.readdir(join(ws.store.dir, 'layers'));
    expect(layers.some((name) => name.startsWith(squash.digest.slice(7)))).toBe(false);
  });
});
