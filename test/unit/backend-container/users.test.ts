/**
 * Resolving a sandbox's `user` from its own /etc/passwd and /etc/group, read
 * on the host from the mounted rootfs: what the layers hold (a snapshot's
 * included, so whatever a sandbox wrote) must never lead to the host's files.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resolveUser } from '../../../plugins/backend-container/users.js';

let tmp: string;
let rootfs: string;
beforeEach(async () => {
  tmp = mkdtempSync(path.join(tmpdir(), 'dsec-users-'));
  rootfs = path.join(tmp, 'rootfs');
  await mkdir(rootfs);
});
afterEach(() => {
  rmSync(tmp, { recursive: true, force: true });
});

describe('resolveUser', () => {
  it('reads names, groups and supplementary groups from the rootfs', async () => {
    await mkdir(path.join(rootfs, 'etc'));
    await writeFile(path.join(rootfs, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\ndev:x:1000:1000::/home/dev:/bin/sh\n');
    await writeFile(path.join(rootfs, 'etc/group'), 'root:x:0:\ndev:x:1000:\nstaff:x:50:dev\n');
    expect(await resolveUser(rootfs, 'dev')).toEqual({ uid: 1000, gid: 1000, home: '/home/dev', additionalGids: [50] });
    expect(await resolveUser(rootfs, 'dev:staff')).toEqual({ uid: 1000, gid: 50, home: '/home/dev' });
    // A bare uid has no passwd entry: HOME is /, as runc sets it.
    expect(await resolveUser(rootfs, '1234:5')).toEqual({ uid: 1234, gid: 5, home: '/' });
    expect(await resolveUser(rootfs, 'root')).toEqual({ uid: 0, gid: 0, home: '/root' });
  });

  it('never reads the host through a symlinked /etc: an absolute link would resolve against the host root', async () => {
    const host = path.join(tmp, 'host-etc');
    await mkdir(host);
    await writeFile(path.join(host, 'passwd'), 'dev:x:4242:4242::/:/bin/sh\n');
    await writeFile(path.join(host, 'group'), 'wheel:x:4343:dev\n');
    await symlink(host, path.join(rootfs, 'etc'));
    await expect(resolveUser(rootfs, 'dev')).rejects.toThrow('cannot resolve user "dev": /etc in the sandbox is a symlink');
    await expect(resolveUser(rootfs, '1000:wheel')).rejects.toThrow('cannot resolve user "1000:wheel": /etc in the sandbox is a symlink');
  });
});
