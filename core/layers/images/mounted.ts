/**
 * What the two EROFS formats share: each image is mounted once per node,
 * read-only, at `<local>/mnt/<hex>`, from a loop device attached read-only
 * (and made auto-clear once mounted, see mounts.ts). `<local>/mnt/<hex>.json`
 * remembers which device reads the data, for the read counters; the mount
 * itself is always read back from the kernel (an EROFS mount is a
 * filesystem of its own: its device number tells, without reading the
 * node's whole mount table), so an agent that restarts finds its mounts
 * again.
 */
import { promises as fs } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { DsecError, isDsecError } from '../../errors.js';
import type { LayerFormat } from '../../live.js';
import { digestHex } from '../digest.js';
import { isErrno, writeFileAtomic } from '../fsutil.js';
import { attachLoop, detachLoop, isFilesystemRoot, mountErofs, settleLoop, loopBytesRead, unmount } from '../mounts.js';
import type { AttachedImage, FormatDirs, ImageFormat, NewStaging, PreparedImage, StoredImage } from './types.js';

/** What a format opened for a mount: the file behind the loop device, and what to mount. */
export interface OpenedImage {
  /** The file attached to the loop device (the image, or a split image's blob). */
  readonly data: string;
  readonly dataBytes: number;
  readonly source: 'store' | 'cache';
  /** For a split image: the metadata image to mount, with the loop device as its blob device. */
  readonly metadata?: string;
  /** Read-ahead of the loop devices in 512-byte sectors (for a split image, the metadata device's sets the request size). @default the kernel's */
  readonly readAheadSectors?: number;
}

export abstract class MountedFormat implements ImageFormat {
  readonly format: LayerFormat = 'erofs';
  abstract readonly description: string;
  protected readonly layersDir: string;
  protected readonly mntDir: string;

  constructor(
    protected readonly dirs: FormatDirs,
    protected readonly newStaging: NewStaging,
  ) {
    this.layersDir = join(dirs.shared, 'layers');
    this.mntDir = join(dirs.local, 'mnt');
  }

  abstract has(digest: string): Promise<boolean>;
  abstract prepare(tree: string, digest: string): Promise<PreparedImage>;
  abstract drop(digest: string, trash: string): Promise<void>;
  abstract stored(): Promise<StoredImage[]>;
  /** Verify what the mount will read and say which file to attach. */
  protected abstract open(digest: string, ref: string): Promise<OpenedImage>;
  /** Called once an image is mounted (e.g. to fill a cache in the background). */
  protected mounted(_digest: string, _opened: OpenedImage): void {}

  mountPoint(digest: string): string {
    return join(this.mntDir, digestHex(digest));
  }

  private statePath(digest: string): string {
    return `${this.mountPoint(digest)}.json`;
  }

  async attached(digest: string): Promise<AttachedImage | undefined> {
    const path = this.mountPoint(digest);
    if (!(await isFilesystemRoot(path))) return undefined;
    try {
      return { ...(JSON.parse(await fs.readFile(this.statePath(digest), 'utf8')) as AttachedImage), path };
    } catch {
      return { path };
    }
  }

  async attach(digest: string, ref: string): Promise<AttachedImage> {
    const path = this.mountPoint(digest);
    await fs.mkdir(path, { recursive: true });
    const opened = await this.open(digest, ref);
    const readAhead = { readAheadSectors: opened.readAheadSectors };
    let device: string | undefined;
    let metadataDevice: string | undefined;
    let readBase = 0;
    try {
      device = await attachLoop(opened.data, readAhead);
      // Loop devices keep their counters across users: count from here.
      readBase = (await loopBytesRead(device)) ?? 0;
      if (opened.metadata) {
        // The filesystem's read-ahead window is its main device's: the
        // metadata image's. It decides how large the requests to the blob are.
        metadataDevice = await attachLoop(opened.metadata, readAhead);
        await mountErofs(metadataDevice, path, { device });
      } else await mountErofs(device, path);
    } catch (error) {
      for (const loop of [device, metadataDevice]) if (loop) await detachLoop(loop).catch(() => undefined);
      await fs.rmdir(path).catch(() => undefined);
      if (isDsecError(error)) throw error;
      throw new DsecError('DSEC_LAYER_MOUNT', { ref, path, message: (error as Error).message }, { cause: error });
    }
    // Busy now: the kernel only marks them auto-clear, and frees them with the mount.
    await detachLoop(device);
    if (metadataDevice) await detachLoop(metadataDevice);
    const attached: AttachedImage = {
      path,
      device,
      readBase,
      source: opened.source,
      dataBytes: opened.dataBytes,
      data: opened.data,
      ...(opened.metadata ? { metadata: opened.metadata, metadataDevice } : {}),
    };
    await writeFileAtomic(this.statePath(digest), JSON.stringify(attached) + '\n');
    this.mounted(digest, opened);
    return attached;
  }

  async detach(digest: string): Promise<void> {
    const path = this.mountPoint(digest);
    const attached = await this.attached(digest);
    await unmount(path, { isMounted: isFilesystemRoot });
    if (attached?.device && attached.data) await settleLoop(attached.device, attached.data);
    if (attached?.metadataDevice && attached.metadata) await settleLoop(attached.metadataDevice, attached.metadata);
    await fs.rm(this.statePath(digest), { force: true });
    await fs.rmdir(path).catch((error: unknown) => {
      if (!isErrno(error, 'ENOENT')) throw error;
    });
  }

  async attachedDigests(): Promise<string[]> {
    const names = await fs.readdir(this.mntDir).catch((error: unknown) => {
      if (isErrno(error, 'ENOENT')) return [] as string[];
      throw error;
    });
    const digests: string[] = [];
    for (const name of names.filter((entry) => /^[0-9a-f]{64}$/.test(entry))) {
      if (await isFilesystemRoot(join(this.mntDir, name))) digests.push(`sha256:${name}`);
    }
    return digests;
  }
}
