/**
 * What a microVM uses, read from its qemu process in /proc (it has no
 * cgroup of its own): CPU time (user + system, every thread), and resident
 * memory counted as qemu's anonymous and shared-memory pages (guest RAM,
 * TCG's code cache, qemu's heap), leaving out file pages (the qemu binary
 * and the guest kernel, shared by every VM on the node).
 */
import { readFile } from 'node:fs/promises';
import type { SandboxUsage } from '../../core/plugin-api.js';

const CLOCK_TICKS_PER_SECOND = 100;

export const IDLE_USAGE: SandboxUsage = Object.freeze({ cpuSeconds: 0, memoryMiB: 0, cacheMiB: 0, swapMiB: 0, processes: 0 });

export async function qemuUsage(pid: number): Promise<SandboxUsage> {
  const [status, stat] = await Promise.all([readFile(`/proc/${pid}/status`, 'utf8'), readFile(`/proc/${pid}/stat`, 'utf8')]);
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
  // Fields after the command name (which may hold spaces): utime is the 14th field, stime the 15th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return {
    cpuSeconds: ticks / CLOCK_TICKS_PER_SECOND,
    memoryMiB: round((kib('RssAnon') + kib('RssShmem')) / 1024),
    cacheMiB: 0,
    swapMiB: round(kib('VmSwap') / 1024),
    processes: 1,
  };
}

function round(value: number): number {
  return Math.round(value * 10) / 10;
}
