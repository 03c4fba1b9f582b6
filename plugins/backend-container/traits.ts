/**
 * Process traits (core/hooks.ts ProcessTraits) on a container sandbox. The
 * per-process ones (KSM merging, SCHED_IDLE, the core-scheduling cookie) are
 * given at spawn by the native helper in front of `runc run` and every
 * `runc exec` (core/native.ts spawnPrefix); this file does the cgroup half of
 * idleCpu: `cpu.idle` 1 on the sandbox's CPU cgroup, the lowest weight the
 * scheduler has, so the whole group yields to every non-idle one.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { SandboxCgroups } from '../../core/plugin-api.js';

function cpuDir(cgroups: SandboxCgroups): string {
  const dir = cgroups.cpu ?? cgroups.unified;
  if (!dir) throw new Error('the sandbox has no cpu cgroup on record to mark idle');
  return dir;
}

/** Mark the sandbox's CPU cgroup idle (1) or not (0). */
export async function setCpuIdle(cgroups: SandboxCgroups, idle: boolean): Promise<void> {
  const file = path.join(cpuDir(cgroups), 'cpu.idle');
  try {
    await writeFile(file, idle ? '1' : '0');
  } catch (error) {
    throw new Error(`could not write ${idle ? 1 : 0} to ${file} (kernel without cpu.idle, 5.15+?): ${(error as Error).message}`);
  }
}

/**
 * Run `work` with the CPU cgroup briefly not idle. The kernel refuses to set
 * cpu.shares on an idle group (EINVAL), and `runc update` writes every limit
 * again, shares included, whatever flag it was given.
 */
export async function withCpuIdleLifted<T>(cgroups: SandboxCgroups, work: () => Promise<T>): Promise<T> {
  await setCpuIdle(cgroups, false);
  try {
    return await work();
  } finally {
    await setCpuIdle(cgroups, true);
  }
}
