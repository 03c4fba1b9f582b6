/**
 * EROFS images, made with Debian's erofs-utils (1.5: lz4/lz4hc only):
 *
 * - a whole image: `mkfs.erofs -zlz4hc`, one compressed file;
 * - a split image: `mkfs.erofs --blobdev=<blob> --chunksize=1048576`, a small
 *   metadata image and a data blob read through a second device. erofs-utils
 *   1.5 cannot compress chunked files, so the blob is uncompressed.
 *
 * Every image is checked right after it is built: the superblock's magic and
 * block count against the file's size (a truncated image is caught here),
 * then `fsck.erofs` over the metadata. Whether this kernel mounts EROFS at
 * all is probed once per process (`probeErofs`), on a tiny image holding a
 * whiteout and an opaque directory, so the store can fall back to directory
 * trees and say why.
 */
import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { removeTree } from './fsutil.js';
import { attachLoop, commandMessage, detachLoop, mountErofs, unmount } from './mounts.js';
import { OPAQUE_XATTR, findOpaqueDirs, isWhiteout, makeWhiteouts, markOpaque } from './overlay-marks.js';

const execFileAsync = promisify(execFile);

/** Chunks of a split image's blob: the unit it is read in from the shared store. */
export const SPLIT_CHUNK_BYTES = 1024 * 1024;

const EROFS_MAGIC = 0xe0f5e1e2;
const SUPERBLOCK_OFFSET = 1024;

/**
 * Whole images' compressor. lz4hc packs tighter; lz4 builds far faster:
 * measured here on 96 MiB of half random, half text files, lz4hc took 20 s
 * and lz4 0.6 s for the same image size (random data stays stored raw; text
 * compresses well with both). Publishing is on the user's path, so lz4 is the
 * default; lz4hc is there for stores that publish rarely and mount often.
 */
export type ErofsCompression = 'lz4hc' | 'lz4';

export interface ErofsBuildOptions {
  /** Write the file data to this blob (a split image), uncompressed, in 1 MiB chunks. */
  readonly blob?: string;
  /** Whole images only. @default "lz4" */
  readonly compression?: ErofsCompression;
}

/** Build an EROFS image of `tree` at `image` (and `blob`), then check it. */
export async function buildErofsImage(tree: string, image: string, options: ErofsBuildOptions = {}): Promise<void> {
  const args = options.blob
    ? ['--quiet', `--blobdev=${options.blob}`, `--chunksize=${SPLIT_CHUNK_BYTES}`, image, tree]
    : ['--quiet', `-z${options.compression ?? 'lz4'}`, image, tree];
  try {
    await execFileAsync('mkfs.erofs', args, { maxBuffer: 16 * 1024 * 1024 });
  } catch (error) {
    throw new Error(`mkfs.erofs failed: ${commandMessage(error)}`);
  }
  await checkErofsImage(image, options.blob);
}

/** The superblock's view of an image: its block size and how many blocks the image itself holds. */
async function readSuperblock(image: string): Promise<{ blockBytes: number; blocks: number }> {
  const handle = await fs.open(image, 'r');
  try {
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(128), 0, 128, SUPERBLOCK_OFFSET);
    if (bytesRead < 128 || buffer.readUInt32LE(0) !== EROFS_MAGIC) throw new Error(`${image} is not an EROFS image (no superblock)`);
    return { blockBytes: 2 ** buffer[12], blocks: buffer.readUInt32LE(36) };
  } finally {
    await handle.close();
  }
}

/**
 * A structural check: superblock, size, metadata (fsck.erofs). It reads the
 * metadata, not the file data; content is guarded by the sha256 the store
 * records and checks before a mount.
 */
export async function checkErofsImage(image: string, blob?: string): Promise<void> {
  const { blockBytes, blocks } = await readSuperblock(image);
  const { size } = await fs.stat(image);
  if (size < blocks * blockBytes) {
    throw new Error(`${image} is truncated: ${size} bytes, the superblock says ${blocks * blockBytes}`);
  }
  try {
    await execFileAsync('fsck.erofs', [...(blob ? [`--device=${blob}`] : []), image], { maxBuffer: 16 * 1024 * 1024 });
  } catch (error) {
    throw new Error(`fsck.erofs ${image} found a damaged image: ${commandMessage(error)}`);
  }
}

export interface ErofsProbe {
  /** Undefined when whole images mount here; else why not. */
  readonly whole?: string;
  /** Undefined when split images (metadata + blob device) mount here; else why not. */
  readonly split?: string;
}

let probed: Promise<ErofsProbe> | undefined;

/** Can this process build and mount EROFS images (whole and split)? Probed once per process. */
export function probeErofs(): Promise<ErofsProbe> {
  probed ??= runProbe();
  return probed;
}

async function runProbe(): Promise<ErofsProbe> {
  const dir = await fs.mkdtemp(join(tmpdir(), 'dsec-erofs-probe-'));
  try {
    const tree = join(dir, 'tree');
    await fs.mkdir(join(tree, 'opaque'), { recursive: true });
    await fs.writeFile(join(tree, 'opaque', 'file'), 'probe\n');
    await markOpaque([join(tree, 'opaque')]);
    await makeWhiteouts([join(tree, 'gone')]);
    const whole = await probeMount(dir, tree, false);
    const split = whole === undefined ? await probeMount(dir, tree, true) : whole;
    return { whole, split };
  } catch (error) {
    const reason = (error as Error).message;
    return { whole: reason, split: reason };
  } finally {
    await removeTree(dir).catch(() => undefined);
  }
}

/** Build, mount and read back a probe image; the reason it failed, or undefined. */
async function probeMount(dir: string, tree: string, split: boolean): Promise<string | undefined> {
  const image = join(dir, split ? 'split.erofs' : 'whole.erofs');
  const blob = split ? join(dir, 'split.blob') : undefined;
  const target = join(dir, split ? 'mnt-split' : 'mnt-whole');
  await fs.mkdir(target);
  let device: string | undefined;
  let mounted = false;
  try {
    await buildErofsImage(tree, image, { blob });
    device = await attachLoop(blob ?? image);
    await mountErofs(blob ? image : device, target, { device: blob ? device : undefined });
    mounted = true;
    if ((await fs.readFile(join(target, 'opaque', 'file'), 'utf8')) !== 'probe\n') return 'a file read back wrong';
    if (!isWhiteout(await fs.lstat(join(target, 'gone')))) return 'a whiteout did not survive mkfs.erofs';
    if (!(await findOpaqueDirs(target)).has(join(target, 'opaque'))) return `the ${OPAQUE_XATTR} xattr did not survive mkfs.erofs`;
    return undefined;
  } catch (error) {
    const message = (error as Error).message;
    if (/ENOENT|not found|No such file/.test(message) && /mkfs\.erofs|spawn/.test(message)) return 'mkfs.erofs is not installed (Debian package erofs-utils)';
    return message;
  } finally {
    if (mounted) await unmount(target).catch(() => undefined);
    if (device) await detachLoop(device).catch(() => undefined);
  }
}
