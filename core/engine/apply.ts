/**
 * Apply: walk the plan in dependency order and make it real. Layer publishes
 * first; each fleet starts as soon as its own layers are published; layer
 * unpublishes last, after every fleet change settled. Sandbox operations
 * share one limiter (`parallelism`, Terraform's default 10). Every finished
 * operation is in the state on disk before it counts as done, so a crash or
 * a failure loses nothing and a re-run converges. A failure stops only what
 * depends on it; the result lists what succeeded and what failed.
 */
import type { Dsec } from '../dsec.js';
import { DsecError, isDsecError } from '../errors.js';
import { isPendingDigest } from '../live.js';
import type { LayerModel } from '../model.js';
import type { Plan, ResourceChange, StateFile } from '../plan.js';
import type { Provider } from '../provider.js';
import type { StateSession } from '../state/session.js';
import { layerAddress, layerRef, splitLayerRef } from './addresses.js';
import { applyFleetChange, type FleetApplyContext } from './apply-fleet.js';
import { parentRefs, resolvePendingFleet } from './build-layers.js';
import { createLimiter } from './limiter.js';
import { assertPlanFresh } from './saved-plan.js';
import { adoptLineage, dropSandboxes, recordLayer, recordSandboxes, removeResource } from './state-records.js';

export interface ApplyDeps {
  readonly provider: Provider;
  readonly state: StateSession;
  readonly dsec: Dsec;
  /** Sandbox operations and layer publishes running at once. @default 10 */
  readonly parallelism?: number;
}

export interface ApplyResult {
  readonly succeeded: ResourceChange[];
  readonly failed: { change: ResourceChange; error: Error }[];
  /** Sandbox operations: finished, failed, and never started (something before them failed, or a holder acquired the sandbox since the plan). */
  readonly sandboxes: { done: number; failed: number; skipped: number };
  /** What apply did not do as planned, and why, one line each (a sandbox spared because it was acquired since the plan). */
  readonly notes: string[];
}

const asError = (error: unknown): Error => (error instanceof Error ? error : new Error(String(error)));

export async function applyPlan(plan: Plan, deps: ApplyDeps): Promise<ApplyResult> {
  const { provider, state, dsec } = deps;
  // The caller checks a saved plan against the state it locked; checking
  // again here costs nothing and keeps a stale plan from ever running.
  assertPlanFresh(plan, state.state);
  const result: ApplyResult = { succeeded: [], failed: [], sandboxes: { done: 0, failed: 0, skipped: 0 }, notes: [] };
  const context: FleetApplyContext = {
    plan,
    provider,
    state,
    dsec,
    limit: createLimiter(deps.parallelism ?? 10),
    counts: result.sandboxes,
    notice: (message) => void result.notes.push(message),
  };

  // Before any provider call: this first write creates a never-written state
  // file with the plan's lineage, the one every new sandbox is labelled with,
  // so a crash from here on leaves sandboxes the next refresh can adopt.
  await state.write((current) => recordNoOps(plan, adoptLineage(current, plan.prior_state.lineage)));

  const run = async (change: ResourceChange, body: () => Promise<void>): Promise<boolean> => {
    let error: Error | null = null;
    try {
      await dsec.hooks.beforeChange.promise(change);
      await body();
    } catch (thrown) {
      error = asError(thrown);
    }
    if (error) result.failed.push({ change, error });
    else result.succeeded.push(change);
    try {
      await dsec.hooks.afterChange.promise(change, error);
    } catch (thrown) {
      dsec.log.warn(`an afterChange tap failed for ${change.address}: ${asError(thrown).message}`);
    }
    return error === null;
  };
  const refuse = async (change: ResourceChange, dependency: string): Promise<boolean> => {
    const error = new DsecError('DSEC_APPLY_DEPENDENCY', { address: change.address, dependency });
    result.failed.push({ change, error });
    result.sandboxes.skipped += change.fleet?.operations.length ?? 0;
    await dsec.hooks.afterChange.promise(change, error).catch(() => undefined);
    return false;
  };

  const changes = plan.resource_changes.filter((change) => change.action !== 'no-op');
  const layerCreates = new Map(
    changes.filter((change) => change.type === 'layer' && change.action === 'create').map((change) => [change.address, change]),
  );
  /** The real digest of each layer this apply published (`name@version` -> digest), for what was planned pending. */
  const published = new Map<string, string>();
  const publishes = new Map<string, Promise<boolean>>();
  // A build runs on its parents, so it starts once the parents this apply publishes are there.
  const publish = (change: ResourceChange): Promise<boolean> => {
    let started = publishes.get(change.address);
    if (started) return started;
    started = (async () => {
      const desired = plan.desired.layers[change.name];
      for (const parent of desired ? parentRefs(desired) : []) {
        const parentChange = layerCreates.get(layerAddress(parent));
        if (parentChange && !(await publish(parentChange))) return refuse(change, parentChange.address);
      }
      return run(change, async () => {
        published.set(change.name, await publishLayer(change, context));
      });
    })();
    publishes.set(change.address, started);
    return started;
  };
  for (const change of layerCreates.values()) void publish(change);

  const fleets = changes
    .filter((change) => change.type === 'fleet')
    .map(async (change) => {
      const needs = (plan.desired.fleets[change.name]?.layers ?? [])
        .map((layer) => layerAddress(layerRef(layer.name, layer.version)))
        .filter((address) => publishes.has(address));
      for (const address of needs) if (!(await publishes.get(address))) return refuse(change, address);
      return run(change, () => {
        // Sandboxes planned on a layer built just now get its real digest.
        const resolved = resolvePendingFleet(change, plan.desired.fleets[change.name], published);
        if (resolved.change === change) return applyFleetChange(change, context);
        const fleets = { ...plan.desired.fleets, ...(resolved.desired ? { [change.name]: resolved.desired } : {}) };
        return applyFleetChange(resolved.change, { ...context, plan: { ...plan, desired: { ...plan.desired, fleets } } });
      });
    });
  await Promise.all([...publishes.values(), ...fleets]);

  // Unpublish only once no fleet change is still running: the sandboxes on a layer go first.
  await Promise.all(
    changes
      .filter((change) => change.type === 'layer' && change.action === 'delete')
      .map((change) => run(change, () => unpublishLayer(change, context))),
  );

  try {
    await dsec.hooks.applied.promise(
      plan,
      result.failed.map(({ change }) => change),
    );
  } catch (thrown) {
    dsec.log.warn(`an applied tap failed: ${asError(thrown).message}`);
  }
  return result;
}

/**
 * Changes with nothing to do on the cluster may still teach the state
 * something: a declared layer found published (a crash after publish), a
 * sandbox found live with our lineage, a recorded sandbox that is gone.
 */
function recordNoOps(plan: Plan, state: StateFile): StateFile {
  let next = state;
  for (const change of plan.resource_changes) {
    if (change.action !== 'no-op') continue;
    if (change.type === 'layer' && !(change.address in next.resources)) {
      const layer = plan.desired.layers[change.name];
      // A `published` layer is not dsec's: recording it would make removing it from the config unpublish it.
      if (layer && layer.source.type !== 'published')
        next = recordLayer(next, {
          type: 'layer',
          name: layer.name,
          version: layer.version,
          kind: layer.kind,
          digest: layer.digest,
        });
    }
    if (change.type === 'fleet' && change.fleet) {
      next = dropSandboxes(next, change.name, change.fleet.forget ?? []);
      next = recordSandboxes(next, change.name, change.fleet.adopt ?? [], plan.desired.fleets[change.name]);
    }
  }
  return next;
}

/** Publish a planned layer; resolves to its digest (the real one, for a layer planned with a pending digest). */
async function publishLayer(change: ResourceChange, context: FleetApplyContext): Promise<string> {
  const desired = context.plan.desired.layers[change.name];
  if (!desired) throw new Error(`the plan has no desired layer ${change.name}`);
  const { digest: planned, ...model } = desired;
  const record = await context.limit(() => context.provider.publishLayer(model as LayerModel));
  // It is published either way: record what is really there before judging it.
  await context.state.write((state) =>
    recordLayer(state, {
      type: 'layer',
      name: record.name,
      version: record.version,
      kind: record.kind,
      digest: record.digest,
    }),
  );
  // A pending digest is a promise of "whatever the build gives": only a known one can have changed.
  if (!isPendingDigest(planned) && record.digest !== planned) {
    throw new DsecError('DSEC_LAYER_CHANGED', { ref: change.name, planned, digest: record.digest });
  }
  return record.digest;
}

async function unpublishLayer(change: ResourceChange, context: FleetApplyContext): Promise<void> {
  const { name, version } = splitLayerRef(change.name);
  try {
    await context.limit(() => context.provider.unpublishLayer(name, version ?? ''));
  } catch (error) {
    // Already gone is what we wanted.
    if (!isDsecError(error, 'DSEC_LAYER_NOT_FOUND')) throw error;
  }
  await context.state.write((state) => removeResource(state, change.address));
}
