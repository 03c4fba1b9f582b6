/**
 * The sandbox's cgroup directories, found from the cgroup mounts in
 * /proc/self/mountinfo (v1, v2 or hybrid alike). runc removes them on delete;
 * this is the sweep for the cases it could not (a crash between steps).
 */
import { readFile, rmdir } from 'node:fs/promises';
import path from 'node:path';

/** Where each cgroup hierarchy is mounted on this host. */
export async function cgroupMountPoints(): Promise<string[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const points: string[] = [];
  for (const line of text.split('\n')) {
    const [before, after] = line.split(' - ');
    if (!before || !after) continue;
    const fsType = after.split(' ')[0];
    if (fsType === 'cgroup' || fsType === 'cgroup2') points.push(before.split(' ')[4]!);
  }
  return points;
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
  const problems: string[] = [];
  for (const dir of await existingCgroupDirs(cgroupsPath)) {
    for (let attempt = 0; attempt < 20; attempt++) {
      try {
        await rmdir(dir);
        break;
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'ENOENT') break;
        if (code !== 'EBUSY' || attempt === 19) {
          problems.push(`${dir}: ${(error as Error).message}`);
          break;
        }
        await killMembers(dir);
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    }
  }
  if (problems.length > 0) throw new Error(`could not remove cgroup(s): ${problems.join('; ')}`);
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
