/**
 * Latency figures and the machine's state for the SDK benchmarks (exec,
 * acquire, rollouts): nearest-rank percentiles, a one-line summary of a
 * sample, the load average, a timer that runs N calls with bounded
 * concurrency and records each one, and a small flag parser.
 */
import { readFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { fixed, median } from './measure.js';

/** Nearest rank: the smallest value with at least `p` percent of the sample at or below it. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export interface Summary {
  readonly count: number;
  readonly median: number;
  readonly p90: number;
  readonly p99: number;
  readonly min: number;
  readonly max: number;
}

export function summarize(values: readonly number[]): Summary {
  return {
    count: values.length,
    median: median(values),
    p90: percentile(values, 90),
    p99: percentile(values, 99),
    min: values.length ? Math.min(...values) : Number.NaN,
    max: values.length ? Math.max(...values) : Number.NaN,
  };
}

/** `1.23 / 0.98 / 0.75` (1, 5, 15 minutes). */
export function loadAverage(): string {
  return loadavg()
    .map((value) => value.toFixed(2))
    .join(' / ');
}

/** The machine in one line: cores, memory, kernel, and the load average now. */
export function machineLine(): string {
  const kernel = readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim();
  const model = cpus()[0]?.model.replace(/\s+/g, ' ').trim() ?? 'unknown CPU';
  return `${cpus().length} cores (${model}), ${fixed(totalmem() / 2 ** 30, 1)} GiB, Linux ${kernel}, load average ${loadAverage()}`;
}

/**
 * Run `call` `count` times with `limit` in flight, timing each; resolves to
 * the latencies (ms, in completion order) and the wall time (s). A failure
 * stops new calls and is rethrown once the ones in flight are done.
 */
export async function timedCalls(count: number, limit: number, call: (index: number) => Promise<void>): Promise<{ latencies: number[]; seconds: number }> {
  const latencies: number[] = [];
  let next = 0;
  let failure: unknown;
  const started = performance.now();
  const worker = async () => {
    while (next < count && failure === undefined) {
      const index = next++;
      const begun = performance.now();
      try {
        await call(index);
        latencies.push(performance.now() - begun);
      } catch (error) {
        failure ??= error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  if (failure !== undefined) throw failure;
  return { latencies, seconds: (performance.now() - started) / 1000 };
}

/**
 * `--name value` flags onto a copy of `defaults` (numbers must be positive
 * integers; a string default takes any value; a boolean default is a bare
 * `--name`, or `--no-name` to turn it off). Anything else throws `usage`.
 */
export function parseFlags<T extends Record<string, number | string | boolean>>(argv: readonly string[], defaults: T, usage: string): T {
  const settings: Record<string, number | string | boolean> = { ...defaults };
  const camel = (flag: string) => flag.replace(/-([a-z])/g, (_, letter: string) => letter.toUpperCase());
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (!flag.startsWith('--')) throw new Error(usage);
    const negated = flag.startsWith('--no-') && typeof defaults[camel(flag.slice(5))] === 'boolean';
    const key = camel(negated ? flag.slice(5) : flag.slice(2));
    const kind = typeof defaults[key];
    if (kind === 'boolean') {
      settings[key] = !negated;
      continue;
    }
    const raw = argv[++i];
    if (raw === undefined) throw new Error(usage);
    if (kind === 'string') settings[key] = raw;
    else if (kind === 'number' && Number.isInteger(Number(raw)) && Number(raw) >= 1) settings[key] = Number(raw);
    else throw new Error(usage);
  }
  return settings as T;
}

/** `12.3` ms with one decimal below 100, whole above. */
export const ms = (value: number): string => (Number.isFinite(value) ? (value < 100 ? value.toFixed(1) : value.toFixed(0)) : '-');
