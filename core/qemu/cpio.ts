/**
 * A writer of the cpio "newc" format (the one the Linux kernel unpacks as an
 * initramfs): a 110-byte ASCII header per entry, then the name and the data,
 * each padded to 4 bytes, and a TRAILER!!! entry at the end. Written here
 * rather than by spawning cpio, which Debian does not install by default, and
 * deterministic on purpose (mtime 0, inodes numbered in order), so the same
 * inputs give the same bytes and an initramfs can be cached by its inputs.
 */

/** One entry of an archive. Paths are relative (`bin/busybox`), without a leading slash. */
export type CpioEntry =
  | { readonly type: 'dir'; readonly path: string; readonly mode?: number }
  | { readonly type: 'file'; readonly path: string; readonly data: Buffer; readonly mode?: number }
  | { readonly type: 'symlink'; readonly path: string; readonly target: string }
  | { readonly type: 'char'; readonly path: string; readonly major: number; readonly minor: number; readonly mode?: number };

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const S_IFCHR = 0o020000;
const TRAILER = 'TRAILER!!!';

/** The archive of `entries`, in the order given (parents must come before their children). */
export function writeCpio(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  let offset = 0;
  const push = (buffer: Buffer) => {
    parts.push(buffer);
    offset += buffer.length;
  };
  const pad = () => {
    const missing = (4 - (offset % 4)) % 4;
    if (missing > 0) push(Buffer.alloc(missing));
  };
  let inode = 1;
  for (const entry of entries) {
    checkPath(entry.path);
    const { mode, data, rdev } = describe(entry);
    push(header({ inode: inode++, mode, nlink: entry.type === 'dir' ? 2 : 1, size: data.length, name: entry.path, ...rdev }));
    push(Buffer.from(`${entry.path}\0`, 'utf8'));
    pad();
    push(data);
    pad();
  }
  push(header({ inode: 0, mode: 0, nlink: 1, size: 0, name: TRAILER }));
  push(Buffer.from(`${TRAILER}\0`, 'utf8'));
  pad();
  return Buffer.concat(parts, offset);
}

function describe(entry: CpioEntry): { mode: number; data: Buffer; rdev: { rdevMajor: number; rdevMinor: number } } {
  const none = { rdevMajor: 0, rdevMinor: 0 };
  switch (entry.type) {
    case 'dir':
      return { mode: S_IFDIR | (entry.mode ?? 0o755), data: Buffer.alloc(0), rdev: none };
    case 'file':
      return { mode: S_IFREG | (entry.mode ?? 0o644), data: entry.data, rdev: none };
    case 'symlink':
      return { mode: S_IFLNK | 0o777, data: Buffer.from(entry.target, 'utf8'), rdev: none };
    case 'char':
      return { mode: S_IFCHR | (entry.mode ?? 0o600), data: Buffer.alloc(0), rdev: { rdevMajor: entry.major, rdevMinor: entry.minor } };
  }
}

function header(fields: { inode: number; mode: number; nlink: number; size: number; name: string; rdevMajor?: number; rdevMinor?: number }): Buffer {
  const hex = (value: number) => {
    if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) throw new Error(`cpio: ${value} does not fit a newc header field`);
    return value.toString(16).padStart(8, '0');
  };
  const values = [
    fields.inode,
    fields.mode,
    0, // uid
    0, // gid
    fields.nlink,
    0, // mtime: fixed, so the archive depends on content only
    fields.size,
    0, // devmajor
    0, // devminor
    fields.rdevMajor ?? 0,
    fields.rdevMinor ?? 0,
    Buffer.byteLength(fields.name, 'utf8') + 1,
    0, // check (only the "070702" variant uses it)
  ];
  return Buffer.from(`070701${values.map(hex).join('')}`, 'ascii');
}

function checkPath(entryPath: string): void {
  if (entryPath === '' || entryPath.startsWith('/') || entryPath.split('/').some((part) => part === '' || part === '..' || part === '.')) {
    throw new Error(`cpio: entry path ${JSON.stringify(entryPath)} must be relative, without empty, . or .. parts`);
  }
  if (entryPath.includes('\0')) throw new Error('cpio: entry path holds a NUL byte');
}
