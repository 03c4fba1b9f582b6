/**
 * A fleet's pool as the engine declares it to the nodes: the template a node
 * makes a fresh sandbox from (the fleet's sandbox spec without an id), the
 * fleet-wide claim settings, and a revision naming all of it, which the
 * planner compares with what the nodes hold.
 */
import { createHash } from 'node:crypto';
import type { PoolInfo, SandboxSpec } from '../live.js';
import { canonicalJson } from '../util/canonical-json.js';
import type { FleetAttributes } from './fleet-attributes.js';
import { sandboxSpecFor } from './spec.js';

export interface DeclaredPool {
  readonly fleet: string;
  readonly lineage: string;
  readonly template: Omit<SandboxSpec, 'id'>;
  readonly maxClaimed?: number;
  readonly claimTtlSeconds?: number;
  readonly revision: string;
}

export function declaredPool(desired: FleetAttributes, lineage: string): DeclaredPool {
  const { id: _id, ...template } = sandboxSpecFor(desired, desired, desired.layers, lineage, '');
  const settings = {
    ...(desired.pool?.maxClaimed !== undefined ? { maxClaimed: desired.pool.maxClaimed } : {}),
    ...(desired.pool?.claimTtlSeconds !== undefined ? { claimTtlSeconds: desired.pool.claimTtlSeconds } : {}),
  };
  const revision = createHash('sha256').update(canonicalJson({ template, ...settings })).digest('hex');
  return { fleet: desired.name, lineage, template, ...settings, revision };
}

/**
 * Why the nodes' pool records of a fleet are not what the plan wants (or
 * undefined when they are): a healthy node (apply sets the record on every
 * one) has none, or one of another revision.
 */
export function poolDrift(revision: string, pools: readonly PoolInfo[], nodes: readonly string[]): string | undefined {
  const byNode = new Map(pools.map((pool) => [pool.node, pool]));
  for (const node of [...nodes].sort()) {
    const pool = byNode.get(node);
    if (!pool) return `node ${node} has no pool record of it`;
    if (pool.revision !== revision) return `node ${node}'s pool record is of an earlier declaration`;
  }
  return undefined;
}
