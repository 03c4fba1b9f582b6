/**
 * Routing one FnCall task in the cluster: to a healthy node that holds
 * workers of the fleet (its placements say which nodes those are), the one
 * used least recently first, so a burst of tasks spreads over the nodes'
 * pools. A node that answers it has no workers after all (they were just
 * replaced, or its pool is another project's) or that the request never
 * reached is passed over for the next; when none is left the error names the
 * fleet.
 */
import { neverDelivered, type AgentClient } from '../../core/agent/client.js';
import type { Placement } from '../../core/cluster/keys.js';
import { DsecError, isDsecError } from '../../core/errors.js';
import type { FunctionResult, FunctionTask } from '../../core/live.js';
import type { ProbedNode } from './nodes.js';

export interface InvokeContext {
  readonly healthyNodes: () => Promise<{ readonly byName: ReadonlyMap<string, ProbedNode> }>;
  readonly readPlacements: () => Promise<ReadonlyMap<string, Placement>>;
  /** When each node was last sent a task (by name); updated here. */
  readonly lastUsed: Map<string, number>;
}

/** The healthy nodes that have placements of `fleet`, least recently used first. */
export async function workerNodes(fleet: string, context: InvokeContext): Promise<{ name: string; client: AgentClient }[]> {
  const [healthy, placements] = await Promise.all([context.healthyNodes(), context.readPlacements()]);
  const names = new Set<string>();
  for (const placement of placements.values()) if (placement.fleet === fleet) names.add(placement.node);
  const nodes: { name: string; client: AgentClient }[] = [];
  for (const name of names) {
    const client = healthy.byName.get(name)?.client;
    if (client) nodes.push({ name, client });
  }
  const usedAt = (name: string) => context.lastUsed.get(name) ?? 0;
  return nodes.sort((a, b) => usedAt(a.name) - usedAt(b.name) || a.name.localeCompare(b.name));
}

export async function invokeInCluster(fleet: string, task: FunctionTask, context: InvokeContext): Promise<FunctionResult> {
  const nodes = await workerNodes(fleet, context);
  const passedOver: string[] = [];
  for (const node of nodes) {
    context.lastUsed.set(node.name, Date.now());
    try {
      return await node.client.invokeFunction(fleet, task);
    } catch (error) {
      // Only what surely did not run is tried elsewhere: a task is not idempotent.
      if (!isDsecError(error, 'DSEC_FUNCTION_NO_WORKERS') && !neverDelivered(error)) throw error;
      passedOver.push(node.name);
    }
  }
  const where = passedOver.length > 0 ? `any healthy node (asked ${passedOver.join(', ')})` : 'any healthy node of the cluster';
  throw new DsecError('DSEC_FUNCTION_NO_WORKERS', { fleet, where });
}
