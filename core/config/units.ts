/**
 * Quantities as users write them -> the numbers the model holds. The schema
 * already checked the form ("512Mi", "500m", "2h"); these convert and say
 * when a well-formed value is out of range.
 */

export const MEMORY_MIN_MIB = 16;
export const MEMORY_MAX_MIB = 1024 * 1024;
export const CPU_MAX = 256;

const MEMORY_UNIT_MIB: Record<string, number> = { Mi: 1, Gi: 1024, Ti: 1024 * 1024 };
const DURATION_UNIT_SECONDS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/**
 * `512Mi` / `2Gi` / a number of MiB -> whole MiB (rounded up: cgroups take
 * bytes, and a fraction of a MiB is never what was meant); undefined when
 * not of that form.
 */
export function memoryMiB(value: number | string): number | undefined {
  if (typeof value === 'number') return Math.ceil(value);
  const match = /^([0-9]+(?:\.[0-9]+)?)(Mi|Gi|Ti)$/.exec(value);
  return match ? Math.ceil(Number(match[1]) * MEMORY_UNIT_MIB[match[2]]) : undefined;
}

/** `500m` / a number of cores -> cores; undefined when not of that form. */
export function cpuCores(value: number | string): number | undefined {
  if (typeof value === 'number') return value;
  const match = /^([1-9][0-9]*)m$/.exec(value);
  return match ? Number(match[1]) / 1000 : undefined;
}

/** `90s` / `30m` / `2h` / `1d` / a number of seconds -> seconds; undefined when not of that form. */
export function durationSeconds(value: number | string): number | undefined {
  if (typeof value === 'number') return value;
  const match = /^([1-9][0-9]*)(s|m|h|d)$/.exec(value);
  return match ? Number(match[1]) * DURATION_UNIT_SECONDS[match[2]] : undefined;
}
