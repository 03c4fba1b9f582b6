/**
 * The sandbox's cgroup directories, found from the cgroup mounts in
 * /proc/self/mountinfo (v1, v2 or hybrid alike). runc removes them on delete;
 * this is the sweep for the cases it could not (a crash between steps).
 */
import { existsSync } from 'node:fs';
import { readFile, rmdir } from 'node:fs/promises';
import path from 'node:path';
import type { SandboxCgroups } from '../../core/plugin-api.js';

export interface CgroupMount {
  /** Where the hierarchy is mounted, e.g. /sys/fs/cgroup/freezer. */
  readonly point: string;
  readonly type: 'cgroup' | 'cgroup2';
  /** The super options: for v1, the controllers (`rw,freezer`). */
  readonly options: readonly string[];
}

/** Every cgroup hierarchy mounted on this host, read now. */
export async function cgroupMounts(): Promise<CgroupMount[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const mounts: CgroupMount[] = [];
  for (const line of text.split('\n')) {
    const [before, after] = line.split(' - ');
    if (!before || !after) continue;
    const [fsType, , superOptions = ''] = after.split(' ');
    if (fsType === 'cgroup' || fsType === 'cgroup2') {
      mounts.push({ point: before.split(' ')[4]!, type: fsType, options: superOptions.split(',') });
    }
  }
  return mounts;
}

/** Where each cgroup hierarchy is mounted on this host. */
export async function cgroupMountPoints(): Promise<string[]> {
  return (await cgroupMounts()).map((mount) => mount.point);
}

let knownMounts: Promise<CgroupMount[]> | undefined;

/**
 * The cgroup mounts, read once per process: hierarchies are mounted at boot,
 * and every create, probe and destroy would otherwise re-read mountinfo,
 * whose size grows with the number of sandboxes (one overlay line each).
 */
export function cachedCgroupMounts(): Promise<CgroupMount[]> {
  knownMounts ??= cgroupMounts();
  knownMounts.catch(() => (knownMounts = undefined));
  return knownMounts;
}

/** The cgroup-v1 controllers a sandbox's folders are reported for (SandboxCgroups). */
const V1_CONTROLLERS = ['memory', 'cpu', 'cpuacct', 'freezer', 'pids'] as const;

/**
 * Where `cgroupsPath` (e.g. `/dsec/<cid>`) lives for each controller density
 * plugins read or write: the v1 hierarchy that has the controller (cpu and
 * cpuacct usually share one, `cpu,cpuacct`), or the unified hierarchy on a
 * cgroup-v2-only host. A hybrid host's unified tree holds no controller, so
 * it is left out there.
 */
export async function sandboxCgroups(cgroupsPath: string): Promise<SandboxCgroups> {
  const mounts = await cachedCgroupMounts();
  const found: Record<string, string> = {};
  for (const controller of V1_CONTROLLERS) {
    const mount = mounts.find((candidate) => candidate.type === 'cgroup' && candidate.options.includes(controller));
    if (mount) found[controller] = path.join(mount.point, cgroupsPath);
  }
  const unified = mounts.find((candidate) => candidate.type === 'cgroup2');
  if (Object.keys(found).length === 0 && unified) found.unified = path.join(unified.point, cgroupsPath);
  return found as SandboxCgroups;
}

/** The directories of `cgroupsPath` (e.g. `/dsec/<cid>`) that exist now, in every hierarchy. */
export async function existingCgroupDirs(cgroupsPath: string): Promise<string[]> {
  const found: string[] = [];
  for (const point of await cgroupMountPoints()) {
    const dir = path.join(point, cgroupsPath);
    const present = await readFile(path.join(dir, 'cgroup.procs'), 'utf8').then(
      () => true,
      () => false,
    );
    if (present) found.push(dir);
  }
  return found;
}

/** Remove the cgroup dirs, killing any process still in them first. */
export async function removeCgroupDirs(cgroupsPath: string): Promise<void> {
  const mounts = await cachedCgroupMounts();
  const problems = await Promise.all(mounts.map(({ point }) => removeCgroupDir(path.join(point, cgroupsPath))));
  const failed = problems.filter((problem): problem is string => problem !== undefined);
  if (failed.length > 0) throw new Error(`could not remove cgroup(s): ${failed.join('; ')}`);
}

/** Undefined once `dir` is gone, else what went wrong. */
async function removeCgroupDir(dir: string): Promise<string | undefined> {
  // The usual case (runc removed it) costs one stat of an in-memory fs, not a thread-pool round trip.
  if (!existsSync(dir)) return undefined;
  for (let attempt = 0; attempt < 20; attempt++) {
    try {
      await rmdir(dir);
      return undefined;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return undefined;
      if (code !== 'EBUSY' || attempt === 19) return `${dir}: ${(error as Error).message}`;
      await killMembers(dir);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
  return undefined;
}

async function killMembers(dir: string): Promise<void> {
  const text = await readFile(path.join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
  for (const pid of text.split('\n').filter(Boolean).map(Number)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}
