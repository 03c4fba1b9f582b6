import { execFileSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { applyLayerTree, flattenLayers } from '../../../core/layers/apply-layer.js';
import { digestTree, walkTree } from '../../../core/layers/digest.js';
import { findOpaqueDirs, isWhiteout, makeWhiteouts, markOpaque } from '../../../core/layers/overlay-marks.js';
import { layerModel, makeWorkspace, rejectionOf, tarArchive, writeTree, type TarEntry, type Workspace } from './helpers.js';

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.cleanup();
});

async function whiteoutAt(path: string): Promise<boolean> {
  try {
    return isWhiteout(await fs.lstat(path));
  } catch {
    return false;
  }
}

async function opaqueAt(path: string): Promise<boolean> {
  return (await findOpaqueDirs(path)).has(path);
}

async function exists(path: string): Promise<boolean> {
  return fs.lstat(path).then(
    () => true,
    () => false,
  );
}

/** A tree with a file, a whiteout `gone` and an opaque dir `fresh/`. */
async function markedTree(dir: string): Promise<string> {
  await writeTree(dir, { 'keep.txt': 'keep\n', 'fresh/new.txt': 'new\n' });
  await makeWhiteouts([join(dir, 'gone')]);
  await markOpaque([join(dir, 'fresh')]);
  return dir;
}

describe('whiteouts and opaque directories in the canonical listing', () => {
  it('lists a char 0:0 device as a whiteout and an opaque dir with its mark', async () => {
    const dir = await markedTree(join(ws.root, 'tree'));
    const rows = (await digestTree(dir, 't@1')).listing.trimEnd().split('\n').slice(1).map((line) => JSON.parse(line));
    expect(rows).toContainEqual(['gone', 'whiteout', '0000', 0, 0, 0, '']);
    expect(rows).toContainEqual(['fresh', 'dir', '0755', 0, 0, 0, 'opaque']);
    const entries = await walkTree(dir, 't@1');
    expect(entries.find((entry) => entry.path === 'fresh')?.opaque).toBe(true);
  });

  it("ignores a whiteout's mode and owner, which overlayfs never reads", async () => {
    const a = await markedTree(join(ws.root, 'a'));
    const b = await markedTree(join(ws.root, 'b'));
    await fs.lchown(join(b, 'gone'), 1000, 1000);
    await fs.chmod(join(b, 'gone'), 0o644);
    expect((await digestTree(b, 'b@1')).digest).toBe((await digestTree(a, 'a@1')).digest);
  });

  it('gives a different digest when a directory becomes opaque or a whiteout appears', async () => {
    const dir = await writeTree(join(ws.root, 'tree'), { 'd/x': 'x' });
    const plain = (await digestTree(dir, 't@1')).digest;
    await markOpaque([join(dir, 'd')]);
    const opaque = (await digestTree(dir, 't@1')).digest;
    expect(opaque).not.toBe(plain);
    await makeWhiteouts([join(dir, 'w')]);
    expect((await digestTree(dir, 't@1')).digest).not.toBe(opaque);
  });

  it('still refuses other character devices in a tree', async () => {
    const dir = await writeTree(join(ws.root, 'tree'), { a: 'a' });
    execFileSync('mknod', [join(dir, 'null'), 'c', '1', '3']);
    const error = await rejectionOf(digestTree(dir, 't@1'));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain('is a character device');
  });
});

describe('whiteouts in layer sources', () => {
  it('publishes a dir source with its whiteouts and opaque dirs', async () => {
    const dir = await markedTree(join(ws.root, 'src'));
    const record = await ws.publish(layerModel('marked@1.0.0', { type: 'dir', path: dir }));
    expect(record.digest).toBe((await digestTree(dir, 'src')).digest);
  });

  it("turns an OCI archive's .wh. entries into whiteouts and opaque dirs with the digest of the native tree", async () => {
    const native = await markedTree(join(ws.root, 'native'));
    const entries: TarEntry[] = [
      { path: 'keep.txt', content: 'keep\n' },
      { path: '.wh.gone', content: '' },
      { path: 'fresh/', type: '5' },
      { path: 'fresh/.wh..wh..opq', content: '' },
      { path: 'fresh/new.txt', content: 'new\n' },
      { path: '.wh..wh.plnk', type: '5' },
    ];
    const archive = join(ws.root, 'oci-layer.tar');
    await fs.writeFile(archive, tarArchive(entries));
    // mtimes differ from the native tree's, and are not in the digest.
    expect(await ws.digest(layerModel('oci@1.0.0', { type: 'tar', path: archive }))).toBe((await digestTree(native, 'n')).digest);
  });

  it('takes a char 0:0 device in an archive as a whiteout', async () => {
    const archive = join(ws.root, 'upper.tar');
    await fs.writeFile(archive, tarArchive([{ path: 'etc/', type: '5' }, { path: 'etc/motd', type: '3', devmajor: 0, devminor: 0 }]));
    const expected = join(ws.root, 'expected');
    await fs.mkdir(join(expected, 'etc'), { recursive: true });
    await makeWhiteouts([join(expected, 'etc/motd')]);
    expect(await ws.digest(layerModel('up@1.0.0', { type: 'tar', path: archive }))).toBe((await digestTree(expected, 'e')).digest);
  });

  it('keeps a path the same archive holds over its own whiteout', async () => {
    const archive = join(ws.root, 'both.tar');
    await fs.writeFile(archive, tarArchive([{ path: '.wh.x', content: '' }, { path: 'x', content: 'x\n' }]));
    const record = await ws.publish(layerModel('both@1.0.0', { type: 'tar', path: archive }));
    const plain = await writeTree(join(ws.root, 'plain'), { x: 'x\n' });
    expect(record.digest).toBe((await digestTree(plain, 'p')).digest);
  });

  it.each<[string, TarEntry[], string, RegExp]>([
    ['a whiteout under a symlink of the archive', [{ path: 'l', type: '2', linkpath: '/etc' }, { path: 'l/.wh.passwd', content: '' }], 'l/.wh.passwd', /under the symlink l/],
    ['an opaque marker on the layer root', [{ path: './.wh..wh..opq', content: '' }], './.wh..wh..opq', /layer root opaque/],
    ['an opaque marker in a file', [{ path: 'f', content: 'f' }, { path: 'f/.wh..wh..opq', content: '' }], 'f/.wh..wh..opq', /marks f opaque, but it is a file/],
    ['a whiteout that names nothing', [{ path: 'd/.wh.', content: '' }], 'd/.wh.', /names no entry/],
    ['a whiteout name on a directory', [{ path: '.wh.d/', type: '5' }], '.wh.d/', /not a file/],
  ])('refuses %s with DSEC_LAYER_UNSAFE_ARCHIVE', async (_what, entries, entry, problem) => {
    const archive = join(ws.root, 'bad.tar');
    await fs.writeFile(archive, tarArchive(entries));
    const error = await rejectionOf(ws.publish(layerModel('bad@1.0.0', { type: 'tar', path: archive })));
    expect(error.code).toBe('DSEC_LAYER_UNSAFE_ARCHIVE');
    expect(error.params).toMatchObject({ ref: 'bad@1.0.0', entry });
    expect(String(error.params?.problem)).toMatch(problem);
    expect(await ws.list()).toEqual([]);
  });
});

describe('applyLayerTree', () => {
  async function lower(): Promise<string> {
    return writeTree(join(ws.root, 'lower'), {
      'etc/passwd': 'root\n',
      'etc/secret': 'secret\n',
      'opt/tool/old.sh': 'old\n',
      'opt/tool/keep.sh': 'keep\n',
      'var/file-then-dir': 'file\n',
    });
  }

  async function upper(): Promise<string> {
    const dir = await writeTree(join(ws.root, 'upper'), {
      'etc/motd': 'hello\n',
      'opt/tool/new.sh': 'new\n',
      'var/file-then-dir/inside': 'inside\n',
    });
    await makeWhiteouts([join(dir, 'etc/secret')]);
    await markOpaque([join(dir, 'opt/tool')]);
    return dir;
  }

  it('at the bottom of a stack, deletes what whiteouts hide, empties opaque dirs, and leaves no mark', async () => {
    const target = join(ws.root, 'flat');
    await fs.mkdir(target);
    await flattenLayers(target, [await lower(), await upper()]);
    expect(await fs.readFile(join(target, 'etc/passwd'), 'utf8')).toBe('root\n');
    expect(await fs.readFile(join(target, 'etc/motd'), 'utf8')).toBe('hello\n');
    expect(await exists(join(target, 'etc/secret'))).toBe(false);
    expect((await fs.readdir(join(target, 'opt/tool'))).sort()).toEqual(['new.sh']);
    expect(await fs.readFile(join(target, 'var/file-then-dir/inside'), 'utf8')).toBe('inside\n');
    expect(await findOpaqueDirs(target)).toEqual(new Set());
    const types = (await walkTree(target, 'flat')).map((entry) => entry.type);
    expect(types).not.toContain('whiteout');
  });

  it('above other layers, keeps whiteouts and marks opaque every dir whose lower content is hidden', async () => {
    const target = join(ws.root, 'squash');
    await fs.mkdir(target);
    await flattenLayers(target, [await lower(), await upper()], { keepMarks: true });
    expect(await whiteoutAt(join(target, 'etc/secret'))).toBe(true);
    expect(await opaqueAt(join(target, 'opt/tool'))).toBe(true);
    // A directory over a file of the run stops the merge, so layers below the run must not show through.
    expect(await opaqueAt(join(target, 'var/file-then-dir'))).toBe(true);
    expect(await opaqueAt(join(target, 'etc'))).toBe(false);
  });

  it('lets a later layer bring back a path an earlier one whited out', async () => {
    const target = join(ws.root, 'back');
    await fs.mkdir(target);
    const hide = join(ws.root, 'hide');
    await fs.mkdir(hide);
    await makeWhiteouts([join(hide, 'x')]);
    const restore = await writeTree(join(ws.root, 'restore'), { x: 'again\n' });
    await applyLayerTree(target, await writeTree(join(ws.root, 'first'), { x: 'first\n' }), { keepMarks: true });
    await applyLayerTree(target, hide, { keepMarks: true });
    expect(await whiteoutAt(join(target, 'x'))).toBe(true);
    await applyLayerTree(target, restore, { keepMarks: true });
    expect(await fs.readFile(join(target, 'x'), 'utf8')).toBe('again\n');
  });

  it('never writes through a symlink of the target', async () => {
    const outside = join(ws.root, 'outside');
    await fs.mkdir(outside);
    const target = join(ws.root, 'target');
    await fs.mkdir(target);
    await fs.symlink(outside, join(target, 'd'));
    await applyLayerTree(target, await writeTree(join(ws.root, 'layer'), { 'd/file': 'x' }));
    expect(await fs.readdir(outside)).toEqual([]);
    expect((await fs.lstat(join(target, 'd'))).isDirectory()).toBe(true);
  });
});
