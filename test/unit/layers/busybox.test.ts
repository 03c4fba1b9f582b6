import { execFileSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { layerModel, makeWorkspace, rejectionOf, type Workspace } from './helpers.js';

const BUSYBOX = '/bin/busybox';

let ws: Workspace;
beforeEach(async () => {
  ws = await makeWorkspace();
});
afterEach(async () => {
  await ws.cleanup();
});

// scripts/setup.sh installs busybox-static; without it this must fail, not skip.
describe('busybox layers', () => {
  it('builds a root filesystem whose busybox runs and whose applets link to it', async () => {
    const record = await ws.publish(layerModel('base@1.0.0', { type: 'busybox', path: BUSYBOX }));
    const tree = join(ws.store, 'layers', record.digest.slice('sha256:'.length));
    expect(await fs.readlink(join(tree, 'bin/sh'))).toBe('/bin/busybox');
    expect(execFileSync(join(tree, 'bin/busybox'), ['echo', 'ok'], { encoding: 'utf8' })).toBe('ok\n');
    const tmp = await fs.stat(join(tree, 'tmp'));
    expect(tmp.mode & 0o7777).toBe(0o1777);
    expect((await fs.stat(join(tree, 'root'))).mode & 0o7777).toBe(0o700);
    for (const dir of ['dev', 'proc', 'sys', 'etc', 'var', 'run', 'home', 'usr/bin', 'usr/sbin', 'sbin']) {
      expect((await fs.stat(join(tree, dir))).isDirectory(), dir).toBe(true);
    }
    expect(await fs.readFile(join(tree, 'etc/passwd'), 'utf8')).toMatch(/^root:x:0:0:root:\/root:\/bin\/sh\nnobody:/);
    expect(await fs.readFile(join(tree, 'etc/group'), 'utf8')).toMatch(/^root:x:0:\n/);
    const busybox = await fs.stat(join(tree, 'bin/busybox'));
    expect([busybox.mode & 0o7777, busybox.uid, busybox.gid]).toEqual([0o755, 0, 0]);
    // Every applet busybox lists is a link to it (it lists itself too: that one is the binary).
    const applets = execFileSync(BUSYBOX, ['--list-full'], { encoding: 'utf8' }).trim().split('\n');
    for (const applet of applets.filter((path) => path !== 'bin/busybox')) {
      expect(await fs.readlink(join(tree, applet)), applet).toBe('/bin/busybox');
    }
  });

  it('gives the same busybox binary the same digest every time', async () => {
    const layer = layerModel('base@1.0.0', { type: 'busybox', path: BUSYBOX });
    const first = await ws.digest(layer);
    const other = await makeWorkspace();
    try {
      expect(await other.digest(layer)).toBe(first);
      expect((await other.publish(layer)).digest).toBe(first);
    } finally {
      await other.cleanup();
    }
  });

  it('says to install busybox-static when the binary is missing', async () => {
    const missing = join(ws.root, 'no-busybox');
    const error = await rejectionOf(ws.publish(layerModel('base@1.0.0', { type: 'busybox', path: missing })));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toBe(
      `layer base@1.0.0: busybox binary ${missing} not found; install busybox-static (scripts/setup.sh does)`,
    );
    expect(await ws.storeEntries('staging')).toEqual([]);
  });

  it('refuses a dynamically linked binary, whose /bin/sh could not start without a libc', async () => {
    const error = await rejectionOf(ws.digest(layerModel('base@1.0.0', { type: 'busybox', path: '/bin/ls' })));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain('/bin/ls is dynamically linked; a base layer needs the static build');
  });
});
