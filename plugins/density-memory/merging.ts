/**
 * Per-process KSM figures, summed over a sandbox's cgroup.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

export const MIB = 1024 * 1024;

/** The pids in a cgroup folder (`cgroup.procs`); none when the folder is gone. */
export async function cgroupPids(cgroupDir: string): Promise<number[]> {
  try {
    return parsePids(await readFile(path.join(cgroupDir, 'cgroup.procs'), 'utf8'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

export function parsePids(text: string): number[] {
  return text
    .split('\n')
    .map((line) => Number.parseInt(line, 10))
    .filter((pid) => Number.isInteger(pid) && pid > 0);
}

/** /proc/<pid>/ksm_merging_pages summed; a process that exited meanwhile counts 0. */
export async function mergingPages(pids: readonly number[]): Promise<number> {
  const counts = await Promise.all(
    pids.map(async (pid) => {
      try {
        return Number.parseInt(await readFile(`/proc/${pid}/ksm_merging_pages`, 'utf8'), 10) || 0;
      } catch {
        return 0;
      }
    }),
  );
  return counts.reduce((sum, count) => sum + count, 0);
}

/** `ksm_merge_any: yes|no` from /proc/<pid>/ksm_stat: whether PR_SET_MEMORY_MERGE is on for the process. */
export function parseKsmStat(text: string): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const at = line.indexOf(':');
    if (at > 0) fields[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return fields;
}

let pageSizeBytes: Promise<number> | undefined;

/** The kernel's page size (getconf PAGESIZE), asked once; 4096 if getconf is missing. */
export function pageSize(): Promise<number> {
  pageSizeBytes ??= new Promise((resolve) => {
    execFile('getconf', ['PAGESIZE'], { encoding: 'utf8' }, (error, stdout) => {
      const value = Number.parseInt(stdout, 10);
      resolve(!error && value > 0 ? value : 4096);
    });
  });
  return pageSizeBytes;
}

/** MiB with one decimal: the reports' unit. */
export function toMiB(bytes: number): number {
  return Math.round((bytes / MIB) * 10) / 10;
}
