import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import * as tar from 'tar';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { pathExists } from '../../../core/layers/fsutil.js';
import {
  layerModel,
  makeWorkspace,
  rejectionOf,
  tarArchive,
  tarGz,
  writeTree,
  type TarEntry,
  type Workspace,
} from './helpers.js';

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.cleanup();
});

/** From the staging tree (`<root>/node/storage-local/staging/<id>/tree`), this many `..` reach the workspace root. */
const TO_WORKSPACE_ROOT = '../../../../../';

async function archiveLayer(name: string, data: Buffer, file = `${name}.tar`) {
  const path = join(ws.root, file);
  await fs.writeFile(path, data);
  return layerModel(`${name}@1.0.0`, { type: 'tar', path });
}

async function expectStoreEmpty(): Promise<void> {
  expect(await ws.list()).toEqual([]);
  expect(await ws.storeEntries('layers')).toEqual([]);
  expect(await ws.storeEntries('refs')).toEqual([]);
  expect(await ws.storeEntries('staging')).toEqual([]);
}

describe('unsafe archives', () => {
  async function expectRejected(entries: TarEntry[], entry: string, problem: RegExp): Promise<void> {
    const error = await rejectionOf(ws.publish(await archiveLayer('bad', tarArchive(entries))));
    expect(error.code).toBe('DSEC_LAYER_UNSAFE_ARCHIVE');
    expect(error.params).toMatchObject({ ref: 'bad@1.0.0', entry });
    expect(String(error.params?.problem)).toMatch(problem);
    expect(error.message).toContain(`layer bad@1.0.0: archive entry ${entry} `);
    await expectStoreEmpty();
  }

  it('rejects an entry with an absolute path and writes nothing there', async () => {
    const target = join(ws.root, 'abs-escaped');
    await expectRejected([{ path: 'ok.txt', content: 'ok' }, { path: target, content: 'pwned' }], target, /absolute path/);
    expect(await pathExists(target)).toBe(false);
  });

  it("rejects an entry with a '..' component and writes nothing outside", async () => {
    const path = `${TO_WORKSPACE_ROOT}escaped`;
    await expectRejected([{ path, content: 'pwned' }], path, /'\.\.' path component/);
    expect(await pathExists(join(ws.root, 'escaped'))).toBe(false);
  });

  it("rejects a '..' that stays inside the archive too", async () => {
    await expectRejected([{ path: 'a/../b', content: 'x' }], 'a/../b', /'\.\.' path component/);
  });

  it('rejects a character device node other than 0:0 (a whiteout)', async () => {
    await expectRejected(
      [{ path: 'dev/', type: '5' }, { path: 'dev/null', type: '3', devmajor: 1, devminor: 3 }],
      'dev/null',
      /character device node \(only 0:0, a whiteout, is allowed\)/,
    );
  });

  it('rejects a block device node', async () => {
    await expectRejected([{ path: 'dev/sda', type: '4' }], 'dev/sda', /block device/);
    await expectRejected([{ path: 'dev/zero', type: '4', devmajor: 0, devminor: 0 }], 'dev/zero', /block device/);
  });

  it('rejects a FIFO and an unsupported entry type', async () => {
    await expectRejected([{ path: 'pipe', type: '6' }], 'pipe', /FIFO/);
    await expectRejected([{ path: 'sparse', type: 'S' }], 'sparse', /unsupported entry type/);
  });

  it('rejects a hard link whose target climbs out of the archive, and links nothing', async () => {
    const secret = join(ws.root, 'secret');
    await fs.writeFile(secret, 'host secret');
    await expectRejected(
      [{ path: 'ok', content: 'ok' }, { path: 'leak', type: '1', linkpath: `${TO_WORKSPACE_ROOT}secret` }],
      'leak',
      /outside the archive root/,
    );
    expect((await fs.stat(secret)).nlink).toBe(1);
  });

  it("rejects a hard link whose target has a '..' component even when it stays inside", async () => {
    await expectRejected(
      [{ path: 'd/', type: '5' }, { path: 'x', content: 'x' }, { path: 'l', type: '1', linkpath: 'd/../x' }],
      'l',
      /'\.\.' component/,
    );
  });

  it('rejects a hard link to an absolute path', async () => {
    await expectRejected([{ path: 'passwd', type: '1', linkpath: '/etc/passwd' }], 'passwd', /outside the archive root/);
  });

  it('rejects a hard link to something that is not an earlier file of the archive', async () => {
    await expectRejected([{ path: 'link', type: '1', linkpath: 'later' }, { path: 'later', content: 'x' }], 'link', /not a file earlier/);
  });

  it('rejects a relative symlink that climbs above the layer root', async () => {
    await expectRejected(
      [{ path: 'etc/', type: '5' }, { path: 'etc/evil', type: '2', linkpath: '../../host' }],
      'etc/evil',
      /climbs above the layer root/,
    );
  });

  it('rejects an entry that would be written through a symlink of the archive, and writes nothing there', async () => {
    const outside = join(ws.root, 'outside');
    await fs.mkdir(outside);
    await expectRejected(
      [{ path: 'out', type: '2', linkpath: outside }, { path: 'out/pwned', content: 'pwned' }],
      'out/pwned',
      /under the symlink out/,
    );
    expect(await fs.readdir(outside)).toEqual([]);
  });

  it('rejects a hard link made through a symlink of the archive', async () => {
    await expectRejected(
      [{ path: 'etc', type: '2', linkpath: '/etc' }, { path: 'shadow', type: '1', linkpath: 'etc/shadow' }],
      'shadow',
      /through the symlink etc/,
    );
  });

  it('rejects the archive from digestLayer too, leaving no staging behind', async () => {
    const layer = await archiveLayer('bad', tarArchive([{ path: '/etc/x', content: 'x' }]));
    const error = await rejectionOf(ws.digest(layer));
    expect(error.code).toBe('DSEC_LAYER_UNSAFE_ARCHIVE');
    expect(await ws.storeEntries('staging')).toEqual([]);
  });
});

describe('damaged and foreign archives', () => {
  it('rejects a truncated .tar.gz with DSEC_LAYER_SOURCE and leaves nothing in layers/ or refs/', async () => {
    const whole = tarGz([
      { path: 'bin/', type: '5' },
      { path: 'bin/blob', content: randomBytes(64 * 1024).toString('base64') },
    ]);
    const layer = await archiveLayer('cut', whole.subarray(0, Math.floor(whole.length / 2)), 'cut.tar.gz');
    const error = await rejectionOf(ws.publish(layer));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toMatch(/^layer cut@1\.0\.0: archive .*cut\.tar\.gz is corrupt or truncated: /);
    await expectStoreEmpty();
  });

  it('rejects a plain tar cut right after an entry, which would otherwise parse as a shorter archive', async () => {
    const whole = tarArchive([
      { path: 'a.txt', content: 'a' },
      { path: 'b.txt', content: 'b' },
    ]);
    // Header and one data block of a.txt, then half of b.txt's header.
    const layer = await archiveLayer('cut', whole.subarray(0, 1024 + 256));
    const error = await rejectionOf(ws.publish(layer));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain('ends without the end-of-archive marker');
    await expectStoreEmpty();
  });

  it('rejects a file that is not a tar archive with DSEC_LAYER_SOURCE', async () => {
    const layer = await archiveLayer('junk', randomBytes(4096));
    const error = await rejectionOf(ws.publish(layer));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain('corrupt or truncated');
    await expectStoreEmpty();
  });

  it('names an xz-compressed archive instead of calling it corrupt', async () => {
    const layer = await archiveLayer('xz', Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 0, 0]), 'xz.tar.xz');
    const error = await rejectionOf(ws.publish(layer));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain('xz-compressed; only .tar and .tar.gz are supported');
  });

  it('reports a missing archive with DSEC_LAYER_SOURCE', async () => {
    const missing = join(ws.root, 'missing.tar');
    const error = await rejectionOf(ws.publish(layerModel('gone@1.0.0', { type: 'tar', path: missing })));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toBe(`layer gone@1.0.0: archive ${missing} does not exist`);
  });
});

describe('safe archives', () => {
  it('extracts modes, owners, symlinks, hard links and mtimes exactly as the headers say', async () => {
    const layer = await archiveLayer(
      'good',
      tarArchive([
        { path: './', type: '5', mode: 0o700 },
        { path: './bin/', type: '5', mode: 0o555 },
        { path: './bin/tool', content: '#!/bin/sh\n', mode: 0o4755, uid: 1234, gid: 5678 },
        { path: './bin/tool2', type: '1', linkpath: './bin/tool' },
        { path: './bin/sh', type: '2', linkpath: '/bin/busybox', uid: 7, gid: 8 },
        { path: './usr/lib/x', type: '2', linkpath: '../../bin/tool' },
        { path: './tmp/', type: '5', mode: 0o1777, mtime: 1_000_000_000 },
      ]),
      'good.tgz',
    );
    const record = await ws.publish(layer);
    const tree = join(ws.store, 'layers', record.digest.slice('sha256:'.length));
    const tool = await fs.lstat(join(tree, 'bin/tool'));
    expect(tool.mode & 0o7777).toBe(0o4755);
    expect([tool.uid, tool.gid]).toEqual([1234, 5678]);
    expect(tool.nlink).toBe(2);
    expect((await fs.lstat(join(tree, 'bin'))).mode & 0o7777).toBe(0o555);
    expect(await fs.readlink(join(tree, 'bin/sh'))).toBe('/bin/busybox');
    expect([(await fs.lstat(join(tree, 'bin/sh'))).uid, (await fs.lstat(join(tree, 'bin/sh'))).gid]).toEqual([7, 8]);
    expect(await fs.readlink(join(tree, 'usr/lib/x'))).toBe('../../bin/tool');
    const tmp = await fs.lstat(join(tree, 'tmp'));
    expect(tmp.mode & 0o7777).toBe(0o1777);
    expect(tmp.mtimeMs).toBe(1_000_000_000_000);
    // Parents the archive did not list, and the root, get fixed modes.
    expect((await fs.lstat(join(tree, 'usr'))).mode & 0o7777).toBe(0o755);
    expect((await fs.lstat(tree)).mode & 0o7777).toBe(0o755);
    expect(await ws.digest(layer)).toBe(record.digest);
  });

  it.each(['gnu', 'pax'])(
    'gives an archive GNU tar made in %s format (long names, hard links, setgid) the digest of its tree',
    async (format) => {
      const dir = await writeTree(join(ws.root, 'src'), { 'etc/passwd': 'root:x:0:0::/root:/bin/sh\n', 'etc/group': 'root:x:0:\n' });
      const deep = join(dir, 'x'.repeat(60), 'y'.repeat(60));
      await writeTree(deep, { [`long-name-${'q'.repeat(80)}`]: 'long\n' });
      await fs.symlink(`/${'w'.repeat(150)}`, join(dir, 'long-link'));
      await fs.link(join(dir, 'etc/passwd'), join(dir, 'etc/passwd-'));
      await fs.chmod(join(dir, 'etc/group'), 0o2640);
      const archive = join(ws.root, `src-${format}.tgz`);
      execFileSync('tar', [`--format=${format}`, '-C', dir, '-czf', archive, '.']);
      const fromDir = await ws.digest(layerModel('src@1.0.0', { type: 'dir', path: dir }));
      const record = await ws.publish(layerModel('src@1.0.0', { type: 'tar', path: archive }));
      expect(record.digest).toBe(fromDir);
    },
  );

  it('gives a tree the same digest whether it comes from a directory or from a tar.gz of it', async () => {
    const dir = await writeTree(join(ws.root, 'src'), { 'etc/conf': 'x=1\n', 'bin/run': '#!/bin/sh\n' });
    await fs.chmod(join(dir, 'bin/run'), 0o750);
    await fs.chown(join(dir, 'etc/conf'), 100, 200);
    await fs.symlink('/bin/run', join(dir, 'link'));
    const archive = join(ws.root, 'src.tar.gz');
    await tar.c({ gzip: true, file: archive, cwd: dir, portable: false }, ['.']);
    const fromDir = await ws.digest(layerModel('src@1.0.0', { type: 'dir', path: dir }));
    const fromTar = await ws.digest(layerModel('src@1.0.0', { type: 'tar', path: archive }));
    expect(fromTar).toBe(fromDir);
  });
});
