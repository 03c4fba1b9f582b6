/**
 * Planning one fleet: compare its owned live sandboxes with the desired
 * attributes and decide, per sandbox, keep / update / replace / delete, and
 * how many to create. One fleet is one resource change however many
 * sandboxes it has. Linear in the fleet's sandboxes (a sort only when there
 * is surplus to choose from).
 */
import { LABEL_SPEC, userLabels, type SandboxInfo, type SandboxSpec } from '../live.js';
import type {
  ActionReason,
  FleetSandboxSummary,
  FleetState,
  ResourceChange,
  SandboxOperation,
  SandboxState,
} from '../plan.js';
import { fleetAddress } from './addresses.js';
import { canonicalJson } from '../util/canonical-json.js';
import {
  displayFleet,
  displayLiveFleet,
  type FleetAttributes,
  forcingPaths,
  forcingPathsFromSandbox,
  inPlaceChanges,
  sameResources,
} from './fleet-attributes.js';
import { densityOf, newSandboxId, sandboxSpecFor, ttlOf } from './spec.js';
import { sandboxStateOf } from './state-records.js';

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
  /** Every id live or in the state, so a new id never collides; new ids are added. */
  readonly takenIds: () => Set<string>;
  readonly warn: (message: string) => void;
}

/** Why a sandbox must go or change, most telling first. */
/** `claimed`: broken (stopped, failed, or on a lost node) but a job's claim on it is active: left for the job. */
type Verdict = 'forced' | 'outdated' | 'broken' | 'claimed' | 'update' | 'keep';
/** Which sandboxes to drop first when there are more than `replicas`. */
const SURPLUS_RANK: Readonly<Record<Verdict, number>> = { broken: 0, outdated: 1, forced: 2, update: 3, keep: 4, claimed: 5 };

/** A claim is active until it expires (one without expiresAt until released). */
export function claimActive(sandbox: SandboxInfo, nowMs: number = Date.now()): boolean {
  if (!sandbox.claim) return false;
  return sandbox.claim.expiresAt === undefined || Date.parse(sandbox.claim.expiresAt) > nowMs;
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

function planFleetDelete(input: FleetPlanInput): ResourceChange | undefined {
  const { name, record, owned } = input;
  if (!record && owned.length === 0) return undefined;
  if (!record) {
    input.warn(
      `fleet.${name}: ${owned.length} live sandbox(es) carry this state's lineage but the fleet is in neither the state nor the configuration; they will be deleted`,
    );
  }
  const ids = owned.map((sandbox) => sandbox.id).sort();
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
      summary: { ...emptySummary(0, owned.length), delete: owned.length },
      maxUnavailable: record?.attributes.update.maxUnavailable ?? 1,
      operations: ids.map((id): SandboxOperation => ({ op: 'delete', id })),
      adopt: [],
      forget: bookkeeping(record, owned).forget,
    },
  };
}

/**
 * `updateAll`: the fleet's lifetimes or in-place density switch changed
 * since the last apply, which a sandbox cannot always tell about itself.
 */
function judge(input: FleetPlanInput, desired: FleetAttributes, sandbox: SandboxInfo, updateAll: boolean): Verdict {
  if (input.replaceAll || input.replaceIds?.has(sandbox.id)) return 'forced';
  if (sandbox.labels[LABEL_SPEC] !== desired.specHash) return 'outdated';
  if (sandbox.status === 'failed' || sandbox.status === 'stopped') {
    // A claimed sandbox holds state its job depends on: never replaced under the job (a new one would
    // carry nothing of it); the job releases it, or its claim runs out, and then it is replaced.
    return claimActive(sandbox) ? 'claimed' : 'broken';
  }
  if (updateAll || !sameResources(sandbox.resources, desired.resources)) return 'update';
  // A sandbox that reports its lifetimes and reports others than declared drifted.
  if (sandbox.ttl && canonicalJson(ttlOf(sandbox)) !== canonicalJson(ttlOf(desired))) return 'update';
  // Labels are read back from the sandbox itself: a label set or removed on it (or never applied) is drift.
  if (canonicalJson(userLabels(sandbox.labels)) !== canonicalJson(desired.labels ?? {})) return 'update';
  return 'keep';
}

/** Newest first among equals: dropping the youngest keeps the warmest sandboxes. */
function pickSurplus(owned: readonly SandboxInfo[], verdicts: Map<string, Verdict>, count: number): Set<string> {
  if (count <= 0) return new Set();
  const ranked = [...owned].sort(
    (a, b) =>
      SURPLUS_RANK[verdicts.get(a.id)!] - SURPLUS_RANK[verdicts.get(b.id)!] ||
      b.createdAt.localeCompare(a.createdAt) ||
      a.id.localeCompare(b.id),
  );
  return new Set(ranked.slice(0, count).map((sandbox) => sandbox.id));
}

function planDeclaredFleet(input: FleetPlanInput, desired: FleetAttributes): ResourceChange {
  const { name, record, owned } = input;
  const before = record ? displayFleet(record.attributes) : owned.length > 0 ? displayLiveFleet(owned) : null;
  const after = displayFleet(desired);

  const inPlace = record ? inPlaceChanges(record.attributes, desired) : { ttl: false, density: false, labels: false };
  const verdicts = new Map<string, Verdict>();
  for (const sandbox of owned) verdicts.set(sandbox.id, judge(input, desired, sandbox, inPlace.ttl || inPlace.density || inPlace.labels));
  const surplus = pickSurplus(owned, verdicts, owned.length - desired.replicas);

  let replacePaths: string[][] = forcingPaths(before, after);
  const outdatedSandbox = owned.find((sandbox) => !surplus.has(sandbox.id) && verdicts.get(sandbox.id) === 'outdated');
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
  for (const sandbox of owned) {
    if (surplus.has(sandbox.id)) {
      deletes.push({ op: 'delete', id: sandbox.id });
      continue;
    }
    const verdict = verdicts.get(sandbox.id)!;
    if (verdict === 'keep') continue;
    if (verdict === 'claimed') {
      input.warn(
        `fleet "${name}": sandbox ${sandbox.id} is ${sandbox.status}${sandbox.error ? ` (${sandbox.error})` : ''} but claimed by ` +
          `${sandbox.claim!.holder}: left for its job; it is replaced once the claim is released or expires`,
      );
      continue;
    }
    seen[verdict] = true;
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
    replaces.push({ op: 'replace', id: sandbox.id, spec: spec(), because });
  }
  const creates: SandboxOperation[] = [];
  for (let i = owned.length; i < desired.replicas; i += 1) creates.push({ op: 'create', spec: spec() });

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
  };

  const attributesChanged = !record || canonicalJson(before) !== canonicalJson(after);
  const isNew = !record && owned.length === 0;
  const action = isNew
    ? 'create'
    : replaces.length > 0
      ? 'replace'
      : operations.length > 0 || attributesChanged
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
    fleet: { summary, maxUnavailable: desired.update.maxUnavailable, operations, adopt, forget },
  };
}
