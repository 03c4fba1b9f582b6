/**
 * ContainerShape (core/hooks.ts): what a backend built on this one (the
 * FnCall pool) asks of a sandbox's container: its own PID 1, host files bound
 * in, capped tmpfs scratch, and a read-only root. Every field is honoured or
 * the create fails: `checkContainerShape` refuses what cannot be honoured
 * safely, before anything is mounted.
 *
 * A read-only root has no upper dir, so nothing can create the mount points
 * the container needs (runc makes them in the upper dir otherwise). They come
 * from a small extra lower layer, `mountpoints/`, on top of the stack: the
 * folders and empty files the mounts go on, each with its parents. Only
 * mount points live there, and each is covered by its mount; a parent that
 * merges with a layer's folder takes that folder's owner and mode, so the
 * sandbox sees the layers as they are.
 */
import type { Stats } from 'node:fs';
import { chmod, chown, lstat, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { ContainerShape } from '../../core/plugin-api.js';
import { SANDBOX_BUSYBOX, SANDBOX_PRIVATE_DIR } from './bundle.js';

/** A tmpfs bigger than this is refused: scratch is charged to the sandbox's memory, and a typo should not ask for a terabyte. */
export const MAX_TMPFS_MIB = 64 * 1024;

/** Where the container's own mounts go: a shape's mount may not land on or under them. */
const RESERVED_TARGETS = Object.freeze(['/proc', '/sys', '/dev', SANDBOX_BUSYBOX]);

/** Every problem with a shape, in words (empty when it can be honoured). Pure: no file is looked at. */
export function checkContainerShape(shape: ContainerShape): string[] {
  const problems: string[] = [];
  if (shape.init !== undefined) {
    if (!Array.isArray(shape.init) || shape.init.length === 0 || shape.init.some((word) => typeof word !== 'string' || word.includes('\0'))) {
      problems.push('init must be a non-empty list of strings without NUL bytes');
    } else if (!shape.init[0].startsWith('/')) {
      problems.push(`init[0] must be an absolute path inside the sandbox, not ${JSON.stringify(shape.init[0])}`);
    }
  }
  const targets: string[] = [];
  for (const [index, bind] of (shape.binds ?? []).entries()) {
    const where = `binds[${index}]`;
    if (typeof bind.source !== 'string' || !path.isAbsolute(bind.source) || bind.source.includes('\0')) {
      problems.push(`${where}.source must be an absolute host path`);
    }
    if (typeof bind.readonly !== 'boolean') problems.push(`${where}.readonly must be true or false`);
    problems.push(...checkTarget(where, bind.target));
    targets.push(bind.target);
  }
  for (const [index, tmpfs] of (shape.tmpfs ?? []).entries()) {
    const where = `tmpfs[${index}]`;
    if (!Number.isInteger(tmpfs.sizeMiB) || tmpfs.sizeMiB < 1 || tmpfs.sizeMiB > MAX_TMPFS_MIB) {
      problems.push(`${where}.sizeMiB must be a whole number from 1 to ${MAX_TMPFS_MIB}, not ${JSON.stringify(tmpfs.sizeMiB)}`);
    }
    problems.push(...checkTarget(where, tmpfs.target));
    targets.push(tmpfs.target);
  }
  const seen = new Set<string>();
  for (const target of targets) {
    if (seen.has(target)) problems.push(`${target} is the target of two mounts`);
    seen.add(target);
  }
  if (shape.readonlyRoot !== undefined && typeof shape.readonlyRoot !== 'boolean') problems.push('readonlyRoot must be true or false');
  return problems;
}

/** An absolute, normalised path that is not `/` and stays off the container's own mounts. */
function checkTarget(where: string, target: unknown): string[] {
  if (typeof target !== 'string' || !target.startsWith('/') || target.includes('\0')) return [`${where}.target must be an absolute path`];
  if (path.posix.normalize(target) !== target || target.endsWith('/')) return [`${where}.target ${JSON.stringify(target)} must be normalised (no '..', '.', '//' or trailing '/')`];
  if (target === SANDBOX_PRIVATE_DIR) return [`${where}.target must not be ${SANDBOX_PRIVATE_DIR} itself (it holds dsec's own files); use a path under it`];
  const clash = RESERVED_TARGETS.find((reserved) => target === reserved || target.startsWith(`${reserved}/`));
  return clash ? [`${where}.target ${target} is on ${clash}, which the container backend mounts itself`] : [];
}

/** A mount point: a folder, or an empty file for a bind of a file. */
export interface MountPoint {
  readonly target: string;
  readonly kind: 'dir' | 'file';
  /**
   * The folder's mode when the layers lack it. It matters for a tmpfs:
   * runc gives a tmpfs the mode of the folder it covers (over its `mode=`
   * option), so scratch the layers lack is made 1777 like /tmp, and scratch
   * over a layer's folder keeps that folder's mode. @default 0o755
   */
  readonly mode?: number;
}

/**
 * The mount points a read-only root needs: the container's own (`/proc`,
 * `/sys`, `/dev`, `/.dsec` and its busybox) and the shape's, a bind's kind
 * following its source.
 */
export async function mountPointsOf(shape: ContainerShape): Promise<MountPoint[]> {
  const points: MountPoint[] = [
    { target: '/proc', kind: 'dir' },
    { target: '/sys', kind: 'dir' },
    { target: '/dev', kind: 'dir' },
    { target: SANDBOX_PRIVATE_DIR, kind: 'dir' },
    { target: SANDBOX_BUSYBOX, kind: 'file' },
  ];
  for (const bind of shape.binds ?? []) {
    const source = await lstat(bind.source).catch(() => undefined);
    if (!source) throw new Error(`the bind source ${bind.source} does not exist on the host`);
    points.push({ target: bind.target, kind: source.isDirectory() ? 'dir' : 'file' });
  }
  for (const tmpfs of shape.tmpfs ?? []) points.push({ target: tmpfs.target, kind: 'dir', mode: 0o1777 });
  return points;
}

/**
 * What the layers hold at `target` as overlayfs shows it: the top layer that
 * has it wins, and a whiteout there means nothing. Walks one component at a
 * time with lstat, so a symlink in a layer is never followed on the host
 * (callers check the parents first, so they are folders).
 */
async function entryInLayers(lowerDirs: readonly string[], target: string): Promise<Stats | undefined> {
  const parts = target.split('/').filter(Boolean);
  for (const layer of [...lowerDirs].reverse()) {
    let at = layer;
    let found: Stats | undefined;
    for (const part of parts) {
      if (found && !found.isDirectory()) {
        found = undefined;
        break;
      }
      at = path.join(at, part);
      found = await lstat(at).catch(() => undefined);
      if (!found) break;
    }
    if (!found) continue;
    const whiteout = found.isCharacterDevice() && found.rdev === 0;
    return whiteout ? undefined : found;
  }
  return undefined;
}

/**
 * Fill `dir` with `points` and their parents, to go on top of `lowerDirs`:
 * as the read-only root's extra lower layer, or in a writable root's upper
 * dir before it is mounted. A folder the layers already have keeps their
 * owner and mode. A parent the layers hold as anything but a folder (a
 * symlink, /bin -> usr/bin) would be hidden by the folder put over it:
 * refused.
 */
export async function buildMountPointLayer(dir: string, lowerDirs: readonly string[], points: readonly MountPoint[]): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o755 });
  const made = new Set<string>();
  const makeDir = async (target: string, mode = 0o755) => {
    if (made.has(target)) return;
    const parent = path.posix.dirname(target);
    if (parent !== '/') await makeDir(parent);
    const below = await entryInLayers(lowerDirs, target);
    if (below && !below.isDirectory()) {
      throw new Error(`the read-only root needs a folder at ${target}, but the layers hold ${below.isSymbolicLink() ? 'a symlink' : 'a file'} there`);
    }
    const at = path.join(dir, target);
    await mkdir(at).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
    if (below) await chown(at, below.uid, below.gid);
    // chmod, not mkdir's mode: the umask would take bits off.
    await chmod(at, below ? below.mode & 0o7777 : mode);
    made.add(target);
  };
  for (const point of points) {
    if (point.kind === 'dir') {
      await makeDir(point.target, point.mode);
      continue;
    }
    await makeDir(path.posix.dirname(point.target));
    const below = await entryInLayers(lowerDirs, point.target);
    if (below?.isDirectory()) throw new Error(`the read-only root needs a file at ${point.target} to bind a file on, but the layers hold a folder there`);
    await writeFile(path.join(dir, point.target), '', { mode: 0o644 });
  }
}
