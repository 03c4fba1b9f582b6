/**
 * Split EROFS images for a store on a shared filesystem (3FS): the file data
 * goes to a blob in 1 MiB chunks and the metadata (inodes, directories,
 * xattrs, chunk indexes) to a small image of its own.
 *
 *   <store>/layers/<hex>.meta.erofs   metadata image
 *   <store>/layers/<hex>.blob         data blob (uncompressed: erofs-utils 1.5 cannot compress chunked files)
 *   <store>/layers/<hex>.json         sha256 and size of both, written last
 *
 * A node copies the metadata image to its own disk (`<local>/meta/`),
 * checking its sha256, so every lookup, stat and readdir is local. The blob
 * is attached read-only to a loop device and given to the mount as its data
 * device, the metadata image to another, both with a generous read-ahead: file data is read on demand, in
 * large requests, straight from the shared store. Before a mount the blob's
 * size is checked against the record; its bytes are not hashed then, since
 * that would read all of it and defeat on-demand loading (a cache copy is
 * hashed while it is made). The image is built on local disk and copied to
 * the store, so publishing reads nothing back from the shared filesystem.
 */
import { constants, promises as fs } from 'node:fs';
import { join } from 'node:path';
import { DsecError } from '../../errors.js';
import { digestHex } from '../digest.js';
import { buildErofsImage } from '../erofs.js';
import { changedMs, fsyncDir, isErrno, removeTree, sha256File } from '../fsutil.js';
import type { BlobCache } from './blob-cache.js';
import { describeFile, readImageRecord, storedImages, syncFiles, verifyFile, type ImageRecord } from './erofs.js';
import { MountedFormat, type OpenedImage } from './mounted.js';
import type { CacheStats } from '../../live.js';
import type { FormatDirs, NewStaging, PreparedImage, StoredImage } from './types.js';

/**
 * Read-ahead of the loop devices: 4 MiB. The metadata device's is the
 * filesystem's read-ahead window, so on-demand reads of file data reach the
 * blob (and 3FS) in requests of up to this size; measured here, reading a
 * 4 MiB file in 4 KiB reads gave 9 blob requests of 680 KiB on average with
 * it, 513 requests of 8 KiB with 8 KiB.
 */
export const BLOB_READ_AHEAD_SECTORS = 8192;

export class SplitErofsFormat extends MountedFormat {
  readonly description: string;
  private readonly metaDir: string;

  constructor(
    dirs: FormatDirs,
    newStaging: NewStaging,
    private readonly cache?: BlobCache,
  ) {
    super(dirs, newStaging);
    this.metaDir = join(dirs.local, 'meta');
    this.description = `erofs split (metadata copied to local disk, blob read on demand from the store${cache ? ', blobs cached locally after first use' : ''})`;
  }

  private paths(digest: string) {
    const hex = digestHex(digest);
    return {
      meta: join(this.layersDir, `${hex}.meta.erofs`),
      blob: join(this.layersDir, `${hex}.blob`),
      record: join(this.layersDir, `${hex}.json`),
      localMeta: join(this.metaDir, `${hex}.erofs`),
    };
  }

  async has(digest: string): Promise<boolean> {
    const paths = this.paths(digest);
    const record = await readImageRecord(paths.record).catch(() => undefined);
    return record?.layout === 'split' && (await changedMs(paths.meta)) !== undefined && (await changedMs(paths.blob)) !== undefined;
  }

  async prepare(tree: string, digest: string): Promise<PreparedImage> {
    const local = await this.newStaging('local');
    const shared = await this.newStaging('shared');
    try {
      const meta = join(local.dir, 'meta.erofs');
      const blob = join(local.dir, 'data.blob');
      await buildErofsImage(tree, meta, { blob });
      const record: ImageRecord = { digest, layout: 'split', image: await describeFile(meta), blob: await describeFile(blob) };
      const staged = { meta: join(shared.dir, 'meta.erofs'), blob: join(shared.dir, 'data.blob'), record: join(shared.dir, 'image.json') };
      await fs.copyFile(meta, staged.meta, constants.COPYFILE_FICLONE);
      await fs.copyFile(blob, staged.blob, constants.COPYFILE_FICLONE);
      await fs.writeFile(staged.record, JSON.stringify(record, null, 2) + '\n');
      await syncFiles([staged.meta, staged.blob, staged.record]);
      await local.remove();
      return {
        install: async () => {
          if (await this.has(digest)) return false;
          const paths = this.paths(digest);
          await fs.rename(staged.meta, paths.meta);
          await fs.rename(staged.blob, paths.blob);
          // The record last: it says the image is complete.
          await fs.rename(staged.record, paths.record);
          await fsyncDir(this.layersDir);
          return true;
        },
        discard: () => shared.remove(),
      };
    } catch (error) {
      await local.remove();
      await shared.remove();
      throw error;
    }
  }

  protected async open(digest: string, ref: string): Promise<OpenedImage> {
    const paths = this.paths(digest);
    const record = await readImageRecord(paths.record);
    if (!record || record.layout !== 'split' || !record.blob) {
      throw new DsecError('DSEC_LAYER_STORE_CORRUPT', { path: paths.record, message: `the image of ${ref} is missing; unpublish and publish the layer again` });
    }
    await this.copyMetadata(paths.meta, paths.localMeta, record, ref);
    const blobBytes = (await fs.stat(paths.blob).catch(() => undefined))?.size;
    if (blobBytes !== record.blob.bytes) {
      throw new DsecError('DSEC_LAYER_CONTENT_MISMATCH', {
        ref,
        what: 'the blob',
        path: paths.blob,
        expected: `${record.blob.bytes} bytes`,
        actual: blobBytes === undefined ? 'no file' : `${blobBytes} bytes`,
      });
    }
    const cached = await this.cache?.lookup(digest, record.blob.bytes);
    return {
      data: cached ?? paths.blob,
      dataBytes: record.blob.bytes,
      source: cached ? 'cache' : 'store',
      metadata: paths.localMeta,
      readAheadSectors: BLOB_READ_AHEAD_SECTORS,
    };
  }

  /** The node's copy of the metadata image, verified before every first mount (it is small). */
  private async copyMetadata(shared: string, local: string, record: ImageRecord, ref: string): Promise<void> {
    const current = await sha256File(local).catch(() => undefined);
    if (current === record.image.sha256) return;
    await fs.mkdir(this.metaDir, { recursive: true });
    const temp = `${local}.tmp-${process.pid}`;
    try {
      await fs.copyFile(shared, temp);
      await verifyFile(temp, record.image, ref, 'metadata image').catch((error: Error) => {
        // Name the store's file, not our temp copy.
        if (error instanceof DsecError && error.code === 'DSEC_LAYER_CONTENT_MISMATCH') {
          throw new DsecError('DSEC_LAYER_CONTENT_MISMATCH', { ...error.params, path: shared });
        }
        throw error;
      });
      await fs.rename(temp, local);
    } catch (error) {
      await fs.rm(temp, { force: true });
      if (isErrno(error, 'ENOENT')) {
        throw new DsecError('DSEC_LAYER_STORE_CORRUPT', { path: shared, message: `the metadata image of ${ref} is missing; unpublish and publish the layer again` });
      }
      throw error;
    }
  }

  protected override mounted(digest: string, opened: OpenedImage): void {
    if (!this.cache || opened.source !== 'store') return;
    void readImageRecord(this.paths(digest).record)
      .then((record) => {
        if (record?.blob) this.cache!.fill(digest, this.paths(digest).blob, record.blob.sha256, record.blob.bytes);
      })
      .catch(() => undefined);
  }

  async drop(digest: string, trash: string): Promise<void> {
    const paths = this.paths(digest);
    await fs.mkdir(trash, { recursive: true });
    for (const [from, name] of [
      [paths.record, 'image.json'],
      [paths.meta, 'meta.erofs'],
      [paths.blob, 'data.blob'],
    ] as const) {
      await fs.rename(from, join(trash, name)).catch((error: unknown) => {
        if (!isErrno(error, 'ENOENT')) throw error;
      });
    }
    await fsyncDir(this.layersDir);
    await removeTree(trash);
    await fs.rm(paths.localMeta, { force: true });
    await this.cache?.forget(digest);
  }

  async stored(): Promise<StoredImage[]> {
    return storedImages(this.layersDir, /^([0-9a-f]{64})\.(meta\.erofs|blob|json)$/);
  }

  async cacheStats(): Promise<CacheStats | undefined> {
    return this.cache?.stats();
  }

  async settled(): Promise<void> {
    await this.cache?.settled();
  }
}
