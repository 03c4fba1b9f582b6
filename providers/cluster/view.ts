/**
 * The cluster's live view from what the nodes answered and what etcd holds.
 *
 * A placed sandbox whose node is gone (not registered: its lease lapsed),
 * unhealthy, or healthy but without it (a create that never reached it) is
 * reported `stopped`, on that node, with the reason as its
 * error and the labels its placement recorded, so the planner sees the
 * drift and replaces it elsewhere. A sandbox a healthy node lists is taken
 * as the node says, except a `failed` or `stopped` copy on a node other
 * than where it is placed (left by a refusal): the placed one is the truth;
 * and one with no placement at all (given up with its node, which came
 * back) is reported `stopped`, so it is removed.
 */
import type { Placement } from '../../core/cluster/keys.js';
import type { LayerRecord, SandboxInfo } from '../../core/live.js';
import type { ProbedNode } from './nodes.js';

const DEFAULT_RESOURCES = { cpu: 0, memoryMiB: 0, pids: 0 };

export function sandboxesOf(probed: readonly ProbedNode[], placements: ReadonlyMap<string, Placement>): SandboxInfo[] {
  const byName = new Map(probed.map((node) => [node.info.name, node]));
  const seen = new Set<string>();
  const sandboxes: SandboxInfo[] = [];
  for (const node of probed) {
    for (const sandbox of node.sandboxes ?? []) {
      const placedOn = placements.get(sandbox.id)?.node;
      const leftover = placedOn !== undefined && placedOn !== node.info.name && (sandbox.status === 'failed' || sandbox.status === 'stopped');
      if (leftover || seen.has(sandbox.id)) continue;
      seen.add(sandbox.id);
      // Every sandbox is placed before it is created, so one without a placement was given up: its node's
      // lease lapsed, the placement was dropped and the sandbox replaced elsewhere, and the node came back
      // with it (a healed partition). Stopped, so the planner removes it rather than keep a sandbox the
      // cluster cannot route to (exec and the rest go through the placement).
      const orphan = placedOn === undefined && sandbox.status !== 'failed' && sandbox.status !== 'stopped';
      sandboxes.push(orphan ? { ...sandbox, status: 'stopped', error: `node ${node.info.name} runs it but etcd holds no placement for it (given up with its node, and replaced)` } : sandbox);
    }
  }
  for (const [id, placement] of placements) {
    if (seen.has(id)) continue;
    const node = byName.get(placement.node);
    // Placed on a healthy node that does not list it: a create that never reached the node (the CLI died
    // between the placement and the request). Reported stopped, like the others: left out, the planner would
    // create a new id beside it and nothing would ever delete its placement; stopped, it is replaced or
    // deleted, and the provider's destroy drops the placement (the node's destroy of an unknown id is a no-op).
    const why = !node
      ? `node ${placement.node} is gone (its lease lapsed)`
      : node.client
        ? `node ${placement.node} does not have it (its create never reached the node)`
        : `node ${placement.node} is unhealthy: ${node.info.healthReason ?? 'no answer'}`;
    sandboxes.push({
      id,
      node: placement.node,
      backend: placement.backend ?? 'unknown',
      status: 'stopped',
      labels: placement.labels ?? {},
      resources: placement.resources ?? DEFAULT_RESOURCES,
      layers: [],
      createdAt: placement.at,
      error: why,
      ...(placement.claim ? { claim: placement.claim } : {}),
    });
  }
  return sandboxes;
}

/**
 * The layers every healthy node holds (same name, version and digest): a
 * layer missing from one node is planned as a publish, which reaches all.
 */
export function commonLayers(perNode: readonly (readonly LayerRecord[])[]): LayerRecord[] {
  if (perNode.length === 0) return [];
  const key = (layer: LayerRecord) => `${layer.name}@${layer.version}#${layer.digest}`;
  const counts = new Map<string, number>();
  for (const layers of perNode) for (const layer of new Map(layers.map((layer) => [key(layer), layer])).keys()) counts.set(layer, (counts.get(layer) ?? 0) + 1);
  return perNode[0].filter((layer) => counts.get(key(layer)) === perNode.length);
}
