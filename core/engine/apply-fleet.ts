/**
 * Applying one fleet change: state bookkeeping (adopt, forget), then the
 * sandbox operations in two phases.
 *
 *   1. deletes, creates and updates, all at once (bounded by the shared
 *      limiter): none of them takes a serving sandbox away that is not
 *      already going away;
 *   2. replacements, batch by batch of `maxUnavailable` (delete the old one,
 *      then create the new one), so at most that many are down at a time.
 *
 * Phase 2 runs only if phase 1 fully succeeded, and each batch only if the
 * one before it did: a spec that fails to start must not take down the rest
 * of the fleet. What did not run is counted as skipped.
 *
 * Around them, the fleet's pool records on the nodes (pool.ts): set before
 * the operations to the template and the sandboxes the plan keeps, and after
 * them to what there is now, so a pool refilling meanwhile (an acquire during
 * the apply) never makes what the engine makes. A sandbox a holder acquired
 * since the plan was made is never deleted or replaced under it: the node
 * refuses, the operation is skipped (its pool already made one in its place),
 * and the apply says so.
 */
import type { Dsec } from '../dsec.js';
import { DsecError, isDsecError } from '../errors.js';
import { LABEL_SPEC, type SandboxInfo, type SandboxSpec } from '../live.js';
import type { Plan, ResourceChange, SandboxOperation } from '../plan.js';
import type { Provider } from '../provider.js';
import type { StateSession } from '../state/session.js';
import type { FleetAttributes } from './fleet-attributes.js';
import type { Limiter } from './limiter.js';
import { declaredPool } from './pool.js';
import {
  dropSandboxes,
  recordSandboxes,
  removeResource,
  resizeSandbox,
  sandboxStateOf,
  setFleetAttributes,
} from './state-records.js';

export interface FleetApplyContext {
  readonly plan: Plan;
  readonly provider: Provider;
  readonly state: StateSession;
  readonly dsec: Dsec;
  readonly limit: Limiter;
  readonly counts: { done: number; failed: number; skipped: number };
  /** Told what apply did not do as planned, and why (a sandbox acquired since the plan). */
  readonly notice: (message: string) => void;
}

/** An operation the node refused because a holder has the sandbox now. */
class ClaimedSince extends Error {}

export async function applyFleetChange(change: ResourceChange, context: FleetApplyContext): Promise<void> {
  const fleet = change.fleet;
  if (!fleet) throw new Error(`fleet change ${change.address} has no fleet operations`);
  const name = change.name;
  const desired: FleetAttributes | undefined = context.plan.desired.fleets[name];
  const { state } = context;

  await state.write((current) =>
    recordSandboxes(dropSandboxes(current, name, fleet.forget ?? []), name, fleet.adopt ?? [], desired),
  );

  // A fleet going away: its pools first, so nothing refills what is being deleted.
  if (!desired) await context.provider.deletePool?.(name, context.plan.prior_state.lineage);
  const pool = desired && fleet.pool && context.provider.setPool ? declaredPool(desired, context.plan.prior_state.lineage) : undefined;
  /** Where the fleet's pool sandboxes are once the operations ran: the plan's kept ones, plus what was made and where. */
  const shares: Record<string, number> = { ...(fleet.pool?.keep ?? {}) };
  const made = (node: string) => (shares[node] = (shares[node] ?? 0) + 1);
  if (pool && fleet.operations.length > 0) await context.provider.setPool!({ ...pool, shares: { ...shares } });

  const runOne = async (operation: SandboxOperation): Promise<Error | null> => {
    let error: Error | null = null;
    try {
      const node = await execute(operation, name, desired, context);
      if (node !== undefined && (operation.op === 'create' || operation.op === 'replace')) made(node);
      context.counts.done += 1;
    } catch (thrown) {
      if (thrown instanceof ClaimedSince) {
        // Acquired since the plan: spared. A replace's pool made the replacement when it was handed out, on its node.
        if (operation.op === 'replace' && operation.node !== undefined) made(operation.node);
        context.counts.skipped += 1;
        context.notice(thrown.message);
        return null;
      }
      error = thrown instanceof Error ? thrown : new Error(String(thrown));
      context.counts.failed += 1;
    }
    try {
      context.dsec.hooks.sandboxOperation.call(name, operation, error);
    } catch (thrown) {
      context.dsec.log.warn(`a sandboxOperation tap threw: ${(thrown as Error).message}`);
    }
    return error;
  };

  const errors: Error[] = [];
  const direct = fleet.operations.filter((operation) => operation.op !== 'replace');
  const replaces = fleet.operations.filter((operation) => operation.op === 'replace');
  let skipped = 0;
  try {
    for (const error of await Promise.all(direct.map(runOne))) if (error) errors.push(error);

    const batchSize = Math.max(1, fleet.maxUnavailable);
    for (let start = 0; start < replaces.length; start += batchSize) {
      if (errors.length > 0) {
        skipped = replaces.length - start;
        break;
      }
      for (const error of await Promise.all(replaces.slice(start, start + batchSize).map(runOne))) {
        if (error) errors.push(error);
      }
    }
    context.counts.skipped += skipped;
  } finally {
    // Whatever happened: the pools keep what is there now (a failed create is the next plan's to retry).
    if (pool) await context.provider.setPool!({ ...pool, shares });
  }

  if (errors.length > 0) {
    // The attributes stay as last applied, so the next plan shows the same change for what is left.
    throw new DsecError(
      'DSEC_APPLY_FLEET',
      {
        address: change.address,
        failed: errors.length,
        total: fleet.operations.length,
        skipped: skipped > 0 ? ` (${skipped} replacement(s) not started)` : '',
        first: errors[0].message,
      },
      { cause: errors[0] },
    );
  }
  await state.write((current) =>
    desired ? setFleetAttributes(current, name, desired) : removeResource(current, change.address),
  );
}

/**
 * One operation: provider calls inside the shared limiter, state writes
 * outside it. A slot is freed as soon as the cluster answered, and the
 * operations finishing meanwhile share the next state write (group commit),
 * so a big state file does not throttle the cluster work.
 */
async function execute(
  operation: SandboxOperation,
  fleet: string,
  desired: FleetAttributes | undefined,
  { provider, state, limit }: FleetApplyContext,
): Promise<string | undefined> {
  const record = async (info: SandboxInfo, spec: SandboxSpec) => {
    await state.write((current) => recordSandboxes(current, fleet, [sandboxStateOf(info, spec.labels[LABEL_SPEC])], desired));
    return info.node;
  };
  const drop = (id: string) => state.write((current) => dropSandboxes(current, fleet, [id]));
  /** Delete unless a holder has it now (the plan found it unclaimed); `claimed` deletes take it on purpose. */
  const destroy = async (id: string, claimed: boolean) => {
    try {
      await limit(() => provider.destroySandbox(id, claimed ? {} : { unlessClaimed: true }));
    } catch (error) {
      if (!isDsecError(error, 'DSEC_SANDBOX_CLAIMED')) throw error;
      throw new ClaimedSince(`fleet.${fleet}: sandbox ${id} was acquired since the plan was made, so it is not ${operation.op === 'replace' ? 'replaced' : 'deleted'} under its holder (${error.message}); it goes when released`);
    }
  };
  switch (operation.op) {
    case 'create': {
      return record(await limit(() => provider.createSandbox(operation.spec)), operation.spec);
    }
    case 'delete': {
      await destroy(operation.id, operation.claimed === true);
      await drop(operation.id);
      return undefined;
    }
    case 'update': {
      const { resources, ttl, density, labels } = operation;
      // A plan saved before lifetimes, density and labels were updated in place carries resources alone.
      const change = { resources, ...(ttl ? { ttl } : {}), ...(density ? { density } : {}), ...(labels ? { labels } : {}) };
      const info = await limit(() => provider.updateSandbox(operation.id, change));
      await state.write((current) => resizeSandbox(current, fleet, info, desired));
      return undefined;
    }
    case 'replace': {
      await destroy(operation.id, false);
      await drop(operation.id);
      return record(await limit(() => provider.createSandbox(operation.spec)), operation.spec);
    }
  }
}
