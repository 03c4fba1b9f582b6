/**
 * Safe extraction of a layer archive (.tar, .tar.gz/.tgz) into a staging dir.
 *
 * Every entry is checked before node-tar may write it, and one bad entry
 * rejects the whole archive (DSEC_LAYER_UNSAFE_ARCHIVE): absolute paths, `..`
 * components, device nodes and FIFOs, hard links that leave the archive or
 * point at nothing earlier in it, relative symlinks that climb above the
 * layer root, and any entry that would be written through a symlink of the
 * archive. node-tar runs with `preservePaths` so that it never "fixes" an
 * entry behind our back (it would strip a leading `/` from absolute symlink
 * targets, turning `bin/sh -> /bin/busybox` into a wrong relative link); the
 * checks here are the protection, and they refuse instead of repairing.
 *
 * The checks run in the same pass as the extraction (node-tar's `filter`
 * sees each header before the entry is written), so the archive is read once
 * and cannot change between a "validate" and an "extract" pass. After a
 * rejection every later entry is skipped; the caller removes the staging dir.
 *
 * node-tar does not reproduce modes and owners exactly (it forces directories
 * to u+rwx, lets the umask apply, and its chown clears setuid bits), so the
 * metadata of every entry is recorded from its header and applied afterwards,
 * children before parents. Overlay whiteouts and opaque markers (`.wh.*`
 * entries, char devices 0:0) become overlay-native marks (archive-marks.ts).
 */
import { createReadStream, promises as fs } from 'node:fs';
import { join, posix } from 'node:path';
import { pipeline, type Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import * as tar from 'tar';
import { DsecError } from '../errors.js';
import { ArchiveMarks } from './archive-marks.js';
import { walkTree } from './digest.js';
import { isErrno } from './fsutil.js';

type EntryKind = 'file' | 'dir' | 'symlink';

interface EntryMetadata {
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  readonly mtime?: Date;
}

interface Rejection {
  readonly entry: string;
  readonly problem: string;
}

type ArchiveFormat = 'tar' | 'gzip';

/** Magic bytes of the compressions we refuse by name rather than as "not a tar archive". */
const OTHER_COMPRESSIONS: ReadonlyArray<[string, Buffer]> = [
  ['xz', Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00])],
  ['bzip2', Buffer.from('BZh')],
  ['zstd', Buffer.from([0x28, 0xb5, 0x2f, 0xfd])],
  ['zip', Buffer.from([0x50, 0x4b, 0x03, 0x04])],
];

async function sniffFormat(file: string, ref: string): Promise<ArchiveFormat> {
  let head: Buffer;
  try {
    const handle = await fs.open(file, 'r');
    try {
      const { buffer, bytesRead } = await handle.read(Buffer.alloc(8), 0, 8, 0);
      head = buffer.subarray(0, bytesRead);
    } finally {
      await handle.close();
    }
  } catch (error) {
    const message = isErrno(error, 'ENOENT', 'ENOTDIR')
      ? `archive ${file} does not exist`
      : isErrno(error, 'EISDIR')
        ? `${file} is a directory, not an archive (use source type dir)`
        : `cannot read archive ${file}: ${(error as Error).message}`;
    throw new DsecError('DSEC_LAYER_SOURCE', { ref, message }, { cause: error });
  }
  if (head[0] === 0x1f && head[1] === 0x8b) return 'gzip';
  for (const [name, magic] of OTHER_COMPRESSIONS) {
    if (head.subarray(0, magic.length).equals(magic)) {
      throw new DsecError('DSEC_LAYER_SOURCE', {
        ref,
        message: `archive ${file} is ${name}-compressed; only .tar and .tar.gz are supported`,
      });
    }
  }
  return 'tar';
}

/** What `check` says of a whiteout or opaque marker: recorded, not extracted. */
const MARK = Symbol('overlay mark');

/** Splits an archive path into its components, dropping `.` and empty ones; `[]` is the layer root. */
function components(path: string): string[] {
  return path.split('/').filter((part) => part !== '' && part !== '.');
}

/**
 * Decides, header by header and in archive order, whether an entry may be
 * extracted, and records what each admitted path should look like.
 */
class ArchiveGuard {
  rejection: Rejection | undefined;
  /** The kind each admitted path has now (a later entry may replace an earlier one). */
  private readonly kinds = new Map<string, EntryKind>();
  /** Every path that was ever a symlink: nothing may be written or linked through it. */
  private readonly symlinks = new Set<string>();
  readonly metadata = new Map<string, EntryMetadata>();
  /** Entries this guard was asked about, to tell them from those node-tar skipped on its own. */
  readonly seen = new WeakSet<object>();
  /** Whiteouts and opaque markers: recorded here, never extracted by node-tar. */
  readonly marks = new ArchiveMarks();
  private readonly paths = {
    throughSymlink: (parts: readonly string[]) => this.throughSymlink(parts),
    kindOf: (path: string) => this.kinds.get(path),
  };

  admit(entry: tar.ReadEntry): boolean {
    this.seen.add(entry);
    if (this.rejection) return false;
    const problem = this.check(entry);
    if (problem === undefined) return true;
    if (problem === MARK) return false;
    this.reject(entry.path, problem);
    return false;
  }

  reject(entry: string, problem: string): void {
    this.rejection ??= { entry, problem };
  }

  private throughSymlink(parts: readonly string[]): string | undefined {
    for (let length = 1; length < parts.length; length++) {
      const prefix = parts.slice(0, length).join('/');
      if (this.symlinks.has(prefix)) return prefix;
    }
    return undefined;
  }

  /** A problem, MARK for a whiteout or opaque marker (recorded, not extracted), or undefined to extract it. */
  private check(entry: tar.ReadEntry): string | typeof MARK | undefined {
    const raw = entry.path;
    if (raw.startsWith('/')) return 'has an absolute path';
    const parts = components(raw);
    if (parts.includes('..')) return "has a '..' path component";
    const verdict = this.marks.classify(entry, parts, this.paths);
    if (verdict.kind === 'problem') return verdict.problem;
    if (verdict.kind === 'mark') return MARK;
    const path = parts.join('/');
    const kind = this.kindOf(entry.type);
    if (typeof kind === 'object') return kind.problem;
    if (path === '' && kind !== 'dir') return `would replace the layer root with a ${kind}`;
    const via = this.throughSymlink(parts);
    if (via !== undefined) return `lies under the symlink ${via}; writing it would follow the link`;

    const metadata: EntryMetadata = {
      mode: entry.mode ?? (kind === 'dir' ? 0o755 : 0o644),
      uid: Number.isInteger(entry.uid) ? entry.uid! : 0,
      gid: Number.isInteger(entry.gid) ? entry.gid! : 0,
      mtime: entry.mtime,
    };
    if (kind === 'hardlink') {
      const problem = this.checkHardLink(String(entry.linkpath ?? ''));
      if (typeof problem === 'string') return problem;
      this.record(path, problem.kind, problem.metadata);
      return undefined;
    }
    if (kind === 'symlink') {
      const target = String(entry.linkpath ?? '');
      // Absolute targets resolve against the sandbox's root inside the
      // container, so they stay in the layer; relative ones are resolved here.
      if (!target.startsWith('/')) {
        const resolved = posix.normalize(posix.join(posix.dirname(path || '.'), target));
        if (resolved === '..' || resolved.startsWith('../')) {
          return `is a symlink to ${target}, which climbs above the layer root`;
        }
      }
    }
    this.record(path, kind, metadata);
    return undefined;
  }

  private kindOf(type: string): EntryKind | 'hardlink' | { problem: string } {
    switch (type) {
      case 'File':
      case 'OldFile':
      case 'ContiguousFile':
        return 'file';
      case 'Directory':
      case 'GNUDumpDir':
        return 'dir';
      case 'SymbolicLink':
        return 'symlink';
      case 'Link':
        return 'hardlink';
      case 'CharacterDevice':
        return { problem: 'is a character device node (only 0:0, a whiteout, is allowed)' };
      case 'BlockDevice':
        return { problem: 'is a block device node' };
      case 'FIFO':
        return { problem: 'is a FIFO; a layer may hold only files, directories and links' };
      default:
        return { problem: `has an unsupported entry type (${type})` };
    }
  }

  private checkHardLink(linkpath: string): string | { kind: EntryKind; metadata: EntryMetadata } {
    const resolved = linkpath.startsWith('/') ? linkpath : posix.normalize(linkpath);
    if (linkpath.startsWith('/') || resolved === '..' || resolved.startsWith('../')) {
      return `is a hard link to ${linkpath}, outside the archive root`;
    }
    // Archivers name link targets by their member path, which never holds '..'.
    if (components(linkpath).includes('..')) return `is a hard link to ${linkpath}, which has a '..' component`;
    const parts = components(resolved);
    const target = parts.join('/');
    const via = this.throughSymlink(parts);
    if (via !== undefined) return `is a hard link through the symlink ${via}`;
    const kind = this.kinds.get(target);
    const metadata = this.metadata.get(target);
    if ((kind !== 'file' && kind !== 'symlink') || metadata === undefined) {
      return `is a hard link to ${linkpath}, which is not a file earlier in the archive`;
    }
    // The link shares the target's inode, so it carries the target's metadata.
    return { kind, metadata };
  }

  private record(path: string, kind: EntryKind, metadata: EntryMetadata): void {
    this.kinds.set(path, kind);
    this.metadata.set(path, metadata);
    if (kind === 'symlink') this.symlinks.add(path);
  }
}

/**
 * Runs node-tar over the archive and resolves once it has finished writing,
 * with the first error seen. The archive is fed by hand rather than piped:
 * Node's pipe() unpipes on the first error, and node-tar would then wait
 * forever for the rest of the archive. Feeding stops at the first error or
 * rejection; ending the input makes node-tar finish its pending writes and
 * emit 'close', after which the caller may remove the staging dir without
 * racing it.
 */
async function unpack(file: string, format: ArchiveFormat, target: string, guard: ArchiveGuard): Promise<Error | undefined> {
  let firstError: Error | undefined;
  let stopped = false;
  let wake: (() => void) | undefined;
  const stop = (error?: Error) => {
    if (error) firstError ??= error;
    stopped = true;
    wake?.();
  };
  const unpacker = new tar.Unpack({
    cwd: target,
    strict: true,
    preservePaths: true,
    preserveOwner: false,
    noMtime: true,
    filter: (_path, entry) => {
      const admitted = guard.admit(entry as tar.ReadEntry);
      // A mark is skipped, not refused: reading goes on.
      if (!admitted && guard.rejection) stop();
      return admitted;
    },
  });
  unpacker.on('ignoredEntry', (entry: tar.ReadEntry) => {
    if (guard.seen.has(entry)) return;
    guard.reject(entry.path, `has an unsupported entry type (${entry.type})`);
    stop();
  });
  unpacker.on('error', stop);
  // Tar has no length field: an archive cut right after an entry parses as a
  // shorter valid one. Only the end-of-archive marker (two zero blocks) tells.
  let complete = false;
  unpacker.on('eof', () => (complete = true));
  const closed = new Promise<void>((resolve) => unpacker.on('close', resolve));

  // pipeline() destroys the gunzip stream when reading fails, so every error
  // (read, gunzip) surfaces in the loop below.
  const chunks: Readable =
    format === 'gzip' ? pipeline(createReadStream(file), createGunzip(), () => undefined) : createReadStream(file);
  try {
    for await (const chunk of chunks) {
      if (stopped) break;
      if (!unpacker.write(chunk) && !stopped) {
        await new Promise<void>((resolve) => {
          wake = resolve;
          unpacker.once('drain', resolve);
        });
        wake = undefined;
      }
    }
  } catch (error) {
    stop(error as Error);
  } finally {
    chunks.destroy();
  }
  unpacker.end();
  await closed;
  if (!firstError && !stopped && !complete) {
    return new Error('it ends without the end-of-archive marker (two zero blocks)');
  }
  return firstError;
}

/** Gives every extracted entry the mode, owner and mtime its header declared; children before parents. */
async function applyMetadata(target: string, guard: ArchiveGuard, ref: string): Promise<void> {
  const entries = await walkTree(target, ref);
  for (const entry of entries.reverse()) {
    // Directories node-tar made for parents the archive did not list.
    const metadata = guard.metadata.get(entry.path) ?? (entry.type === 'dir' ? { mode: 0o755, uid: 0, gid: 0 } : undefined);
    if (metadata === undefined) continue;
    const path = join(target, entry.path);
    await fs.lchown(path, metadata.uid, metadata.gid);
    // chown clears setuid/setgid, so the mode is set after it.
    if (entry.type !== 'symlink') await fs.chmod(path, metadata.mode);
    if (metadata.mtime) await fs.lutimes(path, metadata.mtime, metadata.mtime);
  }
}

/**
 * Extract the archive at `file` into the existing, empty directory `target`.
 * Throws DSEC_LAYER_UNSAFE_ARCHIVE for an entry that could escape or that a
 * layer must not hold, DSEC_LAYER_SOURCE for a missing, corrupt or truncated
 * archive; `target` then holds partial content the caller must remove.
 */
export async function extractArchive(file: string, target: string, ref: string): Promise<void> {
  const format = await sniffFormat(file, ref);
  const guard = new ArchiveGuard();
  const error = await unpack(file, format, target, guard);
  if (guard.rejection) {
    throw new DsecError('DSEC_LAYER_UNSAFE_ARCHIVE', { ref, ...guard.rejection });
  }
  if (error) {
    throw new DsecError(
      'DSEC_LAYER_SOURCE',
      { ref, message: `archive ${file} is corrupt or truncated: ${error.message}` },
      { cause: error },
    );
  }
  await guard.marks.apply(target, ref);
  await applyMetadata(target, guard, ref);
}
