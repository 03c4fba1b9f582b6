/**
 * A cheap answer to "is this container still up?", for refresh on a node with
 * thousands of sandboxes: spawning `runc state` for each costs milliseconds,
 * reading two small files costs microseconds. The container's init is known
 * by its host pid and its start time (pid + start time never repeat), and a
 * frozen cgroup means paused. When the record lacks either, the caller asks
 * runc instead.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { cgroupMountPoints } from './cgroups.js';

/** Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot. */
export async function processStartTime(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  if (stat === undefined) return undefined;
  // Fields after the command name (which may hold spaces and parens); starttime is the 20th of them.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z' || fields[0] === 'X') return undefined;
  return fields[19];
}

let freezerFiles: Promise<string[]> | undefined;

/** The files that say whether a cgroup is frozen, per hierarchy (v1 freezer.state, v2 cgroup.freeze). */
async function frozenMarkers(cgroupsPath: string): Promise<string[]> {
  freezerFiles ??= cgroupMountPoints();
  const points = await freezerFiles;
  return points.flatMap((point) => [path.join(point, cgroupsPath, 'freezer.state'), path.join(point, cgroupsPath, 'cgroup.freeze')]);
}

/**
 * 'running' / 'paused' / 'stopped' from the init's pid and start time, or
 * undefined when that cannot be told without the runtime.
 */
export async function quickProbe(
  initPid: unknown,
  initStart: unknown,
  cgroupsPath: string,
): Promise<'running' | 'paused' | 'stopped' | undefined> {
  if (typeof initPid !== 'number' || typeof initStart !== 'string') return undefined;
  const start = await processStartTime(initPid);
  if (start !== initStart) return 'stopped';
  for (const file of await frozenMarkers(cgroupsPath)) {
    const text = await readFile(file, 'utf8').catch(() => undefined);
    if (text === undefined) continue;
    const value = text.trim();
    if (value === 'FROZEN' || value === 'FREEZING' || value === '1') return 'paused';
  }
  return 'running';
}
