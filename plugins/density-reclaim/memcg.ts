/**
 * A sandbox's memory cgroup (v1): its figures, and the two ways to push its
 * pages out while it is frozen.
 *
 * `memory.force_empty` asks the kernel to reclaim everything the cgroup
 * holds, with its tasks in place: page cache is dropped (written back first
 * when dirty) and, where there is swap, anonymous pages go to it. It is one
 * write and it never touches the limit. Where it is missing or refused, the
 * limit is lowered step by step instead (each write makes the kernel
 * reclaim down to the new limit, or answer EBUSY when it cannot) and put back
 * afterwards, whatever happened. Neither can OOM-kill a task: a v1 limit
 * write that cannot be met fails, it does not kill.
 */
import { access, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

export const MIB = 1024 * 1024;
/** The lowest limit the stepwise shrink tries. */
export const SHRINK_FLOOR_BYTES = MIB;
const PAGE = 4096;

export interface MemcgFigures {
  /** memory.usage_in_bytes: resident (anonymous + page cache + kernel) charged to the cgroup. */
  readonly usageBytes: number;
  /** memory.stat total_rss: anonymous memory resident. */
  readonly rssBytes: number;
  /** memory.stat total_cache: page cache (and shmem) resident. */
  readonly cacheBytes: number;
  /** memory.stat total_swap: the cgroup's pages in swap now. */
  readonly swapBytes: number;
}

/** memory.stat as numbers ("total_rss 4096" lines). */
export function parseMemoryStat(text: string): Record<string, number> {
  const fields: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const [key, value] = line.trim().split(/\s+/);
    if (key && value !== undefined && /^\d+$/.test(value)) fields[key] = Number(value);
  }
  return fields;
}

async function readBytes(file: string): Promise<number> {
  const text = (await readFile(file, 'utf8')).trim();
  if (!/^\d+$/.test(text)) throw new Error(`${file} holds ${JSON.stringify(text)}, not a byte count`);
  return Number(text);
}

export async function readMemcg(dir: string): Promise<MemcgFigures> {
  const [usageBytes, stat] = await Promise.all([readBytes(path.join(dir, 'memory.usage_in_bytes')), readFile(path.join(dir, 'memory.stat'), 'utf8')]);
  const fields = parseMemoryStat(stat);
  return { usageBytes, rssBytes: fields.total_rss ?? 0, cacheBytes: fields.total_cache ?? 0, swapBytes: fields.total_swap ?? 0 };
}

const limitFile = (dir: string) => path.join(dir, 'memory.limit_in_bytes');
const memswFile = (dir: string) => path.join(dir, 'memory.memsw.limit_in_bytes');

async function exists(file: string): Promise<boolean> {
  return access(file).then(
    () => true,
    () => false,
  );
}

/**
 * Set the memory limit. memory.memsw (memory + swap) may never be below it,
 * so a raise past memsw raises memsw first; memsw is never lowered here (it
 * may hold swapped pages, and the backend keeps it equal to the limit).
 */
export async function setLimit(dir: string, bytes: number): Promise<void> {
  const wanted = Math.floor(bytes / PAGE) * PAGE;
  const current = await readBytes(limitFile(dir));
  if (current === wanted) return;
  if (await exists(memswFile(dir))) {
    const memsw = await readBytes(memswFile(dir));
    if (memsw < wanted) await writeFile(memswFile(dir), String(wanted));
  }
  await writeFile(limitFile(dir), String(wanted));
}

/** One write to memory.force_empty: the kernel reclaims all it can of the cgroup. */
export async function forceEmpty(dir: string): Promise<void> {
  await writeFile(path.join(dir, 'memory.force_empty'), '0');
}

/**
 * Halve the limit from the current usage until the kernel answers EBUSY (it
 * cannot reclaim more) or the floor is reached, then set it to `restoreTo`,
 * in a finally: a failure half-way never leaves the sandbox squeezed.
 * Returns the lowest limit the kernel accepted.
 */
export async function shrinkLimit(dir: string, restoreTo: number, floorBytes: number = SHRINK_FLOOR_BYTES): Promise<{ lowestBytes: number; steps: number }> {
  let lowestBytes = await readBytes(limitFile(dir));
  let steps = 0;
  try {
    let target = await readBytes(path.join(dir, 'memory.usage_in_bytes'));
    while (target > floorBytes) {
      target = Math.max(floorBytes, Math.floor(target / 2 / PAGE) * PAGE);
      try {
        await writeFile(limitFile(dir), String(target));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'EBUSY') break;
        throw error;
      }
      lowestBytes = target;
      steps += 1;
    }
  } finally {
    await setLimit(dir, restoreTo);
  }
  return { lowestBytes, steps };
}

export type ReclaimMethod = 'force_empty' | 'limit';

/** Push the cgroup's memory out: force_empty, or the stepwise limit where force_empty is missing or refused. */
export async function pushOut(dir: string, restoreTo: number): Promise<{ method: ReclaimMethod; note?: string }> {
  try {
    await forceEmpty(dir);
    return { method: 'force_empty' };
  } catch (error) {
    const note = `memory.force_empty failed (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}), shrank the limit instead`;
    await shrinkLimit(dir, restoreTo);
    return { method: 'limit', note };
  }
}

/** The pids in a cgroup folder (`cgroup.procs`); none when the folder is gone. */
export async function cgroupPids(dir: string): Promise<number[]> {
  try {
    return (await readFile(path.join(dir, 'cgroup.procs'), 'utf8'))
      .split('\n')
      .map((line) => Number.parseInt(line, 10))
      .filter((pid) => Number.isInteger(pid) && pid > 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

export function toMiB(bytes: number): number {
  return Math.round((bytes / MIB) * 10) / 10;
}
