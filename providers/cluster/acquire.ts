/**
 * Acquiring on a cluster. Each node keeps its share of a fleet's warm pool
 * and is the only one that hands its sandboxes out (in its own event loop,
 * so never twice). The provider asks the nodes whose pools have ready
 * sandboxes, most first, without waiting; if none gives one, it waits on the
 * node likeliest to have one soon (most ready + creating, fewest waiting)
 * for what is left of the caller's wait.
 *
 * The nodes' pool counts are read at most once a second per provider and
 * are only hints: the node's own acquire decides.
 */
import type { AgentClient } from '../../core/agent/client.js';
import { DsecError, isDsecError } from '../../core/errors.js';
import type { AcquireRequest, NodeInfo, PoolInfo, SandboxInfo } from '../../core/live.js';
import { mapLimit, type ProbedNode } from './nodes.js';

const POOL_COUNTS_TTL_MS = 1_000;

export interface AcquireContext {
  healthyNodes(): Promise<{ readonly infos: readonly NodeInfo[]; readonly byName: ReadonlyMap<string, ProbedNode> }>;
  /** How many nodes are asked at once. */
  readonly concurrency: number;
}

interface NodePool {
  readonly client: AgentClient;
  readonly pool: PoolInfo;
}

export function createClusterAcquirer(context: AcquireContext) {
  let cached: { at: number; pools: Promise<NodePool[]> } | undefined;

  const nodePools = (): Promise<NodePool[]> => {
    if (cached && Date.now() - cached.at < POOL_COUNTS_TTL_MS) return cached.pools;
    const pools = (async () => {
      const healthy = await context.healthyNodes();
      const perNode = await mapLimit(healthy.infos, context.concurrency, async (info) => {
        const client = healthy.byName.get(info.name)?.client;
        if (!client) return [];
        // A node that does not answer now is just not a candidate: the probe reports its health.
        const pools = await client.listPools().catch(() => [] as PoolInfo[]);
        return pools.map((pool) => ({ client, pool }));
      });
      return perNode.flat();
    })();
    cached = { at: Date.now(), pools };
    pools.catch(() => (cached = undefined));
    return pools;
  };

  return async function acquireInCluster(fleet: string, request: AcquireRequest): Promise<SandboxInfo> {
    const deadline = Date.now() + (request.waitMs ?? 0);
    const candidates = (await nodePools()).filter(({ pool }) => pool.fleet === fleet && (request.lineage === undefined || pool.lineage === request.lineage));
    if (candidates.length === 0) {
      throw new DsecError('DSEC_POOL_NOT_FOUND', { fleet, node: 'any healthy node', why: 'no healthy node has a pool of it: apply the fleet first' });
    }
    const lineages = [...new Set(candidates.map(({ pool }) => pool.lineage))].sort();
    if (lineages.length > 1) {
      throw new DsecError('DSEC_POOL_AMBIGUOUS', { fleet, node: 'the cluster', count: lineages.length, lineages: lineages.join(', ') });
    }
    const lineage = lineages[0];
    const withReady = candidates.filter(({ pool }) => pool.counts.ready > 0).sort((a, b) => b.pool.counts.ready - a.pool.counts.ready);
    for (const { client } of withReady) {
      try {
        return await client.acquire(fleet, { ...request, lineage, waitMs: 0 });
      } catch (error) {
        // Taken by someone else since the counts were read: the next node.
        if (!isDsecError(error, 'DSEC_POOL_EXHAUSTED')) throw error;
      }
    }
    const best = [...candidates].sort(
      (a, b) => b.pool.counts.ready + b.pool.counts.creating - (a.pool.counts.ready + a.pool.counts.creating) || a.pool.counts.waiting - b.pool.counts.waiting,
    )[0];
    return best.client.acquire(fleet, { ...request, lineage, waitMs: Math.max(0, deadline - Date.now()) });
  };
}
