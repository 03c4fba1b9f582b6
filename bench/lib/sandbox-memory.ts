/**
 * Reading what sandboxes cost the host, for bench/backends.ts: the host's
 * MemAvailable (sampled a few times, median), a process's proportional set
 * size (PSS, from /proc/<pid>/smaps_rollup: a page shared by N processes
 * counts 1/N to each, so the qemu binary or busybox pages every sandbox maps
 * are split fairly rather than counted whole in each), the sandbox's record
 * as the agent persists it (its qemu pid, its cgroups), and a safety net for
 * qemu processes a failed run left behind.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { median } from './measure.js';

const KIB_PER_MIB = 1024;

/** MemAvailable from /proc/meminfo, MiB. */
export function memAvailableMiB(): number {
  const match = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'));
  if (!match) throw new Error('/proc/meminfo has no MemAvailable line');
  return Number(match[1]) / KIB_PER_MIB;
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The median of `samples` MemAvailable readings `intervalMs` apart: one reading catches others' short spikes. */
export async function sampledMemAvailableMiB(samples = 5, intervalMs = 400): Promise<number> {
  const readings: number[] = [];
  for (let i = 0; i < samples; i++) {
    if (i > 0) await sleep(intervalMs);
    readings.push(memAvailableMiB());
  }
  return median(readings);
}

/** A process's PSS in MiB (0 when it is gone or has no user memory, like a kernel thread). */
export function pssMiB(pid: number): number {
  try {
    const match = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
    return match ? Number(match[1]) / KIB_PER_MIB : 0;
  } catch {
    return 0;
  }
}

/** The summed PSS of every process in a cgroup folder (its cgroup.procs), MiB. */
export function cgroupPssMiB(cgroupDir: string): number {
  const procs = readFileSync(path.join(cgroupDir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
  return procs.reduce((sum, pid) => sum + pssMiB(Number(pid)), 0);
}

/** What bench/backends.ts reads of a sandbox's record.json (`<root>/sandboxes/<id>/record.json`). */
export interface SandboxRecordView {
  /** The backend's own record: for VMs their qemu pid, accelerator and command line. */
  readonly backend: {
    readonly pid?: number;
    readonly accel?: string;
    readonly accelReason?: string;
    readonly args?: readonly string[];
    readonly argv?: readonly string[];
  };
  readonly cgroups?: { readonly memory?: string; readonly unified?: string };
}

export function readSandboxRecord(sandboxDir: string): SandboxRecordView {
  return JSON.parse(readFileSync(path.join(sandboxDir, 'record.json'), 'utf8')) as SandboxRecordView;
}

/** A qemu command line's memory, vCPUs and TCG code cache, as configured. */
export interface QemuMachine {
  readonly memoryMiB: number;
  readonly vcpus: number;
  readonly accelArg: string;
}

export function qemuMachineOf(args: readonly string[]): QemuMachine {
  const after = (flag: string) => args[args.indexOf(flag) + 1] ?? '';
  return {
    memoryMiB: Number.parseInt(after('-m'), 10),
    vcpus: Number.parseInt(after('-smp'), 10),
    accelArg: after('-accel'),
  };
}

/** The accelerator probe's kept answer in a plugin's folder (core/qemu writes `<cacheDir>/accel.json`). */
export function probedAccel(pluginDir: string): { accel: string; reason: string; probedAt?: string } | undefined {
  try {
    const saved = JSON.parse(readFileSync(path.join(pluginDir, 'accel.json'), 'utf8')) as { accel?: string; reason?: string; probedAt?: string };
    return typeof saved.accel === 'string' && typeof saved.reason === 'string' ? { accel: saved.accel, reason: saved.reason, probedAt: saved.probedAt } : undefined;
  } catch {
    return undefined;
  }
}

export { killQemuUnder, qemuProcessesUnder } from './qemu-processes.js';

/** Nearest-rank percentile (p in 0..100) of a sample. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)];
}
