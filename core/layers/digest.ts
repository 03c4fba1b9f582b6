/**
 * A layer's identity: sha256 over a canonical listing of its tree.
 *
 * The listing has one line per entry, sorted by path (UTF-8 byte order), each
 * a JSON array `[path, type, mode, uid, gid, size, content]` where content is
 * the sha256 of a file's bytes, a symlink's target, or `opaque` for an opaque
 * directory. Overlay whiteouts (char 0:0) are entries of type `whiteout`
 * with fixed mode and owner (`"0000",0,0`): overlayfs reads neither. What a process inside
 * a sandbox can observe is in it; what it cannot rely on is not: mtimes, inode
 * numbers, hard-link identity, directory sizes, the order entries were
 * written in. The layer root itself is not listed: the store always gives it
 * mode 0755 owned by root (and overlayfs takes the root's attributes from the
 * upper dir anyway).
 *
 * Other xattrs (file capabilities, user.*) are not part of a layer. Trees
 * without whiteouts or opaque dirs list exactly as before those existed, so
 * their digests did not change.
 */
import { createHash } from 'node:crypto';
import { createReadStream, promises as fs, type BigIntStats } from 'node:fs';
import { join, resolve } from 'node:path';
import { DsecError, isDsecError } from '../errors.js';
import { isErrno, mapLimit } from './fsutil.js';
import { findOpaqueDirs, isWhiteout } from './overlay-marks.js';

/** Bumped when the listing format changes: old cached digests then no longer match. */
export const LISTING_VERSION = 'dsec-layer-listing 1';

export type EntryType = 'file' | 'dir' | 'symlink' | 'whiteout';

export interface TreeEntry {
  /** Relative to the tree root, `/`-separated, never empty. */
  readonly path: string;
  readonly type: EntryType;
  /** Permission bits, setuid/setgid/sticky included. */
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  /** Bytes for files; 0 for directories and symlinks. */
  readonly size: number;
  /** Symlinks only. */
  readonly target?: string;
  /** Directories only: marked `trusted.overlay.opaque=y`. */
  readonly opaque?: boolean;
  readonly stat: BigIntStats;
}

export interface TreeDigest {
  /** `sha256:<hex>` */
  readonly digest: string;
  /** The canonical listing the digest is taken over, for debugging and tests. */
  readonly listing: string;
  /** Entries in the tree (files, directories, symlinks and whiteouts), the root excluded. */
  readonly entries: number;
  /** Sum of the regular files' sizes. */
  readonly sizeBytes: number;
}

/** Stat calls in flight per directory, and files hashed at once. */
const STAT_CONCURRENCY = 16;
const HASH_CONCURRENCY = 8;

function kindOf(stat: BigIntStats): string {
  if (stat.isSocket()) return 'socket';
  if (stat.isFIFO()) return 'FIFO';
  if (stat.isCharacterDevice()) return 'character device';
  if (stat.isBlockDevice()) return 'block device';
  return 'special file';
}

/** Byte-order comparison of UTF-8 paths, so the order does not depend on locale or UTF-16 quirks. */
export function comparePaths(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/**
 * Every entry under `root`, sorted by path, never following symlinks, with
 * whiteouts and opaque directories recognised. Other device nodes, sockets
 * and FIFOs are refused (DSEC_LAYER_SOURCE naming the path): a layer holds
 * only files, directories, symlinks and whiteouts.
 */
export async function walkTree(root: string, ref: string): Promise<TreeEntry[]> {
  let rootStat: BigIntStats;
  try {
    rootStat = await fs.stat(root, { bigint: true });
  } catch (error) {
    const message = isErrno(error, 'ENOENT', 'ENOTDIR')
      ? `directory ${root} does not exist`
      : `cannot read directory ${root}: ${(error as Error).message}`;
    throw new DsecError('DSEC_LAYER_SOURCE', { ref, message }, { cause: error });
  }
  if (!rootStat.isDirectory()) {
    throw new DsecError('DSEC_LAYER_SOURCE', { ref, message: `${root} is not a directory` });
  }
  let entries: TreeEntry[];
  let opaque: Set<string>;
  try {
    [entries, opaque] = await Promise.all([walkDirectory(root, ref), findOpaqueDirs(resolve(root))]);
  } catch (error) {
    throw changedWhileRead(root, ref, error);
  }
  if (opaque.size === 0) return entries;
  const absoluteRoot = resolve(root);
  return entries.map((entry) =>
    entry.type === 'dir' && opaque.has(join(absoluteRoot, entry.path)) ? { ...entry, opaque: true } : entry,
  );
}

/** A raw filesystem error while reading a source: it most likely changed under us. */
function changedWhileRead(root: string, ref: string, error: unknown): Error {
  if (isDsecError(error)) return error;
  return new DsecError(
    'DSEC_LAYER_SOURCE',
    { ref, message: `reading ${root} failed (did it change while being read?): ${(error as Error).message}` },
    { cause: error },
  );
}

async function walkDirectory(root: string, ref: string): Promise<TreeEntry[]> {
  const entries: TreeEntry[] = [];
  const pending: string[] = [''];
  while (pending.length > 0) {
    const relativeDir = pending.pop()!;
    const names = await fs.readdir(join(root, relativeDir));
    const found = await mapLimit(names, STAT_CONCURRENCY, async (name) => {
      const path = relativeDir === '' ? name : `${relativeDir}/${name}`;
      const absolute = join(root, path);
      const stat = await fs.lstat(absolute, { bigint: true });
      const base = { path, mode: Number(stat.mode & 0o7777n), uid: Number(stat.uid), gid: Number(stat.gid), stat };
      if (stat.isDirectory()) return { ...base, type: 'dir' as const, size: 0 };
      if (stat.isFile()) return { ...base, type: 'file' as const, size: Number(stat.size) };
      if (stat.isSymbolicLink()) {
        return { ...base, type: 'symlink' as const, size: 0, target: await fs.readlink(absolute) };
      }
      // overlayfs reads neither the mode nor the owner of a whiteout: fixed, so they cannot vary the digest.
      if (isWhiteout(stat)) return { ...base, mode: 0, uid: 0, gid: 0, type: 'whiteout' as const, size: 0 };
      throw new DsecError('DSEC_LAYER_SOURCE', {
        ref,
        message: `${absolute} is a ${kindOf(stat)}; a layer may hold only files, directories, symlinks and whiteouts (character devices 0:0)`,
      });
    });
    for (const entry of found) {
      entries.push(entry);
      if (entry.type === 'dir') pending.push(entry.path);
    }
  }
  return entries.sort((a, b) => comparePaths(a.path, b.path));
}

async function hashFile(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function octal(mode: number): string {
  return mode.toString(8).padStart(4, '0');
}

/** The canonical listing of entries already walked from `root`; reads every file once. */
export async function listingOf(root: string, entries: readonly TreeEntry[]): Promise<string> {
  const lines = await mapLimit(entries, HASH_CONCURRENCY, async (entry) => {
    const content =
      entry.type === 'file'
        ? await hashFile(join(root, entry.path))
        : entry.type === 'symlink'
          ? entry.target!
          : entry.opaque
            ? 'opaque'
            : '';
    return JSON.stringify([entry.path, entry.type, octal(entry.mode), entry.uid, entry.gid, entry.size, content]);
  });
  return [LISTING_VERSION, ...lines].join('\n') + '\n';
}

export function digestOfListing(listing: string): string {
  return `sha256:${createHash('sha256').update(listing).digest('hex')}`;
}

/** Digest entries already walked from `root`. */
export async function digestEntries(root: string, entries: readonly TreeEntry[], ref: string): Promise<TreeDigest> {
  let listing: string;
  try {
    listing = await listingOf(root, entries);
  } catch (error) {
    throw changedWhileRead(root, ref, error);
  }
  let sizeBytes = 0;
  for (const entry of entries) sizeBytes += entry.size;
  return { digest: digestOfListing(listing), listing, entries: entries.length, sizeBytes };
}

/** Walk and digest the tree at `root`. */
export async function digestTree(root: string, ref: string): Promise<TreeDigest> {
  return digestEntries(root, await walkTree(root, ref), ref);
}

/** `sha256:<hex>` -> `<hex>`, refusing anything else (it becomes a directory name). */
export function digestHex(digest: string): string {
  const match = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!match) throw new Error(`not a sha256 digest: ${digest}`);
  return match[1];
}
