/**
 * What a sandbox uses now, from its cgroup's own counters (SandboxUsage).
 * These are kernel pseudo-files that never wait for a disk, read
 * synchronously (see liveness.ts for why).
 *
 *   cgroup v1: cpuacct.usage (ns), memory.usage_in_bytes, memory.stat
 *              total_cache / total_swap, cgroup.procs
 *   cgroup v2: cpu.stat usage_usec, memory.current, memory.stat file,
 *              memory.swap.current, cgroup.procs
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { SandboxCgroups, SandboxUsage } from '../../core/plugin-api.js';

const MIB = 1024 * 1024;

export function readUsage(cgroups: SandboxCgroups): SandboxUsage {
  if (cgroups.memory && cgroups.cpuacct) return readV1(cgroups);
  if (cgroups.unified) return readV2(cgroups.unified);
  throw new Error('the sandbox has no cgroup folders on record to read its usage from');
}

function readV1(cgroups: SandboxCgroups): SandboxUsage {
  const memoryStat = statFields(read(cgroups.memory!, 'memory.stat'));
  return {
    cpuSeconds: Number(read(cgroups.cpuacct!, 'cpuacct.usage')) / 1e9,
    memoryMiB: mib(Number(read(cgroups.memory!, 'memory.usage_in_bytes'))),
    cacheMiB: mib(memoryStat.get('total_cache') ?? 0),
    // total_swap is there only with swap accounting (memory.memsw.*).
    swapMiB: mib(memoryStat.get('total_swap') ?? 0),
    processes: countProcesses(cgroups.pids ?? cgroups.memory!),
  };
}

function readV2(dir: string): SandboxUsage {
  const cpuStat = statFields(read(dir, 'cpu.stat'));
  const memoryStat = statFields(read(dir, 'memory.stat'));
  const swap = Number(readOptional(dir, 'memory.swap.current') ?? 0);
  return {
    cpuSeconds: (cpuStat.get('usage_usec') ?? 0) / 1e6,
    memoryMiB: mib(Number(read(dir, 'memory.current'))),
    cacheMiB: mib(memoryStat.get('file') ?? 0),
    swapMiB: mib(swap),
    processes: countProcesses(dir),
  };
}

/** MiB with two decimals: enough for a dashboard, and stable in JSON. */
function mib(bytes: number): number {
  return Math.round((bytes / MIB) * 100) / 100;
}

function countProcesses(dir: string): number {
  return read(dir, 'cgroup.procs').split('\n').filter(Boolean).length;
}

/** `key value` lines (memory.stat, cpu.stat) into a map. */
export function statFields(text: string): Map<string, number> {
  const fields = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [key, value] = line.split(' ');
    if (key && value !== undefined) fields.set(key, Number(value));
  }
  return fields;
}

function read(dir: string, file: string): string {
  try {
    return readFileSync(path.join(dir, file), 'utf8').trim();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new Error(`${path.join(dir, file)} is gone: the sandbox is not running`);
    throw error;
  }
}

function readOptional(dir: string, file: string): string | undefined {
  try {
    return readFileSync(path.join(dir, file), 'utf8').trim();
  } catch {
    return undefined;
  }
}
