/**
 * The host's TSC rate, for a guest kernel's `tsc_early_khz=` under TCG. A
 * guest under TCG reads the host's TSC but cannot calibrate it against a
 * timer reliably (emulated timers run late), and about one boot in five
 * then hangs at clock calibration; told the rate, it skips calibrating.
 *
 * Sources, most exact first: the kernel's own figure in sysfs (some kernels
 * have it), its boot log (`tsc: Refined TSC clocksource calibration` /
 * `tsc: Detected ... MHz`), then /proc/cpuinfo's `cpu MHz`, which on a CPU
 * with a constant TSC is the TSC's rate.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export interface TscRate {
  readonly khz: number;
  /** Where the figure came from: `sysfs`, `dmesg`, `cpuinfo`. */
  readonly source: string;
}

let cached: Promise<TscRate | undefined> | undefined;

/** The host TSC rate in kHz, read once per process; undefined when no source gives one (not x86, or a TSC that is not constant). */
export function hostTscRate(): Promise<TscRate | undefined> {
  cached ??= readRate();
  return cached;
}

async function readRate(): Promise<TscRate | undefined> {
  const sysfs = Number.parseInt(await readFile('/sys/devices/system/cpu/cpu0/tsc_freq_khz', 'utf8').catch(() => ''), 10);
  if (Number.isInteger(sysfs) && sysfs > 0) return { khz: sysfs, source: 'sysfs' };
  const fromLog = tscFromKernelLog(await execFileAsync('dmesg', [], { timeout: 5000, maxBuffer: 16 * 1024 * 1024 }).then((out) => out.stdout, () => ''));
  if (fromLog) return { khz: fromLog, source: 'dmesg' };
  const fromCpuinfo = tscFromCpuinfo(await readFile('/proc/cpuinfo', 'utf8').catch(() => ''));
  return fromCpuinfo ? { khz: fromCpuinfo, source: 'cpuinfo' } : undefined;
}

/** kHz from the kernel log: the refined calibration when there is one, else the first detection. */
export function tscFromKernelLog(log: string): number | undefined {
  const refined = /tsc: Refined TSC clocksource calibration: (\d+\.\d+) MHz/.exec(log)?.[1];
  const detected = /tsc: Detected (\d+\.\d+) MHz/.exec(log)?.[1];
  const mhz = refined ?? detected;
  return mhz ? Math.round(Number(mhz) * 1000) : undefined;
}

/** kHz from /proc/cpuinfo's first `cpu MHz`, only when the flags promise a constant TSC (else it is the current clock). */
export function tscFromCpuinfo(cpuinfo: string): number | undefined {
  const flags = /^flags\s*:(.*)$/m.exec(cpuinfo)?.[1]?.split(/\s+/) ?? [];
  if (!flags.includes('constant_tsc')) return undefined;
  const mhz = /^cpu MHz\s*:\s*(\d+(?:\.\d+)?)/m.exec(cpuinfo)?.[1];
  return mhz ? Math.round(Number(mhz) * 1000) : undefined;
}
