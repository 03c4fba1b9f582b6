/**
 * A node-local cache of split images' data blobs, for a store on a shared
 * filesystem (3FS): once a blob has been mounted from the store, a copy is
 * made on local disk in the background, and later mounts of that image
 * attach the local copy instead. What it caches: whole blobs, never parts.
 * When: after a blob's first mount on this node (an image mounted right now
 * keeps reading the store until its last user goes and it is mounted again).
 * The copy is hashed while it is written and kept only if it matches the
 * sha256 published with the image, so a cached blob is a verified one.
 *
 * Eviction: least recently mounted first (a blob's mtime is bumped on every
 * use), whenever a new copy would take the cache over `maxBytes`; a blob a
 * mount is reading now is never evicted, and a blob larger than `maxBytes`
 * is never cached.
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, promises as fs } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import type { Logger } from '../../hooks.js';
import type { CacheStats } from '../../live.js';
import { digestHex } from '../digest.js';
import { isErrno, isTempName } from '../fsutil.js';

export interface BlobCacheOptions {
  readonly dir: string;
  readonly maxBytes: number;
  readonly log: Logger;
  readonly name: string;
  /** Whether a mount reads the cached blob of `digest` now. */
  readonly inUse: (digest: string) => Promise<boolean>;
}

export class BlobCache {
  private readonly fills = new Map<string, Promise<void>>();

  constructor(private readonly options: BlobCacheOptions) {}

  get dir(): string {
    return this.options.dir;
  }

  blobPath(digest: string): string {
    return join(this.options.dir, `${digestHex(digest)}.blob`);
  }

  /** The cached copy of a blob, if there is one of the right size; marks it used. */
  async lookup(digest: string, bytes: number): Promise<string | undefined> {
    const path = this.blobPath(digest);
    try {
      const stat = await fs.stat(path);
      if (stat.size !== bytes) {
        await fs.rm(path, { force: true });
        return undefined;
      }
      const now = new Date();
      await fs.utimes(path, now, now);
      return path;
    } catch (error) {
      if (isErrno(error, 'ENOENT')) return undefined;
      throw error;
    }
  }

  /** Start copying `source` into the cache in the background (once per digest at a time). */
  fill(digest: string, source: string, sha256: string, bytes: number): void {
    if (bytes > this.options.maxBytes || this.fills.has(digest)) return;
    const fill = this.copy(digest, source, sha256, bytes)
      .catch((error: Error) => this.options.log.warn(`${this.options.name}: caching the blob of ${digest} failed: ${error.message}`))
      .finally(() => this.fills.delete(digest));
    this.fills.set(digest, fill);
  }

  /** Wait until every fill in flight is done. */
  async settled(): Promise<void> {
    while (this.fills.size > 0) await Promise.all([...this.fills.values()]);
  }

  async stats(): Promise<CacheStats> {
    const blobs = await this.blobs();
    return { dir: this.options.dir, maxBytes: this.options.maxBytes, bytes: blobs.reduce((sum, blob) => sum + blob.bytes, 0), entries: blobs.length };
  }

  /** Drop the cached copy of a digest (its layer was unpublished). */
  async forget(digest: string): Promise<void> {
    await fs.rm(this.blobPath(digest), { force: true });
  }

  private async copy(digest: string, source: string, sha256: string, bytes: number): Promise<void> {
    const target = this.blobPath(digest);
    if ((await this.lookup(digest, bytes)) !== undefined) return;
    await fs.mkdir(this.options.dir, { recursive: true });
    await this.makeRoom(bytes);
    const temp = join(this.options.dir, `.${digestHex(digest)}.blob.tmp-${process.pid}`);
    const hash = createHash('sha256');
    const hashing = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        hash.update(chunk);
        done(null, chunk);
      },
    });
    try {
      await pipeline(createReadStream(source, { highWaterMark: 4 * 1024 * 1024 }), hashing, createWriteStream(temp));
      const actual = hash.digest('hex');
      if (actual !== sha256) {
        throw new Error(`${source} has sha256 ${actual}, not the published ${sha256}: the store copy is damaged; not cached`);
      }
      const handle = await fs.open(temp, 'r');
      await handle.sync().finally(() => handle.close());
      await fs.rename(temp, target);
      this.options.log.info(`${this.options.name}: cached the blob of ${digest} (${bytes} bytes) in ${this.options.dir}`);
    } finally {
      await fs.rm(temp, { force: true });
    }
  }

  /** Evict least recently used blobs, never one in use, until `bytes` more fit under maxBytes. */
  private async makeRoom(bytes: number): Promise<void> {
    const blobs = (await this.blobs()).sort((a, b) => a.usedMs - b.usedMs);
    let total = blobs.reduce((sum, blob) => sum + blob.bytes, 0);
    for (const blob of blobs) {
      if (total + bytes <= this.options.maxBytes) return;
      if (await this.options.inUse(blob.digest)) continue;
      await fs.rm(blob.path, { force: true });
      total -= blob.bytes;
      this.options.log.info(`${this.options.name}: evicted the cached blob of ${blob.digest} (${blob.bytes} bytes)`);
    }
    if (total + bytes > this.options.maxBytes) throw new Error(`the cache is full of blobs in use (${total} of ${this.options.maxBytes} bytes)`);
  }

  private async blobs(): Promise<Array<{ digest: string; path: string; bytes: number; usedMs: number }>> {
    const found = [];
    for (const name of await fs.readdir(this.options.dir).catch(() => [] as string[])) {
      const hex = /^([0-9a-f]{64})\.blob$/.exec(name)?.[1];
      if (!hex || isTempName(name)) continue;
      const path = join(this.options.dir, name);
      const stat = await fs.stat(path).catch(() => undefined);
      if (stat) found.push({ digest: `sha256:${hex}`, path, bytes: stat.size, usedMs: stat.mtimeMs });
    }
    return found;
  }
}
