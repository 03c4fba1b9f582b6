/**
 * What `dsec sandbox pause|resume` print: one line per sandbox with its
 * outcome, and for a pause the memory it gave back when the agent says.
 * Pure, so the wording is tested without an agent.
 */
import type { BatchOutcome, SandboxInfo } from '../live.js';
import type { Colors } from './output.js';

/** A pause's reclaim as the density-reclaim plugin records it, when the sandbox info carries it. */
export interface ReclaimFigures {
  readonly beforeMiB: number;
  readonly afterMiB: number;
  readonly swappedMiB?: number;
}

/**
 * The last reclaim of a sandbox, read from `info.density['density-reclaim'].reclaim`
 * where an agent reports the plugins' records with the info; undefined otherwise.
 */
export function reclaimOf(info: SandboxInfo): ReclaimFigures | undefined {
  const records = info.density;
  if (!records || typeof records !== 'object') return undefined;
  const record = (records as Record<string, unknown>)['density-reclaim'];
  const reclaim = record && typeof record === 'object' ? (record as { reclaim?: unknown }).reclaim : undefined;
  if (!reclaim || typeof reclaim !== 'object') return undefined;
  const { beforeMiB, afterMiB, swappedMiB } = reclaim as Record<string, unknown>;
  if (typeof beforeMiB !== 'number' || typeof afterMiB !== 'number') return undefined;
  return { beforeMiB, afterMiB, ...(typeof swappedMiB === 'number' ? { swappedMiB } : {}) };
}

const mib = (value: number): string => `${Math.round(value * 10) / 10} MiB`;

/** `web-1a2b3c4d  paused  reclaimed 120 MiB (250 MiB -> 130 MiB resident, 100 MiB to swap)` or the error. */
export function outcomeLines(outcomes: readonly BatchOutcome[], verb: 'pause' | 'resume', c: Colors): string[] {
  const width = Math.max(0, ...outcomes.map((outcome) => outcome.id.length));
  return outcomes.map((outcome) => {
    const id = outcome.id.padEnd(width);
    if (!outcome.ok) return `${id}  ${c.red('failed')}  ${outcome.error.message} ${c.dim(`[${outcome.error.code}]`)}`;
    const status = outcome.info.status;
    const expected = verb === 'pause' ? 'paused' : 'running';
    const shown = status === expected ? c.green(status) : c.yellow(status);
    const reclaim = verb === 'pause' ? reclaimOf(outcome.info) : undefined;
    if (!reclaim) return `${id}  ${shown}`;
    const swapped = reclaim.swappedMiB ? `, ${mib(reclaim.swappedMiB)} to swap` : '';
    return `${id}  ${shown}  reclaimed ${mib(Math.max(0, reclaim.beforeMiB - reclaim.afterMiB))} (${mib(reclaim.beforeMiB)} -> ${mib(reclaim.afterMiB)} resident${swapped})`;
  });
}

/** A batch failed when any sandbox in it did. */
export function batchFailed(outcomes: readonly BatchOutcome[]): boolean {
  return outcomes.some((outcome) => !outcome.ok);
}
