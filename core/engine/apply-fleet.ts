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
 */
import type { Dsec } from '../dsec.js';
import { DsecError } from '../errors.js';
import { LABEL_SPEC, type SandboxInfo, type SandboxSpec } from '../live.js';
import type { Plan, ResourceChange, SandboxOperation } from '../plan.js';
import type { Provider } from '../provider.js';
import type { StateSession } from '../state/session.js';
import type { FleetAttributes } from './fleet-attributes.js';
import type { Limiter } from './limiter.js';
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
}

export async function applyFleetChange(change: ResourceChange, context: FleetApplyContext): Promise<void> {
  const fleet = change.fleet;
  if (!fleet) throw new Error(`fleet change ${change.address} has no fleet operations`);
  const name = change.name;
  const desired: FleetAttributes | undefined = context.plan.desired.fleets[name];
  const { state } = context;

  await state.write((current) =>
    recordSandboxes(dropSandboxes(current, name, fleet.forget ?? []), name, fleet.adopt ?? [], desired),
  );

  const runOne = async (operation: SandboxOperation): Promise<Error | null> => {
    let error: Error | null = null;
    try {
      await execute(operation, name, desired, context);
      context.counts.done += 1;
    } catch (thrown) {
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
  for (const error of await Promise.all(direct.map(runOne))) if (error) errors.push(error);

  const batchSize = Math.max(1, fleet.maxUnavailable);
  let skipped = 0;
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
): Promise<void> {
  const record = (info: SandboxInfo, spec: SandboxSpec) =>
    state.write((current) => recordSandboxes(current, fleet, [sandboxStateOf(info, spec.labels[LABEL_SPEC])], desired));
  const drop = (id: string) => state.write((current) => dropSandboxes(current, fleet, [id]));
  switch (operation.op) {
    case 'create': {
      await record(await limit(() => provider.createSandbox(operation.spec)), operation.spec);
      return;
    }
    case 'delete': {
      await limit(() => provider.destroySandbox(operation.id));
      await drop(operation.id);
      return;
    }
    case 'update': {
      const { resources, ttl, density, labels } = operation;
      // A plan saved before lifetimes, density and labels were updated in place carries resources alone.
      const change = { resources, ...(ttl ? { ttl } : {}), ...(density ? { density } : {}), ...(labels ? { labels } : {}) };
      const info = await limit(() => provider.updateSandbox(operation.id, change));
      await state.write((current) => resizeSandbox(current, fleet, info, desired));
      return;
    }
    case 'replace': {
      await limit(() => provider.destroySandbox(operation.id));
      await drop(operation.id);
      await record(await limit(() => provider.createSandbox(operation.spec)), operation.spec);
      return;
    }
  }
}
