/**
 * Turning a sandbox's `user` ("root", "1000", "1000:1000", "dev", "dev:staff")
 * into numeric ids, reading the sandbox's own /etc/passwd and /etc/group (the
 * mounted rootfs), never the host's.
 */
import { lstat, readFile } from 'node:fs/promises';
import path from 'node:path';
import type { BundleUser } from './bundle.js';

export async function resolveUser(rootfs: string, user: string): Promise<BundleUser> {
  if (user === '' || user === 'root') return { uid: 0, gid: 0, home: '/root' };
  const [userPart, groupPart] = user.split(':', 2) as [string, string | undefined];
  const passwd = /^\d+$/.test(userPart) ? [] : await readDatabase(rootfs, 'etc/passwd', user);
  const group = groupPart !== undefined && !/^\d+$/.test(groupPart) ? await readDatabase(rootfs, 'etc/group', user) : [];

  let uid: number;
  let gid: number;
  let name: string | undefined;
  let home: string | undefined;
  if (/^\d+$/.test(userPart)) {
    uid = Number(userPart);
    gid = uid;
  } else {
    const entry = passwd.find((fields) => fields[0] === userPart);
    if (!entry) throw new Error(`user ${JSON.stringify(userPart)} is not in the sandbox's /etc/passwd`);
    name = userPart;
    uid = Number(entry[2]);
    gid = Number(entry[3]);
    home = entry[5]?.startsWith('/') ? entry[5] : undefined;
  }
  if (groupPart !== undefined) {
    if (/^\d+$/.test(groupPart)) gid = Number(groupPart);
    else {
      const entry = group.find((fields) => fields[0] === groupPart);
      if (!entry) throw new Error(`group ${JSON.stringify(groupPart)} is not in the sandbox's /etc/group`);
      gid = Number(entry[2]);
    }
  }
  const additionalGids = name === undefined ? [] : await supplementaryGroups(rootfs, name, gid, user);
  // HOME as runc would set it: the passwd entry's, else / (a bare uid has none).
  const withHome = { uid, gid, home: home ?? (uid === 0 ? '/root' : '/') };
  return additionalGids.length > 0 ? { ...withHome, additionalGids } : withHome;
}

async function supplementaryGroups(rootfs: string, name: string, primary: number, user: string): Promise<number[]> {
  const groups = await readDatabase(rootfs, 'etc/group', user, { optional: true });
  return groups
    .filter((fields) => (fields[3] ?? '').split(',').includes(name))
    .map((fields) => Number(fields[2]))
    .filter((gid) => Number.isInteger(gid) && gid !== primary);
}

/**
 * The colon-separated lines of a file in the rootfs. A symlink is refused,
 * the file's or its folder's (/etc): an absolute one would resolve against
 * the host's root, not the sandbox's.
 */
async function readDatabase(rootfs: string, relative: string, user: string, options: { optional?: boolean } = {}): Promise<string[][]> {
  const file = path.join(rootfs, relative);
  try {
    const folder = await lstat(path.dirname(file));
    if (folder.isSymbolicLink()) throw new Error(`/${path.dirname(relative)} in the sandbox is a symlink`);
    const info = await lstat(file);
    if (!info.isFile()) throw new Error(`/${relative} in the sandbox is not a regular file`);
    const text = await readFile(file, 'utf8');
    return text
      .split('\n')
      .filter((line) => line && !line.startsWith('#'))
      .map((line) => line.split(':'));
  } catch (error) {
    if (options.optional) return [];
    const reason = (error as NodeJS.ErrnoException).code === 'ENOENT' ? `the layers have no /${relative}` : (error as Error).message;
    throw new Error(`cannot resolve user ${JSON.stringify(user)}: ${reason}`);
  }
}
