/**
 * Warm pools and claims, as the agent's API, the providers and the SDK carry
 * them. A fleet's pool lives on the nodes that hold its sandboxes: each
 * node's agent keeps `ready` fresh, unclaimed sandboxes of it, hands one out
 * per `acquire` (never to two holders) and makes a new one in its place from
 * the pool's template. The engine sets each node's pool record at apply.
 */
import { createHash } from 'node:crypto';
import type { KeptMark, LayerRecord, NodeInfo, SandboxInfo, SandboxSpec } from './live-sandboxes.js';

import { canonicalJson } from './util/canonical-json.js';

/** What `PUT /v1/pools/:fleet` takes: one fleet's pool on one node. */
export interface PoolSpec {
  readonly fleet: string;
  /** The state lineage whose fleet this is (a cluster agent serves many projects). */
  readonly lineage: string;
  /** What a refill creates: the fleet's sandbox spec without an id (its labels carry lineage, fleet and spec hash). */
  readonly template: Omit<SandboxSpec, 'id'>;
  /** How many fresh, unclaimed sandboxes this node keeps warm (the fleet's `replicas`, or this node's share of them). */
  readonly ready: number;
  /** At most this many claimed at once on this node; acquires past it wait. @default no bound */
  readonly maxClaimed?: number;
  /** A claim made without a ttl lapses after this long. @default no lapse */
  readonly claimTtlSeconds?: number;
  /**
   * The engine's name for what it declared (a digest of the template and the
   * fleet-wide pool settings): the planner compares it with what it wants now.
   */
  readonly revision: string;
}

/** A pool on a node, with what it holds now (`GET /v1/pools`). */
export interface PoolInfo extends PoolSpec {
  readonly node: string;
  /** sha256 of the canonical template: what the planner compares with the spec it wants. */
  readonly digest: string;
  readonly counts: PoolCounts;
  /** The last refill that failed, with when (cleared by a refill that works). */
  readonly lastError?: { readonly at: string; readonly message: string };
}

export interface PoolCounts {
  /** Running (or paused), fresh, unclaimed: what an acquire can have now. */
  readonly ready: number;
  /** Being created for the pool, not yet handed out. */
  readonly creating: number;
  readonly claimed: number;
  /** Released with `keep`: unclaimed but used, never handed out again. */
  readonly kept: number;
  /** Acquires waiting for a sandbox. */
  readonly waiting: number;
}

/** `acquire(fleet, ...)`: take a ready sandbox of the fleet's pool. */
export interface AcquireRequest {
  readonly holder: string;
  /** The claim lapses after this long unless renewed (then the sandbox is recycled). @default the pool's claimTtl */
  readonly ttlSeconds?: number;
  /** Labels for this claim (e.g. `job: rollout-17`): label selectors (`pause --label`) match them. */
  readonly labels?: Readonly<Record<string, string>>;
  /** Wait this long for a sandbox when none is ready (or the pool is at maxClaimed). @default 0: fail at once */
  readonly waitMs?: number;
  /** Which project's fleet, when several projects have a fleet of this name on the node. */
  readonly lineage?: string;
}

/** `release(id, ...)`. */
export interface ReleaseRequest {
  /** Keep the sandbox (for inspection or a multi-turn task): unclaim it instead of recycling it. @default false */
  readonly keep?: boolean;
  /** Only if this holder has it (DSEC_SANDBOX_CLAIMED otherwise). */
  readonly holder?: string;
}

export interface ReleaseResult {
  readonly id: string;
  /** Destroyed: its pool made a fresh one in its place when it was acquired. */
  readonly recycled: boolean;
  /** The sandbox as it is now, when it was kept (or has no pool to recycle into). */
  readonly sandbox?: SandboxInfo;
}

/** `renew(id, ...)`: the holder extends its claim. */
export interface RenewRequest {
  readonly holder: string;
  readonly ttlSeconds: number;
}


/** What tells two pool templates apart: sha256 (hex) of the template's canonical JSON. */
export function poolTemplateDigest(template: Omit<SandboxSpec, 'id'>): string {
  return createHash('sha256').update(canonicalJson(template)).digest('hex');
}

/** What refresh reads from the provider: every layer, node and sandbox it can see, and the nodes' pool records. */
export interface LiveView {
  readonly nodes: readonly NodeInfo[];
  readonly layers: readonly LayerRecord[];
  readonly sandboxes: readonly SandboxInfo[];
  /** Each node's pool records (absent from a provider that keeps none: the planner then sets none). */
  readonly pools?: readonly PoolInfo[];
}
