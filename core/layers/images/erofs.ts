/**
 * Whole EROFS images, lz4- (or lz4hc-) compressed: `layers/<hex>.erofs`, and
 * `layers/<hex>.json` recording its sha256 and size. The record is written
 * last, so an image without one is incomplete (a crash mid-publish) and
 * never mounted. Before each first mount the image is hashed again and
 * compared with the record (DSEC_LAYER_CONTENT_MISMATCH): a truncated or
 * altered image is never mounted.
 */
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { DsecError } from '../../errors.js';
import { digestHex } from '../digest.js';
import { buildErofsImage, type ErofsCompression } from '../erofs.js';
import { changedMs, fsyncDir, isErrno, removeTree, sha256File } from '../fsutil.js';
import { MountedFormat, type OpenedImage } from './mounted.js';
import type { FormatDirs, NewStaging, PreparedImage, StoredImage } from './types.js';

/** A file of an image as published. */
export interface ImageFile {
  readonly sha256: string;
  readonly bytes: number;
}

/** `layers/<hex>.json`: what the store published for a digest in an EROFS format. */
export interface ImageRecord {
  readonly digest: string;
  readonly layout: 'whole' | 'split';
  /** The image (whole) or the metadata image (split). */
  readonly image: ImageFile;
  /** Split images only: the data blob. */
  readonly blob?: ImageFile;
}

export async function describeFile(path: string): Promise<ImageFile> {
  const [sha256, stat] = await Promise.all([sha256File(path), fs.stat(path)]);
  return { sha256, bytes: stat.size };
}

export async function readImageRecord(path: string): Promise<ImageRecord | undefined> {
  try {
    return JSON.parse(await fs.readFile(path, 'utf8')) as ImageRecord;
  } catch (error) {
    if (isErrno(error, 'ENOENT')) return undefined;
    throw new DsecError('DSEC_LAYER_STORE_CORRUPT', { path, message: `unreadable image record: ${(error as Error).message}` });
  }
}

/** Hash `path` and refuse it if it is not the file the record describes. */
export async function verifyFile(path: string, expected: ImageFile, ref: string, what: string): Promise<void> {
  let actual: ImageFile;
  try {
    actual = await describeFile(path);
  } catch (error) {
    if (!isErrno(error, 'ENOENT')) throw error;
    throw new DsecError('DSEC_LAYER_STORE_CORRUPT', { path, message: `the ${what} of ${ref} is missing; unpublish and publish the layer again` });
  }
  if (actual.sha256 !== expected.sha256) {
    throw new DsecError('DSEC_LAYER_CONTENT_MISMATCH', {
      ref,
      what: `the ${what}`,
      path,
      expected: `sha256:${expected.sha256} (${expected.bytes} bytes)`,
      actual: `sha256:${actual.sha256} (${actual.bytes} bytes)`,
    });
  }
}

export class ErofsFormat extends MountedFormat {
  readonly description: string;

  constructor(
    dirs: FormatDirs,
    newStaging: NewStaging,
    private readonly compression: ErofsCompression = 'lz4',
  ) {
    super(dirs, newStaging);
    this.description = `erofs (${compression} images, mounted read-only once per node)`;
  }

  private imagePath(digest: string): string {
    return join(this.layersDir, `${digestHex(digest)}.erofs`);
  }

  protected recordPath(digest: string): string {
    return join(this.layersDir, `${digestHex(digest)}.json`);
  }

  async has(digest: string): Promise<boolean> {
    const record = await readImageRecord(this.recordPath(digest)).catch(() => undefined);
    return record?.layout === 'whole' && (await changedMs(this.imagePath(digest))) !== undefined;
  }

  async prepare(tree: string, digest: string): Promise<PreparedImage> {
    const staging = await this.newStaging('shared');
    try {
      const image = join(staging.dir, 'image.erofs');
      await buildErofsImage(tree, image, { compression: this.compression });
      const record: ImageRecord = { digest, layout: 'whole', image: await describeFile(image) };
      const recordFile = join(staging.dir, 'image.json');
      await fs.writeFile(recordFile, JSON.stringify(record, null, 2) + '\n');
      await syncFiles([image, recordFile]);
      return {
        install: async () => {
          if (await this.has(digest)) return false;
          await fs.rename(image, this.imagePath(digest));
          // The record last: it says the image is complete.
          await fs.rename(recordFile, this.recordPath(digest));
          await fsyncDir(this.layersDir);
          return true;
        },
        discard: () => staging.remove(),
      };
    } catch (error) {
      await staging.remove();
      throw error;
    }
  }

  protected async open(digest: string, ref: string): Promise<OpenedImage> {
    const record = await readImageRecord(this.recordPath(digest));
    if (!record || record.layout !== 'whole') {
      throw new DsecError('DSEC_LAYER_STORE_CORRUPT', { path: this.recordPath(digest), message: `the image of ${ref} is missing; unpublish and publish the layer again` });
    }
    await verifyFile(this.imagePath(digest), record.image, ref, 'image');
    return { data: this.imagePath(digest), dataBytes: record.image.bytes, source: 'store' };
  }

  async drop(digest: string, trash: string): Promise<void> {
    await fs.mkdir(trash, { recursive: true });
    // The record first: without it the image is incomplete, whatever happens next.
    for (const [from, name] of [
      [this.recordPath(digest), 'image.json'],
      [this.imagePath(digest), 'image.erofs'],
    ] as const) {
      await fs.rename(from, join(trash, name)).catch((error: unknown) => {
        if (!isErrno(error, 'ENOENT')) throw error;
      });
    }
    await fsyncDir(this.layersDir);
    await removeTree(trash);
  }

  async stored(): Promise<StoredImage[]> {
    return storedImages(this.layersDir, /^([0-9a-f]{64})\.(erofs|json)$/);
  }
}

/** Digests with a file in `layersDir` matching `pattern` (hex in group 1), newest change per digest. */
export async function storedImages(layersDir: string, pattern: RegExp): Promise<StoredImage[]> {
  const newest = new Map<string, number>();
  for (const name of await fs.readdir(layersDir).catch(() => [] as string[])) {
    const hex = pattern.exec(name)?.[1];
    if (!hex) continue;
    const changed = await changedMs(join(layersDir, name));
    if (changed !== undefined) newest.set(hex, Math.max(newest.get(hex) ?? 0, changed));
  }
  return [...newest].map(([hex, changed]) => ({ digest: `sha256:${hex}`, changedMs: changed }));
}

/** fsync each file (they must be on disk before they become visible). */
export async function syncFiles(paths: readonly string[]): Promise<void> {
  for (const path of paths) {
    const handle = await fs.open(path, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }
}
