/**
 * Planning one fleet: compare its owned live sandboxes with the desired
 * attributes and decide, per sandbox, keep / update / replace / delete, and
 * how many to create. One fleet is one resource change however many
 * sandboxes it has. Linear in the fleet's sandboxes (a sort only when there
 * is surplus to choose from).
 *
 * `replicas` is the pool: fresh, unclaimed sandboxes. Claimed ones (held by
 * rollouts) come on top and are never replaced or deleted under their
 * holders unless `--replace-claimed` says so; see fleet-sandboxes.ts.
 */
import { DsecError } from '../errors.js';
import { LABEL_SPEC, type PoolInfo, type SandboxInfo, type SandboxSpec } from '../live.js';
import type { ActionReason, FleetSandboxSummary, FleetState, ResourceChange, SandboxOperation, SandboxState } from '../plan.js';
import { fleetAddress } from './addresses.js';
import { canonicalJson } from '../util/canonical-json.js';
import { displayFleet, displayLiveFleet, type FleetAttributes, forcingPaths, forcingPathsFromSandbox, inPlaceChanges, sameResources } from './fleet-attributes.js';
import { claimActive, isReadyMember, judge, needsUpdate, pickSurplus, sortFleetSandboxes, type JudgeContext, type Verdict } from './fleet-sandboxes.js';
import { declaredPool, poolDrift } from './pool.js';
import { densityOf, newSandboxId, sandboxSpecFor, ttlOf } from './spec.js';
import { sandboxStateOf } from './state-records.js';

export { claimActive } from './fleet-sandboxes.js';

export interface FleetPlanInput {
  readonly name: string;
  readonly mode: 'normal' | 'destroy';
  readonly lineage: string;
  /** Undefined when the fleet is no longer declared, or in destroy mode. */
  readonly desired: FleetAttributes | undefined;
  readonly record: FleetState | undefined;
  /** Live sandboxes with this state's lineage and this fleet's label. */
  readonly owned: readonly SandboxInfo[];
  /** `--replace fleet.<name>`: every sandbox. */
  readonly replaceAll: boolean;
  /** `--replace fleet.<name>[id]`: these sandboxes. */
  readonly replaceIds: ReadonlySet<string> | undefined;
  /** `--replace-claimed`: claimed sandboxes may be replaced and deleted (their holders lose them). */
  readonly replaceClaimed: boolean;
  /**
   * The nodes' pool records of this fleet (this lineage), and the healthy
   * nodes apply sets them on; undefined when the provider keeps no pools.
   */
  readonly pools: { readonly records: readonly PoolInfo[]; readonly nodes: readonly string[] } | undefined;
  /** Every id live or in the state, so a new id never collides; new ids are added. */
  readonly takenIds: () => Set<string>;
  readonly warn: (message: string) => void;
}

const emptySummary = (desired: number, live: number): FleetSandboxSummary => ({
  desired,
  live,
  create: 0,
  delete: 0,
  replace: 0,
  update: 0,
  unchanged: 0,
});

function bookkeeping(record: FleetState | undefined, owned: readonly SandboxInfo[]) {
  const ownedIds = new Set(owned.map((sandbox) => sandbox.id));
  const forget = record
    ? Object.keys(record.sandboxes)
        .filter((id) => !ownedIds.has(id))
        .sort()
    : [];
  const adopt: SandboxState[] = [];
  for (const sandbox of owned) {
    if (record?.sandboxes[sandbox.id]) continue;
    adopt.push(sandboxStateOf(sandbox));
  }
  return { adopt, forget };
}

export function planFleet(input: FleetPlanInput): ResourceChange | undefined {
  return input.desired ? planDeclaredFleet(input, input.desired) : planFleetDelete(input);
}

function holdersOf(sandboxes: readonly SandboxInfo[]): string {
  const holders = [...new Set(sandboxes.map((sandbox) => sandbox.claim!.holder))].sort();
  return holders.length > 5 ? `${holders.slice(0, 5).join(', ')} and ${holders.length - 5} more` : holders.join(', ');
}

function planFleetDelete(input: FleetPlanInput): ResourceChange | undefined {
  const { name, record, owned } = input;
  if (!record && owned.length === 0) return undefined;
  const claimed = owned.filter((sandbox) => claimActive(sandbox));
  if (claimed.length > 0 && !input.replaceClaimed) {
    throw new DsecError('DSEC_PLAN_CLAIMED', {
      address: fleetAddress(name),
      count: claimed.length,
      holders: holdersOf(claimed),
      action: input.mode === 'destroy' ? 'destroying the fleet' : 'deleting the fleet (it is no longer declared)',
    });
  }
  if (!record) {
    input.warn(
      `fleet.${name}: ${owned.length} live sandbox(es) carry this state's lineage but the fleet is in neither the state nor the configuration; they will be deleted`,
    );
  }
  const sorted = [...owned].sort((a, b) => a.id.localeCompare(b.id));
  const operations = sorted.map((sandbox): SandboxOperation =>
    claimActive(sandbox) ? { op: 'delete', id: sandbox.id, claimed: true, because: `claimed by ${sandbox.claim!.holder}; taken by --replace-claimed` } : { op: 'delete', id: sandbox.id },
  );
  const { members, kept } = sortFleetSandboxes(owned);
  return {
    address: fleetAddress(name),
    type: 'fleet',
    name,
    action: 'delete',
    reason: input.mode === 'destroy' ? 'delete_because_destroy_mode' : 'delete_because_no_resource_config',
    before: record ? displayFleet(record.attributes) : displayLiveFleet(owned),
    after: null,
    replacePaths: [],
    fleet: {
      summary: {
        ...emptySummary(0, owned.length),
        delete: owned.length,
        ready: members.filter(isReadyMember).length,
        claimed: owned.length - members.length - kept.length,
        kept: kept.length,
        replaceClaimed: claimed.length,
      },
      maxUnavailable: record?.attributes.update.maxUnavailable ?? 1,
      operations,
      adopt: [],
      forget: bookkeeping(record, owned).forget,
    },
  };
}

function planDeclaredFleet(input: FleetPlanInput, desired: FleetAttributes): ResourceChange {
  const { name, record, owned } = input;
  const before = record ? displayFleet(record.attributes) : owned.length > 0 ? displayLiveFleet(owned) : null;
  const after = displayFleet(desired);
  const { members, claimed, kept } = sortFleetSandboxes(owned);

  const inPlace = record ? inPlaceChanges(record.attributes, desired) : { ttl: false, density: false, labels: false };
  const context: JudgeContext = {
    desired,
    forced: (sandbox) => input.replaceAll || input.replaceIds?.has(sandbox.id) === true,
    updateAll: inPlace.ttl || inPlace.density || inPlace.labels,
  };
  const verdicts = new Map<string, Verdict>();
  for (const sandbox of members) verdicts.set(sandbox.id, judge(context, sandbox));
  const surplus = pickSurplus(members, verdicts, members.length - desired.replicas);

  let replacePaths: string[][] = forcingPaths(before, after);
  const outdatedSandbox = [...members, ...claimed].find((sandbox) => !surplus.has(sandbox.id) && sandbox.labels[LABEL_SPEC] !== desired.specHash);
  if (outdatedSandbox && replacePaths.length === 0) replacePaths = forcingPathsFromSandbox(outdatedSandbox, desired);
  const changed = replacePaths.map((path) => path.join('.')).join(', ');

  // One template per fleet: the spec hash is computed once, not per sandbox.
  const template = sandboxSpecFor(desired, desired, desired.layers, input.lineage, '');
  const spec = (): SandboxSpec => ({ ...template, id: newSandboxId(name, input.takenIds()) });

  const deletes: SandboxOperation[] = [];
  const updates: SandboxOperation[] = [];
  const replaces: SandboxOperation[] = [];
  const seen = { forced: false, outdated: false, broken: false, update: false };
  // One update for every sandbox: the whole SandboxUpdate, whatever part of it changed.
  const update = { resources: desired.resources, ttl: ttlOf(desired), density: densityOf(desired), labels: { ...(desired.labels ?? {}) } };
  /** Members the plan leaves in place, per node: what each node's pool keeps before apply makes more. */
  const keep: Record<string, number> = {};
  for (const sandbox of members) {
    if (surplus.has(sandbox.id)) {
      deletes.push({ op: 'delete', id: sandbox.id });
      continue;
    }
    const verdict = verdicts.get(sandbox.id)!;
    if (verdict === 'keep' || verdict === 'update') keep[sandbox.node] = (keep[sandbox.node] ?? 0) + 1;
    if (verdict === 'keep') continue;
    seen[verdict as keyof typeof seen] = true;
    if (verdict === 'update') {
      updates.push({ op: 'update', id: sandbox.id, ...update });
      continue;
    }
    const because =
      verdict === 'forced'
        ? 'replacement requested'
        : verdict === 'outdated'
          ? `${changed || 'spec'} changed`
          : `sandbox is ${sandbox.status}${sandbox.error ? `: ${sandbox.error}` : ''}`;
    replaces.push({ op: 'replace', id: sandbox.id, spec: spec(), because, node: sandbox.node });
  }

  // Claimed sandboxes: left to their holders, but kept in step in place; outdated ones go when released.
  let replaceWhenReleased = 0;
  let replaceClaimed = 0;
  for (const sandbox of claimed) {
    const active = claimActive(sandbox);
    const outdated = sandbox.labels[LABEL_SPEC] !== desired.specHash || context.forced(sandbox);
    const broken = sandbox.status === 'failed' || sandbox.status === 'stopped';
    if (!active && broken) {
      // Its claim lapsed on a sandbox whose node cannot recycle it (a lost node): nothing holds it now.
      deletes.push({ op: 'delete', id: sandbox.id });
    } else if (input.replaceClaimed && (outdated || broken)) {
      deletes.push({ op: 'delete', id: sandbox.id, claimed: true, because: `claimed by ${sandbox.claim!.holder}; ${outdated ? `${changed || 'spec'} changed` : `it is ${sandbox.status}`}, taken by --replace-claimed` });
      replaceClaimed += 1;
    } else if (broken) {
      input.warn(
        `fleet "${name}": sandbox ${sandbox.id} is ${sandbox.status}${sandbox.error ? ` (${sandbox.error})` : ''} but claimed by ` +
          `${sandbox.claim!.holder}: left for its job; it is replaced once the claim is released or expires`,
      );
    } else if (outdated) {
      replaceWhenReleased += 1;
      if (context.forced(sandbox)) input.warn(`--replace fleet.${name}[${sandbox.id}]: it is claimed by ${sandbox.claim!.holder}; it is replaced when released, or now with --replace-claimed`);
    } else if (needsUpdate(context, sandbox)) {
      updates.push({ op: 'update', id: sandbox.id, ...update });
      seen.update = true;
    }
  }
  if (replaceWhenReleased > 0) {
    input.warn(`fleet.${name}: ${replaceWhenReleased} claimed sandbox(es) run an earlier spec (${changed || 'spec'} changed); each is replaced when its holder releases it, or now with --replace-claimed`);
  }
  for (const sandbox of kept) {
    if (sandbox.status === 'failed' || sandbox.status === 'stopped') deletes.push({ op: 'delete', id: sandbox.id });
    else if (sandbox.labels[LABEL_SPEC] === desired.specHash && needsUpdate(context, sandbox)) updates.push({ op: 'update', id: sandbox.id, ...update });
  }

  const creates: SandboxOperation[] = [];
  for (let i = members.length; i < desired.replicas; i += 1) creates.push({ op: 'create', spec: spec() });

  // The order apply runs them in: free capacity, fill the pool, resize, then
  // roll replacements batch by batch (see apply.ts).
  const operations = [...deletes, ...creates, ...updates, ...replaces];
  const summary: FleetSandboxSummary = {
    desired: desired.replicas,
    live: owned.length,
    create: creates.length,
    delete: deletes.length,
    replace: replaces.length,
    update: updates.length,
    unchanged: owned.length - deletes.length - replaces.length - updates.length,
    ready: members.filter(isReadyMember).length,
    claimed: claimed.length,
    kept: kept.length,
    replaceWhenReleased,
    replaceClaimed,
  };

  const pool = declaredPool(desired, input.lineage);
  const drift = input.pools ? poolDrift(pool.revision, input.pools.records, input.pools.nodes) : undefined;

  const attributesChanged = !record || canonicalJson(before) !== canonicalJson(after);
  const isNew = !record && owned.length === 0;
  const action = isNew
    ? 'create'
    : replaces.length > 0
      ? 'replace'
      : operations.length > 0 || attributesChanged || drift !== undefined
        ? 'update'
        : 'no-op';

  let reason: ActionReason | null = null;
  if (action === 'replace') {
    reason = seen.forced ? 'replace_by_request' : seen.outdated ? 'replace_because_cannot_update' : 'drift';
  } else if (action === 'update') {
    // A fleet the state did not know (found live after a crash) is drift too.
    if (!record) reason = 'drift';
    else if (record.attributes.replicas !== desired.replicas) reason = 'update_replicas';
    else if (!sameResources(record.attributes.resources, desired.resources)) reason = 'update_resources';
    else if (inPlace.ttl) reason = 'update_ttl';
    else if (inPlace.density) reason = 'update_density';
    else if (inPlace.labels) reason = 'update_labels';
    else if (operations.length > 0) reason = 'drift';
    else if (drift !== undefined) reason = 'update_pool';
  }

  const { adopt, forget } = bookkeeping(record, owned);
  return {
    address: fleetAddress(name),
    type: 'fleet',
    name,
    action,
    reason,
    before,
    after,
    replacePaths: action === 'replace' && seen.outdated ? replacePaths : [],
    fleet: {
      summary,
      maxUnavailable: desired.update.maxUnavailable,
      operations,
      adopt,
      forget,
      ...(input.pools ? { pool: { keep, revision: pool.revision } } : {}),
    },
  };
}
