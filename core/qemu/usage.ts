/**
 * What a VM uses, read from its qemu process in /proc (VMs have no cgroup of
 * their own): the CPU time of every qemu thread, and resident memory counted
 * as qemu's anonymous and shared-memory pages (the guest RAM it touched,
 * TCG's translated code, qemu's heap), leaving out file pages (the qemu
 * binary, firmware and guest kernel: page cache every VM on the node shares).
 * A paused VM has no process: its state is a file, so it holds no memory and
 * its "swap" is that file's size.
 */
import { readFile, stat } from 'node:fs/promises';
import type { SandboxUsage } from '../live.js';

/** The kernel's USER_HZ: /proc/<pid>/stat counts CPU time in these ticks (100 on every Linux this runs on). */
const CLOCK_TICKS_PER_SECOND = 100;
const MIB = 1024 * 1024;

/** A VM with no process and no saved state (stopped, or not started yet). */
export const IDLE_VM_USAGE: SandboxUsage = Object.freeze({ cpuSeconds: 0, memoryMiB: 0, cacheMiB: 0, swapMiB: 0, processes: 0 });

/** A running qemu's usage. Throws when the process is gone (the caller probes). */
export async function qemuUsage(pid: number): Promise<SandboxUsage> {
  const [status, statLine] = await Promise.all([readFile(`/proc/${pid}/status`, 'utf8'), readFile(`/proc/${pid}/stat`, 'utf8')]);
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
  // Fields after the command name (which may hold spaces and parentheses): utime is the 14th field, stime the 15th.
  const fields = statLine.slice(statLine.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return {
    cpuSeconds: ticks / CLOCK_TICKS_PER_SECOND,
    memoryMiB: round((kib('RssAnon') + kib('RssShmem')) / 1024),
    cacheMiB: 0,
    swapMiB: round(kib('VmSwap') / 1024),
    processes: 1,
  };
}

/** A paused VM: nothing resident; its saved state on disk, shown as swap. */
export async function savedVmUsage(stateFile: string, cpuSeconds: number): Promise<SandboxUsage> {
  const bytes = await stat(stateFile).then((found) => found.size, () => 0);
  return { cpuSeconds, memoryMiB: 0, cacheMiB: 0, swapMiB: round(bytes / MIB), processes: 0 };
}

function round(value: number): number {
  return Math.round(value * 10) / 10;
}
