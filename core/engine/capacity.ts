/**
 * Will the plan's new sandboxes fit? A node running an admission plugin
 * advertises what it admits in total under its overcommit policy
 * (`allocatable`) and what its sandboxes request now (`requested`). The plan
 * frees what it deletes and replaces, and asks for what it creates and
 * replaces; a fleet whose new sandboxes ask for more than is left gets a
 * warning saying by how much, before apply meets the admission refusals.
 *
 * Conservative on purpose: every removal counts as done before any create
 * (the rolling batches of maxUnavailable are ignored), resizes in place are
 * not counted, and the nodes are one pool (placement is the cluster
 * provider's business). Fleets are taken in plan order, each using up what
 * the ones before it asked for. Nodes without a policy admit anything, so a
 * view with one of them warns about nothing.
 */
import type { LiveView, NodeInfo, OvercommitPolicy, SandboxInfo, SandboxStatus } from '../live.js';
import type { Resources } from '../model.js';
import type { ResourceChange } from '../plan.js';

/** The statuses a node's `requested` counts: a sandbox in another frees nothing when it goes. */
const COUNTED: ReadonlySet<SandboxStatus> = new Set(['creating', 'running', 'paused']);

interface Amount {
  cpu: number;
  memoryMiB: number;
}

/** One fleet short of one resource. */
export interface CapacityShortfall {
  readonly fleet: string;
  readonly resource: 'cpu' | 'memory';
  /** New sandboxes the plan creates for the fleet (creates + replaces). */
  readonly sandboxes: number;
  /** What they request in total (cores, or MiB). */
  readonly requested: number;
  /** What the nodes have left for them under their policies (never below 0). */
  readonly left: number;
  readonly short: number;
  /** How many of the new sandboxes that is, at the fleet's request per sandbox. */
  readonly shortSandboxes: number;
}

/** The shortfalls of every fleet change, in plan order; empty when a node has no policy. */
export function capacityShortfalls(changes: readonly ResourceChange[], live: LiveView): CapacityShortfall[] {
  // An unhealthy node (cluster provider) receives no new sandboxes: its room does not count.
  const nodes = live.nodes.filter((node) => node.health !== 'unhealthy');
  if (nodes.length === 0 || nodes.some((node) => !node.allocatable || !node.requested)) return [];
  const free: Amount = { cpu: 0, memoryMiB: 0 };
  for (const node of nodes) {
    free.cpu += node.allocatable!.cpu - node.requested!.cpu;
    free.memoryMiB += node.allocatable!.memoryMiB - node.requested!.memoryMiB;
  }

  const names = new Set(nodes.map((node) => node.name));
  const liveById = new Map<string, SandboxInfo>(live.sandboxes.map((sandbox) => [sandbox.id, sandbox]));
  for (const change of changes) {
    for (const operation of change.fleet?.operations ?? []) {
      if (operation.op !== 'delete' && operation.op !== 'replace') continue;
      const sandbox = liveById.get(operation.id);
      if (!sandbox || !COUNTED.has(sandbox.status) || !names.has(sandbox.node)) continue;
      free.cpu += sandbox.resources.cpu;
      free.memoryMiB += sandbox.resources.memoryMiB;
    }
  }

  const shortfalls: CapacityShortfall[] = [];
  for (const change of changes) {
    const asked: Resources[] = [];
    for (const operation of change.fleet?.operations ?? []) {
      if (operation.op === 'create' || operation.op === 'replace') asked.push(operation.spec.resources);
    }
    if (asked.length === 0) continue;
    const demand: Amount = { cpu: 0, memoryMiB: 0 };
    for (const resources of asked) {
      demand.cpu += resources.cpu;
      demand.memoryMiB += resources.memoryMiB;
    }
    for (const [resource, key] of [
      ['cpu', 'cpu'],
      ['memory', 'memoryMiB'],
    ] as const) {
      const left = Math.max(0, free[key]);
      if (demand[key] > left + EPSILON) {
        const short = demand[key] - left;
        const each = demand[key] / asked.length;
        shortfalls.push({
          fleet: change.name,
          resource,
          sandboxes: asked.length,
          requested: demand[key],
          left,
          short,
          shortSandboxes: Math.min(asked.length, Math.ceil(short / each - EPSILON)),
        });
      }
      free[key] -= demand[key];
    }
  }
  return shortfalls;
}

/** Fractional cores add up with rounding noise: 0.1 x 3 is not 0.3. */
const EPSILON = 1e-9;

/** The plan warnings for the shortfalls: which fleet, how many sandboxes, what resource, by how much. */
export function capacityWarnings(changes: readonly ResourceChange[], live: LiveView): string[] {
  return capacityShortfalls(changes, live).map((shortfall) => describeShortfall(shortfall, live.nodes));
}

export function describeShortfall(shortfall: CapacityShortfall, nodes: readonly NodeInfo[]): string {
  const amount = (value: number): string =>
    shortfall.resource === 'memory' ? `${round(value)} MiB` : `${round(value)} CPU`;
  const what = shortfall.resource === 'memory' ? 'of memory' : '';
  const where =
    nodes.length === 1
      ? `node "${nodes[0].name}" has ${amount(shortfall.left)} left under its policy${policyNote(nodes[0].policy, shortfall.resource)}`
      : `nodes ${nodes.map((node) => `"${node.name}"${policyNote(node.policy, shortfall.resource)}`).join(', ')} have ${amount(shortfall.left)} left under their policies`;
  const plural = (count: number) => `${count} ${count === 1 ? 'sandbox' : 'sandboxes'}`;
  return (
    `fleet "${shortfall.fleet}": ${shortfall.sandboxes} new ${shortfall.sandboxes === 1 ? 'sandbox requests' : 'sandboxes request'} ` +
    `${amount(shortfall.requested)}${what ? ` ${what}` : ''}; ${where}: ${amount(shortfall.short)} (${plural(shortfall.shortSandboxes)}) short`
  );
}

/** ` (memory 2x, 512 MiB reserved)`, or nothing when the node does not say. */
function policyNote(policy: OvercommitPolicy | undefined, resource: 'cpu' | 'memory'): string {
  if (!policy) return '';
  return resource === 'memory'
    ? ` (memory ${round(policy.overcommit.memory)}x, ${round(policy.reserve.memoryMiB)} MiB reserved)`
    : ` (cpu ${round(policy.overcommit.cpu)}x, ${round(policy.reserve.cpu)} CPU reserved)`;
}

/** At most 3 decimals, no trailing zeros: 12.5, 0.25, 4096. */
function round(value: number): string {
  return String(Math.round(value * 1000) / 1000);
}
