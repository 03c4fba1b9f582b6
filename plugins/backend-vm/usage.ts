/**
 * What a VM uses, read from its qemu process: the guest's memory as the host
 * sees it (qemu's resident set: the guest pages it touched, qemu's own heap
 * and, under TCG, the translated code) and the CPU time of all of qemu's
 * threads. A paused VM has no process: its state is a file, so it uses no
 * memory and its "swap" is that file's size.
 */
import { readFile, stat } from 'node:fs/promises';
import type { SandboxUsage } from '../../core/plugin-api.js';

/** The kernel's USER_HZ: /proc/<pid>/stat counts CPU time in these ticks (100 on every Linux this runs on). */
const CLOCK_TICKS_PER_SECOND = 100;
const MIB = 1024 * 1024;

export async function qemuUsage(pid: number): Promise<SandboxUsage> {
  const [status, stat] = await Promise.all([readFile(`/proc/${pid}/status`, 'utf8'), readFile(`/proc/${pid}/stat`, 'utf8')]);
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
  // Fields after the command name (which may hold spaces and parentheses): utime is the 14th field, stime the 15th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return {
    cpuSeconds: ticks / CLOCK_TICKS_PER_SECOND,
    memoryMiB: round(kib('VmRSS') / 1024),
    cacheMiB: 0,
    swapMiB: round(kib('VmSwap') / 1024),
    processes: 1,
  };
}

/** A paused VM: nothing resident; its saved state on disk. */
export async function savedUsage(stateFile: string, cpuSeconds: number): Promise<SandboxUsage> {
  const bytes = await stat(stateFile).then((found) => found.size, () => 0);
  return { cpuSeconds, memoryMiB: 0, cacheMiB: 0, swapMiB: round(bytes / MIB), processes: 0 };
}

function round(value: number): number {
  return Math.round(value * 10) / 10;
}
