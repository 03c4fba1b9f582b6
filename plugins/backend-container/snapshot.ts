/**
 * The container backend's `snapshot` tap: a copy of the sandbox's writable
 * overlay upper dir, which is already in the form a layer is stored in
 * (overlayfs writes deletions as char 0:0 whiteouts and replaced directories
 * as `trusted.overlay.opaque=y`).
 *
 * The container is frozen (`runc pause`, the freezer cgroup) while the
 * upper dir is copied, so no process writes half a file into the copy, and
 * thawed afterwards (`runc resume`) unless it was paused before. `cp -a`
 * keeps modes, owners, times, hard links, symlinks, whiteout devices and the
 * opaque xattrs. Then the excluded paths are removed from the copy (never
 * following a symlink of the sandbox), and entries no layer may hold
 * (sockets, FIFOs, devices other than whiteouts) are dropped and reported.
 */
import { execFile } from 'node:child_process';
import { lstat, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { isWhiteout, type SnapshotRequest, type SnapshotResult } from '../../core/plugin-api.js';
import { SANDBOX_PRIVATE_DIR } from './bundle.js';
import { runRuntime, runRuntimeOk, type Runtime } from './runtime.js';

const execFileAsync = promisify(execFile);

export interface SnapshotTarget {
  readonly containerId: string;
  /** The sandbox's overlay upper dir. */
  readonly upperDir: string;
}

/** `running`, `paused`, or undefined when the runtime does not know the container (stopped). */
async function containerStatus(runtime: Runtime, containerId: string): Promise<string | undefined> {
  const result = await runRuntime(runtime, ['state', containerId]);
  if (result.code !== 0) return undefined;
  return (JSON.parse(result.stdout) as { status?: string }).status;
}

export async function snapshotContainer(runtime: Runtime, target: SnapshotTarget, request: SnapshotRequest): Promise<SnapshotResult> {
  const status = await containerStatus(runtime, target.containerId);
  // A stopped container writes nothing; a paused one stays paused.
  const freeze = status === 'running';
  if (freeze) await runRuntimeOk(runtime, ['pause', target.containerId]);
  try {
    await copyUpperDir(target.upperDir, request.into);
  } finally {
    if (freeze) await runRuntimeOk(runtime, ['resume', target.containerId]);
  }
  // runc leaves the busybox mountpoint (SANDBOX_PRIVATE_DIR) in the upper dir: it is never part of a layer.
  for (const excluded of [SANDBOX_PRIVATE_DIR, ...request.exclude]) await removeInside(request.into, excluded);
  const skipped = await dropUnstorable(request.into);
  return { dir: request.into, skipped };
}

async function copyUpperDir(upper: string, into: string): Promise<void> {
  try {
    // `upper/.` copies the contents into the existing `into`; -a: no dereferencing, everything preserved.
    await execFileAsync('cp', ['-a', '--', `${upper}/.`, `${into}/`], { maxBuffer: 4 * 1024 * 1024 });
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr?.trim();
    throw new Error(`copying the upper dir ${upper} failed: ${stderr || (error as Error).message}`);
  }
}

/**
 * Remove `/some/path` (a path inside the sandbox) from the copy at `root`,
 * walking it component by component with lstat: a component that is a
 * symlink (or not a directory) means the path is not in this layer as such,
 * and nothing is followed out of the copy.
 */
async function removeInside(root: string, sandboxPath: string): Promise<void> {
  const parts = sandboxPath.split('/').filter((part) => part !== '' && part !== '.');
  if (parts.length === 0 || parts.includes('..')) throw new Error(`cannot exclude ${JSON.stringify(sandboxPath)}: not an absolute path inside the sandbox`);
  let current = root;
  for (const [index, part] of parts.entries()) {
    current = path.join(current, part);
    const stat = await lstat(current).catch(() => undefined);
    if (!stat) return;
    if (index === parts.length - 1) break;
    if (!stat.isDirectory()) return;
  }
  await rm(current, { recursive: true, force: true });
}

/** Remove sockets, FIFOs and non-whiteout devices from the copy; returns their paths, relative to `root`. */
async function dropUnstorable(root: string): Promise<string[]> {
  const skipped: string[] = [];
  const pending = [''];
  while (pending.length > 0) {
    const relative = pending.pop()!;
    for (const name of await readdir(path.join(root, relative))) {
      const child = relative === '' ? name : `${relative}/${name}`;
      const stat = await lstat(path.join(root, child));
      if (stat.isDirectory()) pending.push(child);
      else if (!stat.isFile() && !stat.isSymbolicLink() && !isWhiteout(stat)) {
        await rm(path.join(root, child), { force: true });
        skipped.push(child);
      }
    }
  }
  return skipped.sort();
}
