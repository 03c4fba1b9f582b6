/**
 * Small measuring tools shared by the benchmarks: a bounded worker pool that
 * times itself, medians, the machine's busy CPU time (/proc/stat), and a
 * plain text table.
 */
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * Run `work` over 0..count-1 with at most `limit` in flight. Every item runs
 * even when one fails (so cleanup lists stay complete); the first failure is
 * rethrown at the end. Resolves to the wall time in seconds.
 */
export async function pool(count: number, limit: number, work: (index: number) => Promise<void>): Promise<number> {
  const started = performance.now();
  let next = 0;
  let failure: unknown;
  const worker = async () => {
    while (next < count) {
      const index = next++;
      try {
        await work(index);
      } catch (error) {
        failure ??= error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  if (failure !== undefined) throw failure;
  return (performance.now() - started) / 1000;
}

const TICKS_PER_SECOND = 100; // USER_HZ: 100 on every Linux architecture Node runs on

/** CPU seconds the whole machine spent busy (everything but idle and iowait) since boot. */
export function machineBusySeconds(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0];
  const fields = line.trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, _idle, _iowait, irq, softirq, steal] = fields;
  return (user + nice + system + irq + softirq + (steal ?? 0)) / TICKS_PER_SECOND;
}

/** Wall time and the machine's busy CPU time of `work`. */
export async function measured<T>(work: () => Promise<T>): Promise<{ value: T; seconds: number; cpuSeconds: number }> {
  const cpuBefore = machineBusySeconds();
  const started = performance.now();
  const value = await work();
  return { value, seconds: (performance.now() - started) / 1000, cpuSeconds: machineBusySeconds() - cpuBefore };
}

export const coreCount = (): number => cpus().length;

/** Right-aligned columns after a left-aligned first one. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const all = [header, ...rows];
  const widths = header.map((_, column) => Math.max(...all.map((row) => (row[column] ?? '').length)));
  const line = (row: readonly string[]) =>
    row.map((cell, column) => (column === 0 ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join('  ');
  return `${all.map((row) => `  ${line(row)}`.trimEnd()).join('\n')}\n`;
}

export const fixed = (value: number, digits = 1): string => (Number.isFinite(value) ? value.toFixed(digits) : '-');
