/**
 * Small filesystem helpers the store is built from: atomic and exclusive
 * writes, directory fsync, filesystem sync, and a bounded-concurrency map.
 * Nothing here knows about layers.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { constants, promises as fs } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export function isErrno(error: unknown, ...codes: string[]): error is NodeJS.ErrnoException {
  return error instanceof Error && codes.includes((error as NodeJS.ErrnoException).code ?? '');
}

export async function pathExists(path: string): Promise<boolean> {
  try {
    await fs.lstat(path);
    return true;
  } catch (error) {
    if (isErrno(error, 'ENOENT', 'ENOTDIR')) return false;
    throw error;
  }
}

/** A name for a sibling temp file that no other writer (process or call) picks. */
function tempSibling(file: string): string {
  return join(dirname(file), `.${basename(file)}.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
}

/** True for the temp files `writeFileAtomic` and `createFileExclusive` leave if the process dies mid-write. */
export function isTempName(name: string): boolean {
  return name.startsWith('.') && name.includes('.tmp-');
}

export async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

async function writeDurably(file: string, data: string): Promise<void> {
  const handle = await fs.open(file, 'wx', 0o644);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Replace `file` with `data` so that a reader (or a crash) sees the old or the new content, never a mix. */
export async function writeFileAtomic(file: string, data: string): Promise<void> {
  const temp = tempSibling(file);
  try {
    await writeDurably(temp, data);
    await fs.rename(temp, file);
  } catch (error) {
    await fs.rm(temp, { force: true });
    throw error;
  }
  await fsyncDir(dirname(file));
}

/**
 * Create `file` with `data` only if it does not exist yet, atomically and
 * durably: the content is written and fsynced under a temp name, then
 * hard-linked into place. link(2) fails with EEXIST when the name is taken,
 * which makes "create unless present" safe even across processes.
 */
export async function createFileExclusive(file: string, data: string): Promise<void> {
  const temp = tempSibling(file);
  try {
    await writeDurably(temp, data);
    await fs.link(temp, file);
  } finally {
    await fs.rm(temp, { force: true });
  }
  await fsyncDir(dirname(file));
}

/**
 * Flush every dirty page of the filesystem holding `path` (syncfs(2) through
 * coreutils `sync -f`). One call instead of an fsync per file: a layer can
 * hold tens of thousands of files, and they must be on disk before the ref
 * that makes them visible is.
 */
export async function syncFilesystem(path: string): Promise<void> {
  await execFileAsync('sync', ['-f', path]);
}

export async function removeTree(path: string): Promise<void> {
  await fs.rm(path, { recursive: true, force: true });
}

/** `items.map(fn)` with at most `limit` calls in flight; results keep the input order. */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  async function worker(): Promise<void> {
    while (!failed && next < items.length) {
      const index = next++;
      try {
        results[index] = await fn(items[index], index);
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  }
  const workers = Array.from({ length: Math.min(limit, items.length) }, () => worker());
  // allSettled first so that no worker is still writing when the caller
  // cleans up after a failure; then surface the first error.
  const settled = await Promise.allSettled(workers);
  const rejection = settled.find((result) => result.status === 'rejected');
  if (rejection) throw (rejection as PromiseRejectedResult).reason;
  return results;
}

/** One promise chain per key: callers with the same key run one at a time, in call order. */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const current = new Promise<void>((resolve) => (release = resolve));
    const tail = previous.then(() => current);
    this.tails.set(key, tail);
    await previous;
    try {
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}

/** The sha256 (hex) of a file's bytes, read as a stream. */
export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  const handle = await fs.open(path, 'r');
  try {
    for await (const chunk of handle.createReadStream({ highWaterMark: 1024 * 1024, autoClose: false })) hash.update(chunk as Buffer);
  } finally {
    await handle.close();
  }
  return hash.digest('hex');
}

/** The mtime/ctime of a path in ms, or undefined when it is gone. */
export async function changedMs(path: string): Promise<number | undefined> {
  try {
    const stat = await fs.lstat(path);
    return Math.max(stat.ctimeMs, stat.mtimeMs);
  } catch (error) {
    if (isErrno(error, 'ENOENT', 'ENOTDIR')) return undefined;
    throw error;
  }
}
