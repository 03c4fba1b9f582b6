/**
 * A cache of source digests, so that `dsec plan` does not re-read every
 * unchanged layer on every run.
 *
 * A cached digest is used only when the source's stat signature is unchanged:
 * for a directory, every entry's path, type, mode, owner, size, device, inode,
 * mtime and ctime (nanoseconds); for an archive or a busybox binary, the
 * file's. Any write to a file's content or metadata moves its ctime, and no
 * userland call can set ctime back, so an equal signature means equal content
 * (this is git's index check). Getting the signature costs one lstat per
 * entry and no reads, against reading every byte.
 *
 * Timestamps are coarse (a kernel tick), so a file changed within the same
 * tick it was hashed in could keep its ctime. Like git's "racily clean"
 * entries, a signature whose newest timestamp is younger than a small window
 * is never stored: such a source is simply digested again next time.
 */
import { createHash } from 'node:crypto';
import { promises as fs, type BigIntStats } from 'node:fs';
import { dirname } from 'node:path';
import type { TreeEntry } from './digest.js';
import { writeFileAtomic } from './fsutil.js';

export interface SourceSignature {
  /** What the source is: listing version, source type, path. */
  readonly key: string;
  /** What it looks like now, from stat alone (a hash for trees). */
  readonly signature: string;
  /** The newest mtime/ctime seen, in ms since the epoch. */
  readonly newestChangeMs: number;
}

interface CachedDigest {
  signature: string;
  digest: string;
  usedAt: number;
}

function statLine(path: string, stat: BigIntStats): string {
  return [path, stat.mode, stat.uid, stat.gid, stat.size, stat.dev, stat.ino, stat.mtimeNs, stat.ctimeNs].join(' ');
}

function newestMs(stats: readonly BigIntStats[]): number {
  let newest = 0n;
  for (const stat of stats) {
    if (stat.mtimeNs > newest) newest = stat.mtimeNs;
    if (stat.ctimeNs > newest) newest = stat.ctimeNs;
  }
  return Number(newest / 1_000_000n);
}

/** The signature of a directory source from its already-walked entries and its root's stat. */
export function signTree(key: string, rootStat: BigIntStats, entries: readonly TreeEntry[]): SourceSignature {
  const hash = createHash('sha256').update(statLine('.', rootStat));
  for (const entry of entries) hash.update('\n').update(statLine(entry.path, entry.stat));
  return { key, signature: hash.digest('hex'), newestChangeMs: newestMs([rootStat, ...entries.map((entry) => entry.stat)]) };
}

/** The signature of a single-file source (an archive, a busybox binary); undefined if it cannot be read. */
export async function signFile(key: string, path: string): Promise<SourceSignature | undefined> {
  try {
    const stat = await fs.stat(path, { bigint: true });
    return { key, signature: statLine('.', stat), newestChangeMs: newestMs([stat]) };
  } catch {
    return undefined;
  }
}

export interface DigestCacheOptions {
  /** Signatures with a timestamp younger than this are not stored. @default 2000 */
  readonly racyWindowMs?: number;
  /** Least recently used entries beyond this are dropped. @default 512 */
  readonly maxEntries?: number;
}

/** Source digests kept in one JSON file; losing it (or an update) only costs a recompute. */
export class DigestCache {
  private entries: Map<string, CachedDigest> | undefined;
  private writing: Promise<void> = Promise.resolve();
  private readonly racyWindowMs: number;
  private readonly maxEntries: number;

  constructor(
    private readonly file: string,
    options: DigestCacheOptions = {},
  ) {
    this.racyWindowMs = options.racyWindowMs ?? 2000;
    this.maxEntries = options.maxEntries ?? 512;
  }

  private async load(): Promise<Map<string, CachedDigest>> {
    if (this.entries) return this.entries;
    let loaded = new Map<string, CachedDigest>();
    try {
      const data = JSON.parse(await fs.readFile(this.file, 'utf8')) as Record<string, CachedDigest>;
      loaded = new Map(Object.entries(data));
    } catch {
      // Missing or damaged: start empty, it is only a cache.
    }
    this.entries ??= loaded;
    return this.entries;
  }

  async get(source: SourceSignature): Promise<string | undefined> {
    const cached = (await this.load()).get(source.key);
    if (cached === undefined || cached.signature !== source.signature) return undefined;
    cached.usedAt = Date.now();
    return cached.digest;
  }

  async set(source: SourceSignature, digest: string): Promise<void> {
    if (Date.now() - source.newestChangeMs < this.racyWindowMs) return;
    const entries = await this.load();
    entries.set(source.key, { signature: source.signature, digest, usedAt: Date.now() });
    if (entries.size > this.maxEntries) {
      const oldest = [...entries].sort(([, a], [, b]) => a.usedAt - b.usedAt);
      for (const [key] of oldest.slice(0, entries.size - this.maxEntries)) entries.delete(key);
    }
    const snapshot = JSON.stringify(Object.fromEntries(entries));
    // One write at a time, each with the latest content.
    const write = this.writing.then(async () => {
      await fs.mkdir(dirname(this.file), { recursive: true });
      await writeFileAtomic(this.file, snapshot);
    });
    this.writing = write.catch(() => undefined);
    await this.writing;
  }
}
