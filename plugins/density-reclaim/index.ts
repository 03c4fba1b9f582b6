/**
 * density-reclaim: a paused sandbox gives its memory back.
 *
 *   agentStarted  with `swap`: the root's zram swap device, set up or reused (zram.ts)
 *   paused        push the frozen sandbox's memory out of its memory cgroup (memcg.ts):
 *                 page cache dropped, anonymous pages to swap where there is some;
 *                 before/after recorded in sandbox.density['density-reclaim']
 *   resuming      the limit put back from the spec (an agent that died mid-reclaim
 *                 left it low), swapped pages prefetched (process_madvise WILLNEED)
 *   nodeUsage     memory.reclaimedMiB, memory.swap, fleets[].reclaimedMiB
 *
 * It imports only the public plugin API, like any third-party plugin.
 */
import {
  LABEL_FLEET,
  prefetchProcesses,
  STAGE,
  type Dsec,
  type DsecPlugin,
  type NodeContext,
  type NodeUsage,
  type SandboxContext,
} from '../../core/plugin-api.js';
import { cgroupPids, MIB, pushOut, readMemcg, setLimit, toMiB, type ReclaimMethod } from './memcg.js';
import { parseReclaimOptions, PLUGIN_NAME, type DensityReclaimOptions } from './options.js';
import { ensureSwap, swapStatus } from './zram.js';

export { PLUGIN_NAME, type DensityReclaimOptions, type SwapOptions, type ZramAlgorithm } from './options.js';
export { releaseSwap, ensureSwap, readRecord, parseMmStat, parseProcSwaps, parseAlgorithms, type ZramRecord } from './zram.js';
export { parseMemoryStat, readMemcg, shrinkLimit, forceEmpty, setLimit, type MemcgFigures } from './memcg.js';

/** What this plugin keeps in `sandbox.density['density-reclaim']` (JSON, persisted by the agent). */
export interface ReclaimRecord {
  /** The last pause's reclaim. */
  readonly reclaim?: {
    /** Resident (memory.usage_in_bytes) when the sandbox had just frozen. */
    readonly beforeMiB: number;
    /** Resident once the reclaim was done. */
    readonly afterMiB: number;
    /** Growth of the cgroup's swap (memory.stat total_swap) over the reclaim. */
    readonly swappedMiB: number;
    /** Page cache dropped (total_cache before minus after). */
    readonly cacheDroppedMiB: number;
    readonly method: ReclaimMethod;
    readonly durationMs: number;
    readonly at: string;
  };
  /** The last resume's prefetch. */
  readonly prefetch?: {
    /** The cgroup's swap when the resume began: what the prefetch asked back. */
    readonly swappedMiB: number;
    /** Mappings the kernel took the WILLNEED advice for (the reads finish in the background). */
    readonly advisedMiB: number;
    readonly durationMs: number;
    readonly errors: number;
    readonly at: string;
  };
}

export default function densityReclaim(options?: DensityReclaimOptions): DsecPlugin {
  const resolved = parseReclaimOptions(options);
  return {
    name: PLUGIN_NAME,
    apply(dsec: Dsec) {
      if (!resolved.enabled) return;
      const tap = { name: PLUGIN_NAME, stage: STAGE.DENSITY };
      const swap = resolved.swap;
      if (swap) {
        dsec.hooks.agentStarted.tapPromise(tap, async (node) => {
          try {
            const { record, reused } = await ensureSwap(node.root, swap, node.log);
            node.log.info(
              `${PLUGIN_NAME}: ${reused ? 'reusing' : 'set up'} swap /dev/${record.device} (zram, ${record.sizeMiB} MiB, ${record.algorithm}, priority ${record.priority})`,
            );
          } catch (error) {
            node.log.warn(`${PLUGIN_NAME}: no zram swap: ${(error as Error).message}; pauses reclaim page cache only`);
          }
        });
      }
      dsec.hooks.paused.tapPromise(tap, (sandbox) => reclaimPaused(sandbox));
      dsec.hooks.resuming.tapPromise(tap, (sandbox) => prepareResume(sandbox));
      dsec.hooks.nodeUsage.tapPromise(tap, (node, usage) => reportUsage(node, usage));
    },
  };
}

export function specLimitBytes(sandbox: SandboxContext): number {
  return Math.round(sandbox.spec.resources.memoryMiB * MIB);
}

function recordOf(sandbox: SandboxContext): ReclaimRecord {
  return (sandbox.density?.[PLUGIN_NAME] as ReclaimRecord | undefined) ?? {};
}

/** The `paused` tap. Never throws: a failed reclaim leaves a paused sandbox with its memory, and says why. */
export async function reclaimPaused(sandbox: SandboxContext): Promise<void> {
  const { log } = sandbox.node;
  const id = sandbox.spec.id;
  if (sandbox.spec.density?.reclaimOnPause === false) return;
  const dir = sandbox.cgroups?.memory;
  if (!dir) {
    // VM backends keep no memory cgroup: their pause already saved the guest's memory to a file and ended qemu.
    log.debug(`${PLUGIN_NAME}: sandbox ${id} has no memory cgroup (backend ${sandbox.spec.backend}): nothing to reclaim`);
    return;
  }
  const started = performance.now();
  try {
    const before = await readMemcg(dir);
    let outcome: { method: ReclaimMethod; note?: string };
    try {
      outcome = await pushOut(dir, specLimitBytes(sandbox));
    } finally {
      // force_empty leaves the limit alone and the stepwise shrink restores it itself; this covers a throw anywhere.
      await setLimit(dir, specLimitBytes(sandbox)).catch((error: Error) =>
        log.warn(`${PLUGIN_NAME}: sandbox ${id}: putting its memory limit back failed: ${error.message} (the next resume retries)`),
      );
    }
    const after = await readMemcg(dir);
    const reclaim = {
      beforeMiB: toMiB(before.usageBytes),
      afterMiB: toMiB(after.usageBytes),
      swappedMiB: toMiB(Math.max(0, after.swapBytes - before.swapBytes)),
      cacheDroppedMiB: toMiB(Math.max(0, before.cacheBytes - after.cacheBytes)),
      method: outcome.method,
      durationMs: Math.round(performance.now() - started),
      at: new Date().toISOString(),
    };
    sandbox.density = { ...sandbox.density, [PLUGIN_NAME]: { ...recordOf(sandbox), reclaim } satisfies ReclaimRecord };
    log.info(
      `${PLUGIN_NAME}: sandbox ${id} paused: resident ${reclaim.beforeMiB} -> ${reclaim.afterMiB} MiB ` +
        `(${reclaim.swappedMiB} MiB to swap, ${reclaim.cacheDroppedMiB} MiB of page cache dropped) in ${reclaim.durationMs} ms` +
        (outcome.note ? `; ${outcome.note}` : ''),
    );
  } catch (error) {
    log.warn(`${PLUGIN_NAME}: sandbox ${id}: reclaiming its memory after the pause failed: ${(error as Error).message}; it stays paused, memory unchanged`);
  }
}

/**
 * The `resuming` tap: put the limit back (an agent killed mid-shrink left it
 * low, and swap-in would then fault against it) and prefetch what is in swap.
 * Never throws: at worst the sandbox faults its pages back in as it runs.
 */
export async function prepareResume(sandbox: SandboxContext): Promise<void> {
  const { log } = sandbox.node;
  const id = sandbox.spec.id;
  const dir = sandbox.cgroups?.memory;
  if (!dir) return;
  try {
    await setLimit(dir, specLimitBytes(sandbox));
    const { swapBytes } = await readMemcg(dir);
    if (swapBytes === 0) return;
    const started = performance.now();
    const result = await prefetchProcesses(await cgroupPids(dir));
    const prefetch = {
      swappedMiB: toMiB(swapBytes),
      advisedMiB: toMiB(result.advisedBytes),
      durationMs: Math.round(performance.now() - started),
      errors: result.errors.length,
      at: new Date().toISOString(),
    };
    sandbox.density = { ...sandbox.density, [PLUGIN_NAME]: { ...recordOf(sandbox), prefetch } satisfies ReclaimRecord };
    log.info(
      `${PLUGIN_NAME}: sandbox ${id} resuming: prefetch of ${prefetch.swappedMiB} MiB in swap advised over ${prefetch.advisedMiB} MiB of mappings in ${prefetch.durationMs} ms` +
        (result.errors.length > 0 ? ` (${result.errors.length} ranges refused: ${result.errors.slice(0, 3).join('; ')})` : ''),
    );
  } catch (error) {
    log.warn(`${PLUGIN_NAME}: sandbox ${id}: preparing the resume failed: ${(error as Error).message}; its pages come back as it touches them`);
  }
}

/**
 * What the pauses keep out, measured now: per paused sandbox, its resident
 * memory when it froze minus its resident memory now (never below 0). Pages
 * in zram still take RAM, compressed: `memory.swap.compressedMiB` says how much.
 */
async function reportUsage(node: NodeContext, usage: NodeUsage): Promise<void> {
  let total = 0;
  const perFleet = new Map<string, number>();
  await Promise.all(
    node.sandboxes().map(async (sandbox) => {
      const reclaim = recordOf(sandbox).reclaim;
      if (sandbox.status !== 'paused' || !reclaim || !sandbox.cgroups?.memory) return;
      const now = await readMemcg(sandbox.cgroups.memory).catch(() => undefined);
      if (!now) return;
      const kept = Math.max(0, reclaim.beforeMiB - now.usageBytes / MIB);
      total += kept;
      // The agent reports sandboxes without a dsec.io/fleet label under "-".
      const fleet = sandbox.spec.labels[LABEL_FLEET] ?? '-';
      perFleet.set(fleet, (perFleet.get(fleet) ?? 0) + kept);
    }),
  );
  usage.memory.reclaimedMiB = Math.round(total * 10) / 10;
  for (const entry of usage.fleets) {
    const kept = perFleet.get(entry.fleet);
    if (kept !== undefined) entry.reclaimedMiB = Math.round(kept * 10) / 10;
  }
  const swap = await swapStatus(node.root).catch((error: Error) => {
    node.log.debug(`${PLUGIN_NAME}: reading the swap's figures failed: ${error.message}`);
    return undefined;
  });
  if (swap) usage.memory.swap = swap;
}
