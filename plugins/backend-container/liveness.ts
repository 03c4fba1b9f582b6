/**
 * A cheap answer to "is this container still up?", for refresh on a node with
 * thousands of sandboxes: spawning `runc state` for each costs milliseconds,
 * reading two small files costs microseconds. The container's init is known
 * by its host pid and its start time (pid + start time never repeat), and a
 * frozen cgroup means paused. When the record lacks either, the caller asks
 * runc instead.
 *
 * These files are kernel pseudo-files of a few hundred bytes that never wait
 * for a disk, so they are read synchronously: ~10 us of CPU each, where
 * fs/promises' readFile (open, fstat, read, close through the thread pool)
 * costs ~90 us, which a refresh of thousands of sandboxes pays twice each.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { cachedCgroupMounts } from './cgroups.js';

/** Field 22 of /proc/<pid>/stat: when the process started, in clock ticks since boot. */
export async function processStartTime(pid: number): Promise<string | undefined> {
  const stat = readPseudoFile(`/proc/${pid}/stat`);
  if (stat === undefined) return undefined;
  // Fields after the command name (which may hold spaces and parens); starttime is the 20th of them.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z' || fields[0] === 'X') return undefined;
  return fields[19];
}

/** A /proc or cgroupfs file's text, or undefined when it is not there (the process or cgroup is gone). */
function readPseudoFile(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/**
 * The files that say whether a cgroup is frozen: freezer.state in the v1
 * hierarchy that has the freezer controller, cgroup.freeze in a v2 one. Only
 * those: trying both names in every hierarchy (a dozen on a v1 host) made a
 * refresh of N sandboxes cost 26 N failed opens.
 */
async function frozenMarkers(cgroupsPath: string): Promise<string[]> {
  const mounts = await cachedCgroupMounts();
  return mounts.flatMap((mount) => {
    if (mount.type === 'cgroup2') return [path.join(mount.point, cgroupsPath, 'cgroup.freeze')];
    return mount.options.includes('freezer') ? [path.join(mount.point, cgroupsPath, 'freezer.state')] : [];
  });
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
    const text = readPseudoFile(file);
    if (text === undefined) continue;
    const value = text.trim();
    if (value === 'FROZEN' || value === 'FREEZING' || value === '1') return 'paused';
  }
  return 'running';
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * SIGKILL the container's init if it is still the process the record names
 * (pid + start time), and wait briefly until it is gone or a zombie, which
 * is when the runtime sees the container as stopped. True when the init is
 * dead; false when the record cannot tell (no pid or start time), or when it
 * outlived the wait (a frozen init dies only once thawed): then the caller
 * leaves it to the runtime.
 */
export async function killInit(initPid: unknown, initStart: unknown, waitMs = 100): Promise<boolean> {
  if (typeof initPid !== 'number' || typeof initStart !== 'string') return false;
  if ((await processStartTime(initPid)) !== initStart) return true;
  try {
    process.kill(initPid, 'SIGKILL');
  } catch {
    // exited in between
  }
  // A pid namespace's init dies after every other process in it: usually within a few ms.
  for (let waited = 0; waited < waitMs; waited += 2) {
    if ((await processStartTime(initPid)) !== initStart) return true;
    await sleep(2);
  }
  return false;
}
