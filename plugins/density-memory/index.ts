/**
 * density-memory: kernel same-page merging (KSM) for the fleets that ask for it.
 *
 *   prepare       spec.density.memorySharing => sandbox.traits.memoryMerge: the backend
 *                 starts every process of the sandbox under prctl(PR_SET_MEMORY_MERGE)
 *   started       retune KSM to the node's count of mergeable sandboxes (ksm.ts)
 *   destroy       the same, without the one going away
 *   agentStarted  the same, for the sandboxes the agent re-adopted
 *   nodeUsage     memory.ksm, memory.sharedMiB (node-wide), fleets[].sharedMiB
 *
 * It imports only the public plugin API, like any third-party plugin.
 */
import { existsSync } from 'node:fs';
import {
  LABEL_FLEET,
  STAGE,
  type Dsec,
  type DsecPlugin,
  type NodeContext,
  type NodeUsage,
  type SandboxContext,
} from '../../core/plugin-api.js';
import { KSM_SYSFS, readKsm, retuneKsm, type RetuneOutcome } from './ksm.js';
import { cgroupPids, mergingPages, pageSize, toMiB } from './merging.js';
import { parseMemoryOptions, PLUGIN_NAME, type DensityMemoryOptions, type ResolvedMemoryOptions } from './options.js';

export { PLUGIN_NAME, scanRate, PAGES_PER_SANDBOX, type DensityMemoryOptions } from './options.js';
export { readKsm, retuneKsm, readHold, KSM_SYSFS, type KsmKnobs, type KsmState, type KsmHold } from './ksm.js';
export { cgroupPids, mergingPages, parseKsmStat } from './merging.js';

/**
 * Sandboxes whose processes KSM may merge: running or paused (a paused one's
 * pages stay merged), trait set, and not `leaving` (being destroyed: the
 * agent keeps a sandbox in its list, still `running`, until every destroy
 * tap returned, and destroys run in parallel).
 */
export function mergeableSandboxes(node: NodeContext, leaving: { has(sandbox: SandboxContext): boolean } = new Set()): SandboxContext[] {
  return node
    .sandboxes()
    .filter((sandbox) => !leaving.has(sandbox) && (sandbox.status === 'running' || sandbox.status === 'paused') && sandbox.traits?.memoryMerge === true);
}

export default function densityMemory(options?: DensityMemoryOptions): DsecPlugin {
  const resolved = parseMemoryOptions(options);
  return {
    name: PLUGIN_NAME,
    apply(dsec: Dsec) {
      if (!resolved.enabled) return;
      const tuner = new KsmTuner(resolved);
      const tap = { name: PLUGIN_NAME, stage: STAGE.DENSITY };
      dsec.hooks.prepare.tapPromise(tap, async (sandbox) => {
        if (sandbox.spec.density?.memorySharing === true) sandbox.traits = { ...sandbox.traits, memoryMerge: true };
      });
      dsec.hooks.started.tapPromise(tap, async (sandbox) => {
        if (sandbox.traits?.memoryMerge === true) await tuner.retune(sandbox.node);
      });
      dsec.hooks.destroy.tapPromise(tap, async (sandbox) => {
        if (sandbox.traits?.memoryMerge !== true) return;
        tuner.leaving.add(sandbox);
        await tuner.retune(sandbox.node);
      });
      dsec.hooks.agentStarted.tapPromise(tap, async (node) => {
        await tuner.retune(node);
      });
      dsec.hooks.nodeUsage.tapPromise(tap, (node, usage) => reportUsage(node, usage));
    },
  };
}

/**
 * Retunes one at a time (sandboxes start in parallel, and each retune reads
 * then writes the same sysfs knobs and hold file). A failure is logged, never
 * thrown: KSM is an optimisation, and a started or destroyed sandbox must not
 * fail over it.
 */
class KsmTuner {
  private queue: Promise<unknown> = Promise.resolve();
  private warnedMissing = false;

  constructor(private readonly options: ResolvedMemoryOptions) {}

  /** Sandboxes in their destroy: never counted again (a re-created one is a new context). */
  readonly leaving = new WeakSet<SandboxContext>();

  retune(node: NodeContext): Promise<RetuneOutcome | undefined> {
    const run = async (): Promise<RetuneOutcome | undefined> => {
      if (!existsSync(KSM_SYSFS)) {
        if (!this.warnedMissing) node.log.warn(`${PLUGIN_NAME}: this kernel has no KSM (${KSM_SYSFS} is missing): sandboxes asking for memory sharing run unmerged`);
        this.warnedMissing = true;
        return undefined;
      }
      try {
        return await retuneKsm(node.root, mergeableSandboxes(node, this.leaving).length, this.options, node.log);
      } catch (error) {
        node.log.warn(`${PLUGIN_NAME}: tuning KSM failed: ${(error as Error).message}`);
        return undefined;
      }
    };
    const next = this.queue.then(run, run);
    this.queue = next;
    return next;
  }
}

/** The fleet a sandbox counts under in the usage report: its dsec.io/fleet label, or "-" as the agent names the unlabelled. */
function fleetOf(sandbox: SandboxContext): string {
  return sandbox.spec.labels[LABEL_FLEET] ?? '-';
}

async function reportUsage(node: NodeContext, usage: NodeUsage): Promise<void> {
  if (!existsSync(KSM_SYSFS)) return;
  const mergeable = mergeableSandboxes(node);
  const [ksm, page] = await Promise.all([readKsm(), pageSize()]);
  usage.memory.ksm = { running: ksm.run === 1, pagesToScan: ksm.pagesToScan, sleepMillisecs: ksm.sleepMillisecs, mergeableSandboxes: mergeable.length };
  // pages_sharing, not pages_shared: each KSM page (pages_shared) replaces
  // 1 + its sharers copies, so the pages saved are the sharers (docs/plugins/density-memory.md).
  usage.memory.sharedMiB = toMiB(ksm.pagesSharing * page);
  const perFleet = new Map<string, number>();
  await Promise.all(
    mergeable.map(async (sandbox) => {
      if (!sandbox.cgroups?.memory) return;
      const fleet = fleetOf(sandbox);
      const pages = await mergingPages(await cgroupPids(sandbox.cgroups.memory));
      perFleet.set(fleet, (perFleet.get(fleet) ?? 0) + pages);
    }),
  );
  for (const entry of usage.fleets) {
    const pages = perFleet.get(entry.fleet);
    if (pages !== undefined) entry.sharedMiB = toMiB(pages * page);
  }
}
