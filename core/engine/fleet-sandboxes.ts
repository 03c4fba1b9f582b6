/**
 * Sorting a fleet's live sandboxes for the planner. A fleet's sandboxes are
 * of three kinds, and each kind is planned by its own rule:
 *
 *   members  fresh and unclaimed: the pool. `replicas` counts these; they are
 *            created, updated, replaced and deleted to match the declaration.
 *   claimed  held by a rollout (acquired or claimed): never counted, never
 *            replaced or deleted under it unless the user says so
 *            (`--replace-claimed`); outdated ones go when released.
 *   kept     released with `keep`: used, never handed out again; left alone
 *            but for in-place updates, deleted with the fleet.
 *
 * Each sandbox gets a verdict; members beyond `replicas` are dropped, worst
 * first.
 */
import { LABEL_SPEC, userLabels, type SandboxInfo } from '../live.js';
import { canonicalJson } from '../util/canonical-json.js';
import { type FleetAttributes, sameResources } from './fleet-attributes.js';
import { ttlOf } from './spec.js';

/**
 * Why a sandbox must go or change, most telling first. `claimed`: held by a
 * rollout and left to it (broken, outdated or forced, but its holder's).
 */
export type Verdict = 'forced' | 'outdated' | 'broken' | 'claimed' | 'update' | 'keep';

/** Which members to drop first when there are more than `replicas`. */
const SURPLUS_RANK: Readonly<Record<Verdict, number>> = { broken: 0, outdated: 1, forced: 2, update: 3, keep: 4, claimed: 5 };

/** A claim is active until it expires (one without expiresAt until released). */
export function claimActive(sandbox: SandboxInfo, nowMs: number = Date.now()): boolean {
  if (!sandbox.claim) return false;
  return sandbox.claim.expiresAt === undefined || Date.parse(sandbox.claim.expiresAt) > nowMs;
}

export interface FleetSandboxes {
  readonly members: readonly SandboxInfo[];
  /** Claimed now, or with a claim that expired (its node's reaper recycles it). */
  readonly claimed: readonly SandboxInfo[];
  readonly kept: readonly SandboxInfo[];
}

export function sortFleetSandboxes(owned: readonly SandboxInfo[]): FleetSandboxes {
  const members: SandboxInfo[] = [];
  const claimed: SandboxInfo[] = [];
  const kept: SandboxInfo[] = [];
  for (const sandbox of owned) {
    if (sandbox.claim) claimed.push(sandbox);
    else if (sandbox.kept) kept.push(sandbox);
    else members.push(sandbox);
  }
  return { members, claimed, kept };
}

export interface JudgeContext {
  readonly desired: FleetAttributes;
  /** `--replace fleet.<name>` or `--replace fleet.<name>[id]` names it. */
  readonly forced: (sandbox: SandboxInfo) => boolean;
  /** The fleet's lifetimes, in-place density switch or labels changed since the last apply, which a sandbox cannot always tell about itself. */
  readonly updateAll: boolean;
}

export function judge(context: JudgeContext, sandbox: SandboxInfo): Verdict {
  const { desired } = context;
  if (context.forced(sandbox)) return 'forced';
  if (sandbox.labels[LABEL_SPEC] !== desired.specHash) return 'outdated';
  if (sandbox.status === 'failed' || sandbox.status === 'stopped') {
    // A claimed sandbox holds state its job depends on: never replaced under the job (a new one would
    // carry nothing of it); the job releases it, or its claim runs out, and then it goes.
    return claimActive(sandbox) ? 'claimed' : 'broken';
  }
  return needsUpdate(context, sandbox) ? 'update' : 'keep';
}

/** Resources, lifetimes or labels differ from the declaration: an in-place update. */
export function needsUpdate(context: JudgeContext, sandbox: SandboxInfo): boolean {
  const { desired } = context;
  if (context.updateAll || !sameResources(sandbox.resources, desired.resources)) return true;
  // A sandbox that reports its lifetimes and reports others than declared drifted.
  if (sandbox.ttl && canonicalJson(ttlOf(sandbox)) !== canonicalJson(ttlOf(desired))) return true;
  // Labels are read back from the sandbox itself: a label set or removed on it (or never applied) is drift.
  return canonicalJson(userLabels(sandbox.labels)) !== canonicalJson(desired.labels ?? {});
}

/** The members to drop, worst first; newest first among equals: dropping the youngest keeps the warmest. */
export function pickSurplus(members: readonly SandboxInfo[], verdicts: ReadonlyMap<string, Verdict>, count: number): Set<string> {
  if (count <= 0) return new Set();
  const ranked = [...members].sort(
    (a, b) =>
      SURPLUS_RANK[verdicts.get(a.id)!] - SURPLUS_RANK[verdicts.get(b.id)!] ||
      b.createdAt.localeCompare(a.createdAt) ||
      a.id.localeCompare(b.id),
  );
  return new Set(ranked.slice(0, count).map((sandbox) => sandbox.id));
}

/** Is a sandbox fresh and up (what an acquire can have now)? */
export function isReadyMember(sandbox: SandboxInfo): boolean {
  return sandbox.status === 'running' || sandbox.status === 'paused';
}
