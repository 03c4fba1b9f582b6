/**
 * Is the store's path really on 3FS? The FUSE client mounts it with fstype
 * `fuse.hf3fs` (or `fuse.3fs`); anything else is used as an ordinary
 * directory, through exactly the same code, and said so.
 */
import { promises as fs } from 'node:fs';
import { DsecError, readMounts, type MountEntry } from '../../core/plugin-api.js';

export const THREEFS_FSTYPES: readonly string[] = Object.freeze(['fuse.hf3fs', 'fuse.3fs']);

export interface MountFinding {
  readonly is3fs: boolean;
  /** The mount point the path is on, and its fstype. */
  readonly on: string;
  readonly fstype: string;
}

/**
 * What `path` is on, from the kernel's mount table (or `mounts`, for tests).
 * Refuses a path that does not exist (3FS not mounted?).
 */
export async function findMount(path: string, mounts?: readonly MountEntry[]): Promise<MountFinding> {
  let real: string;
  try {
    real = await fs.realpath(path);
  } catch {
    throw new DsecError('DSEC_LAYER_STORE_CORRUPT', {
      path,
      message: 'the 3FS mount is not there: mount 3FS (or create the folder standing in for it), or fix the mount option',
    });
  }
  let best: { target: string; fstype: string } = { target: '/', fstype: 'unknown' };
  for (const mount of mounts ?? (await readMounts())) {
    const covers = mount.target === '/' || real === mount.target || real.startsWith(`${mount.target}/`);
    // The last of several mounts on one point is the visible one.
    if (covers && mount.target.length >= best.target.length) best = mount;
  }
  return { is3fs: THREEFS_FSTYPES.includes(best.fstype), on: best.target, fstype: best.fstype };
}

/** The log line: what the store is on. */
export function describeFinding(path: string, finding: MountFinding): string {
  return finding.is3fs
    ? `3FS mount: the store ${path} is on ${finding.on} (${finding.fstype})`
    : `not a 3FS mount: using ${path} as an ordinary directory (it is on ${finding.on}, ${finding.fstype})`;
}
