/**
 * The environment's disk image and each sandbox's copy-on-write overlay.
 *
 * The image is checked before qemu starts, with `qemu-img info`, so a
 * missing, unreadable, corrupt or mislabelled image is DSEC_VM_IMAGE_INVALID
 * naming the file and what is wrong, not a qemu error or a guest that never
 * boots. The overlay is a qcow2 whose backing file is the image: creating a
 * VM copies nothing, and the image is never written (qemu opens a backing
 * file read-only, so many VMs share one).
 */
import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { DsecError, type DiskImageRef } from '../../core/plugin-api.js';

const run = promisify(execFile);

interface ImageInfo {
  readonly format?: string;
  readonly 'virtual-size'?: number;
  readonly 'backing-filename'?: string;
  readonly 'format-specific'?: { readonly type?: string; readonly data?: { readonly corrupt?: boolean } };
}

function invalid(file: string, message: string): DsecError {
  return new DsecError('DSEC_VM_IMAGE_INVALID', { path: file, message });
}

/**
 * Check that `image` exists, is readable, and is what it says it is:
 * qemu-img opens it (and its backing chain) in the declared format, a qcow2
 * is not marked corrupt, and a file declared raw is not really a qcow2 (or
 * another format qemu recognises), which would boot garbage, or worse, let
 * its own backing-file name reach a host file.
 */
export async function checkImage(image: DiskImageRef | undefined, qemuImg = 'qemu-img'): Promise<void> {
  if (!image) throw invalid('(none)', "the sandbox's environment names no disk image; set environments.<name>.image to a qcow2 or raw file");
  const file = image.path;
  if (!path.isAbsolute(file)) throw invalid(file, 'the path must be absolute');
  if (image.format !== 'qcow2' && image.format !== 'raw') throw invalid(file, `the format must be qcow2 or raw, not ${String(image.format)}`);
  const found = await stat(file).catch((error: NodeJS.ErrnoException) => error);
  if (found instanceof Error) throw invalid(file, found.code === 'ENOENT' ? 'no such file' : found.message);
  if (!found.isFile() && !found.isBlockDevice()) throw invalid(file, 'not a regular file or block device');
  await access(file, constants.R_OK).catch(() => {
    throw invalid(file, 'not readable by the agent');
  });

  const chain = await imageInfo(qemuImg, file, image.format);
  const top = chain[0];
  if (!top) throw invalid(file, 'qemu-img reported nothing about it');
  if (image.format === 'qcow2' && top['format-specific']?.data?.corrupt === true) {
    throw invalid(file, 'the qcow2 image is marked corrupt; repair it with `qemu-img check -r all` or rebuild it');
  }
  if (!(Number(top['virtual-size']) > 0)) throw invalid(file, 'the image is empty (virtual size 0)');
  if (image.format === 'raw') {
    const detected = (await imageInfo(qemuImg, file, undefined))[0]?.format;
    if (detected && detected !== 'raw') throw invalid(file, `declared raw, but the file is a ${detected} image; declare format: ${detected}`);
  }
}

async function imageInfo(qemuImg: string, file: string, format: string | undefined): Promise<ImageInfo[]> {
  // --force-share: reading the header of an image that running VMs have open is safe and must not wait for their locks.
  const args = ['info', '--output=json', '--backing-chain', '--force-share', ...(format ? ['-f', format] : []), file];
  try {
    const { stdout } = await run(qemuImg, args, { timeout: 30_000, maxBuffer: 4 * 1024 * 1024 });
    const parsed = JSON.parse(stdout) as ImageInfo | ImageInfo[];
    return Array.isArray(parsed) ? parsed : [parsed];
  } catch (error) {
    const said = String((error as { stderr?: string }).stderr ?? (error as Error).message)
      .trim()
      .replace(/^qemu-img: /, '')
      .replace(/^Could not open '[^']*': /, '');
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new DsecError('DSEC_VMM_UNAVAILABLE', { vmm: qemuImg, message: 'qemu-img is not installed (scripts/setup.sh installs qemu-utils)' });
    }
    throw invalid(file, `qemu-img cannot open it as ${format ?? 'any format'}: ${said.split('\n')[0]}`);
  }
}

/** A qcow2 overlay at `overlay` backed by `image` (the same virtual size). */
export async function createOverlay(image: DiskImageRef, overlay: string, qemuImg = 'qemu-img'): Promise<void> {
  try {
    await run(qemuImg, ['create', '-q', '-f', 'qcow2', '-F', image.format, '-b', image.path, overlay], { timeout: 30_000 });
  } catch (error) {
    const said = String((error as { stderr?: string }).stderr ?? (error as Error).message).trim();
    throw invalid(image.path, `cannot create an overlay on it: ${said.replace(/^qemu-img: /, '')}`);
  }
}
