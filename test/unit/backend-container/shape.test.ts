/**
 * ContainerShape in the container backend: the OCI config a shaped sandbox
 * gets (its own init, binds, capped tmpfs, a read-only root), what shapes are
 * refused, the read-only overlay's options, and the layer of mount points a
 * read-only root is given.
 */
import { lstat, mkdir, mkdtemp, readdir, rm, symlink, writeFile, chmod } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ContainerShape } from '../../../core/plugin-api.js';
import { bundleConfig, READONLY_PATHS, SANDBOX_INIT, type BundleInput } from '../../../plugins/backend-container/bundle.js';
import { overlayOptions } from '../../../plugins/backend-container/rootfs.js';
import { buildMountPointLayer, checkContainerShape, mountPointsOf } from '../../../plugins/backend-container/shape.js';

const input: BundleInput = {
  sandboxId: 'pool-0',
  rootfs: '/var/dsec/agent/sandboxes/pool-0/rootfs',
  env: {},
  workdir: '/',
  user: { uid: 0, gid: 0 },
  resources: { cpu: 1, memoryMiB: 128, pids: 64 },
  cgroupsPath: '/dsec/dsec-12345678-pool-0',
};

const workerShape: ContainerShape = {
  init: ['/.dsec/guest', '--listen', '/.dsec/run/agent.sock'],
  binds: [{ source: '/opt/dsec/dsec-guest', target: '/.dsec/guest', readonly: true }],
  tmpfs: [
    { target: '/work', sizeMiB: 64 },
    { target: '/.dsec/run', sizeMiB: 1 },
  ],
  readonlyRoot: true,
};

describe('the OCI config of a shaped sandbox', () => {
  const config = bundleConfig({ ...input, shape: workerShape });

  it('runs the shape init as PID 1, behind busybox that first trades the host log for /dev/null', () => {
    expect(config.process.args).toEqual([
      '/.dsec/busybox',
      'sh',
      '-c',
      'exec </dev/null >/dev/null 2>&1; exec "$@"',
      'dsec-init',
      '/.dsec/guest',
      '--listen',
      '/.dsec/run/agent.sock',
    ]);
  });

  it('bind-mounts each source after the backend busybox, read-only when asked, never with devices or setuid', () => {
    const bind = config.mounts.find((mount) => mount.destination === '/.dsec/guest');
    expect(bind).toEqual({ destination: '/.dsec/guest', type: 'bind', source: '/opt/dsec/dsec-guest', options: ['rbind', 'ro', 'nosuid', 'nodev'] });
    const order = config.mounts.map((mount) => mount.destination);
    expect(order.indexOf('/.dsec/guest')).toBeGreaterThan(order.indexOf('/.dsec/busybox'));
    const writable = bundleConfig({ ...input, shape: { binds: [{ source: '/srv/data', target: '/data', readonly: false }] } });
    expect(writable.mounts.at(-1)?.options).toEqual(['rbind', 'rw', 'nosuid', 'nodev']);
  });

  it('mounts each tmpfs with its size cap in MiB', () => {
    const scratch = config.mounts.filter((mount) => mount.type === 'tmpfs' && ['/work', '/.dsec/run'].includes(mount.destination));
    expect(scratch).toEqual([
      { destination: '/work', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777', 'size=64m'] },
      { destination: '/.dsec/run', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777', 'size=1m'] },
    ]);
  });

  it('keeps a read-only root read-only inside, /dev included, and leaves the writable default alone', () => {
    expect(config.root).toEqual({ path: input.rootfs, readonly: true });
    expect(config.linux.readonlyPaths).toEqual([...READONLY_PATHS, '/dev']);
    const plain = bundleConfig(input);
    expect(plain.root.readonly).toBe(false);
    expect(plain.linux.readonlyPaths).toEqual([...READONLY_PATHS]);
    expect(plain.process.args).toEqual([...SANDBOX_INIT]);
    expect(bundleConfig({ ...input, shape: {} })).toEqual(plain);
  });

  it('keeps every isolation setting of an ordinary sandbox', () => {
    const plain = bundleConfig(input);
    expect(config.linux.namespaces).toEqual(plain.linux.namespaces);
    expect(config.linux.seccomp).toEqual(plain.linux.seccomp);
    expect(config.linux.maskedPaths).toEqual(plain.linux.maskedPaths);
    expect(config.process.capabilities).toEqual(plain.process.capabilities);
    expect(config.process.noNewPrivileges).toBe(true);
  });
});

describe('checking a shape', () => {
  it('accepts the FnCall worker shape', () => {
    expect(checkContainerShape(workerShape)).toEqual([]);
  });

  it('names every problem of a shape it cannot honour', () => {
    const problems = checkContainerShape({
      init: ['guest'],
      binds: [
        { source: 'relative', target: '/a', readonly: true },
        { source: '/x', target: '/proc/self', readonly: true },
        { source: '/x', target: '/.dsec', readonly: true },
      ],
      tmpfs: [
        { target: '/work/../etc', sizeMiB: 1 },
        { target: '/t', sizeMiB: 0 },
        { target: '/a', sizeMiB: 1 },
      ],
    });
    expect(problems).toEqual([
      'init[0] must be an absolute path inside the sandbox, not "guest"',
      'binds[0].source must be an absolute host path',
      'binds[1].target /proc/self is on /proc, which the container backend mounts itself',
      "binds[2].target must not be /.dsec itself (it holds dsec's own files); use a path under it",
      `tmpfs[0].target "/work/../etc" must be normalised (no '..', '.', '//' or trailing '/')`,
      'tmpfs[1].sizeMiB must be a whole number from 1 to 65536, not 0',
      '/a is the target of two mounts',
    ]);
    expect(checkContainerShape({ init: [] })).toEqual(['init must be a non-empty list of strings without NUL bytes']);
    expect(checkContainerShape({ binds: [{ source: '/x', target: '/.dsec/busybox', readonly: true }] })).toEqual([
      'binds[0].target /.dsec/busybox is on /.dsec/busybox, which the container backend mounts itself',
    ]);
  });
});

describe('the read-only overlay', () => {
  it('stacks the lower dirs alone, with no upper or work dir', () => {
    expect(overlayOptions({ lowerDirs: ['/l/base', '/s/mountpoints'], target: '/s/rootfs' })).toBe('lowerdir=/s/mountpoints:/l/base');
  });

  it('refuses one lower dir, or an upper dir without a work dir', () => {
    expect(() => overlayOptions({ lowerDirs: ['/l/base'], target: '/t' })).toThrow(/two lower dirs at least/);
    expect(() => overlayOptions({ lowerDirs: ['/l/base', '/m'], upperDir: '/u', target: '/t' })).toThrow(/together, or neither/);
  });
});

describe('the layer of mount points', () => {
  let tmp: string | undefined;
  afterEach(async () => {
    if (tmp) await rm(tmp, { recursive: true, force: true });
    tmp = undefined;
  });

  async function layers() {
    tmp = await mkdtemp(path.join(tmpdir(), 'dsec-shape-'));
    const base = path.join(tmp, 'base');
    for (const dir of ['proc', 'sys', 'dev', 'tmp', 'usr/lib']) await mkdir(path.join(base, dir), { recursive: true });
    await chmod(path.join(base, 'tmp'), 0o1777);
    await chmod(path.join(base, 'usr'), 0o750);
    await symlink('usr/lib', path.join(base, 'lib'));
    const guest = path.join(tmp, 'guest');
    await writeFile(guest, '#!/bin/sh\n');
    return { base, guest, out: path.join(tmp, 'mountpoints') };
  }

  it('holds the container mount points and the shape ones, files for file binds, new scratch 1777, existing folders as the layers have them', async () => {
    const { base, guest, out } = await layers();
    const shape: ContainerShape = {
      binds: [{ source: guest, target: '/.dsec/guest', readonly: true }],
      tmpfs: [
        { target: '/work', sizeMiB: 8 },
        { target: '/tmp', sizeMiB: 8 },
        { target: '/usr/lib/cache', sizeMiB: 8 },
      ],
      readonlyRoot: true,
    };
    await buildMountPointLayer(out, [base], await mountPointsOf(shape));
    expect((await readdir(out)).sort()).toEqual(['.dsec', 'dev', 'proc', 'sys', 'tmp', 'usr', 'work']);
    expect((await readdir(path.join(out, '.dsec'))).sort()).toEqual(['busybox', 'guest']);
    expect((await lstat(path.join(out, '.dsec/guest'))).isFile()).toBe(true);
    expect((await lstat(path.join(out, 'work'))).mode & 0o7777).toBe(0o1777);
    expect((await lstat(path.join(out, 'tmp'))).mode & 0o7777).toBe(0o1777);
    expect((await lstat(path.join(out, 'usr'))).mode & 0o7777).toBe(0o750);
    expect((await lstat(path.join(out, 'usr/lib/cache'))).mode & 0o7777).toBe(0o1777);
  });

  it('refuses a mount point under a path the layers hold as a symlink, which the folder would hide', async () => {
    const { base, out } = await layers();
    const points = await mountPointsOf({ tmpfs: [{ target: '/lib/cache', sizeMiB: 1 }] });
    await expect(buildMountPointLayer(out, [base], points)).rejects.toThrow('the read-only root needs a folder at /lib, but the layers hold a symlink there');
  });

  it('refuses a bind whose source is not on the host', async () => {
    await expect(mountPointsOf({ binds: [{ source: '/nonexistent/dsec-guest', target: '/.dsec/guest', readonly: true }] })).rejects.toThrow(
      'the bind source /nonexistent/dsec-guest does not exist on the host',
    );
  });
});
