/**
 * The admission arithmetic, pure: what a node admits under its policy, what
 * its sandboxes request, and whether one more fits (with the reason when not).
 */
import type { OvercommitPolicy } from '../../core/plugin-api.js';

/** CPUs and MiB, as NodeInfo carries them. */
export interface Amounts {
  readonly cpu: number;
  readonly memoryMiB: number;
}

/** What holds (or is about to hold) its request: a failed or stopped sandbox holds nothing. */
export const HOLDING_STATUSES: ReadonlySet<string> = new Set(['creating', 'running', 'paused']);

/** Below this, a difference is float noise (0.1 + 0.2 CPUs), not an overrun. */
const EPSILON = 1e-9;

/** (capacity - reserve) x ratio per resource, never below 0. */
export function allocatable(capacity: Amounts, policy: OvercommitPolicy): Amounts {
  return {
    cpu: round(Math.max(0, (capacity.cpu - policy.reserve.cpu) * policy.overcommit.cpu)),
    memoryMiB: round(Math.max(0, (capacity.memoryMiB - policy.reserve.memoryMiB) * policy.overcommit.memory)),
  };
}

/** The sum of the requests of the sandboxes that hold theirs. */
export function requested(sandboxes: readonly { readonly status: string; readonly resources: Amounts }[]): Amounts {
  let cpu = 0;
  let memoryMiB = 0;
  for (const sandbox of sandboxes) {
    if (!HOLDING_STATUSES.has(sandbox.status)) continue;
    cpu += sandbox.resources.cpu;
    memoryMiB += sandbox.resources.memoryMiB;
  }
  return { cpu: round(cpu), memoryMiB: round(memoryMiB) };
}

/**
 * Why `ask` does not fit beside `already` within `limit`, per resource that
 * overflows (joined by "; "), or undefined when it fits:
 * `memory: 256 MiB requested, 128 MiB left of 23000 MiB allocatable (memory 1x, 512 MiB reserved)`.
 */
export function refusal(ask: Amounts, already: Amounts, limit: Amounts, policy: OvercommitPolicy): string | undefined {
  const reasons: string[] = [];
  const check = (resource: 'cpu' | 'memory', key: keyof Amounts, unit: string, ratio: number, reserve: number) => {
    const left = limit[key] - already[key];
    if (ask[key] <= left + EPSILON) return;
    reasons.push(
      `${resource}: ${show(ask[key])} ${unit} requested, ${show(Math.max(0, left))} ${unit} left of ${show(limit[key])} ${unit} allocatable ` +
        `(${resource} ${show(ratio)}x, ${show(reserve)} ${unit} reserved)`,
    );
  };
  check('cpu', 'cpu', 'CPU', policy.overcommit.cpu, policy.reserve.cpu);
  check('memory', 'memoryMiB', 'MiB', policy.overcommit.memory, policy.reserve.memoryMiB);
  return reasons.length > 0 ? reasons.join('; ') : undefined;
}

/** The policy in a few words, for logs: "cpu 20x, memory 1x, 512 MiB and 0 CPU reserved". */
export function describePolicy(policy: OvercommitPolicy): string {
  return (
    `cpu ${show(policy.overcommit.cpu)}x, memory ${show(policy.overcommit.memory)}x, ` +
    `${show(policy.reserve.memoryMiB)} MiB and ${show(policy.reserve.cpu)} CPU reserved`
  );
}

/** Three decimals at most: requests are sums of fractions of CPUs. */
function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}

function show(value: number): string {
  return String(round(value));
}
