/**
 * Each registered node asked over TCP whether it is what it claims: a node
 * that times out, refuses, or answers something that is not a node (or a
 * sandbox list) is `unhealthy` with the reason, and nothing it said is used.
 */
import { AgentClient } from '../../core/agent/client.js';
import type { NodeInfo, SandboxInfo } from '../../core/live.js';
import type { RegistrationEntry } from './registry.js';

/** A registered node, probed. */
export interface ProbedNode {
  readonly info: NodeInfo;
  /** Only for healthy nodes. */
  readonly client?: AgentClient;
  /** Only when the probe listed them (refresh). */
  readonly sandboxes?: readonly SandboxInfo[];
}

/** Run `work` over every item with at most `limit` at once; results in order. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

function isNodeInfo(value: unknown): value is NodeInfo {
  const node = value as Partial<NodeInfo> | null;
  return (
    !!node &&
    typeof node === 'object' &&
    typeof node.name === 'string' &&
    Array.isArray(node.backends) &&
    !!node.capacity &&
    typeof node.capacity.cpu === 'number' &&
    typeof node.capacity.memoryMiB === 'number' &&
    typeof node.sandboxes === 'number'
  );
}

function isSandboxList(value: unknown): value is SandboxInfo[] {
  return Array.isArray(value) && value.every((sandbox) => !!sandbox && typeof sandbox.id === 'string' && typeof sandbox.status === 'string');
}

/** A placeholder NodeInfo for a registration too broken to carry one. */
function blankInfo(name: string): NodeInfo {
  return { name, backends: [], capacity: { cpu: 0, memoryMiB: 0 }, sandboxes: 0, agentVersion: 'unknown', pid: 0 };
}

export function unhealthy(entry: RegistrationEntry, reason: string): ProbedNode {
  const registered = 'registration' in entry ? entry.registration : undefined;
  return {
    info: {
      ...(registered && isNodeInfo(registered.info) ? registered.info : blankInfo(entry.name)),
      name: entry.name,
      ...(registered ? { address: registered.address, labels: registered.labels } : {}),
      health: 'unhealthy',
      healthReason: reason,
    },
  };
}

/**
 * Ask one node for its info (and its sandboxes with `listSandboxes`). The
 * node's own report replaces the registration's, which may be seconds old.
 */
export async function probeNode(
  entry: RegistrationEntry,
  clientFor: (address: string) => AgentClient,
  options: { listSandboxes: boolean },
): Promise<ProbedNode> {
  if ('problem' in entry) return unhealthy(entry, entry.problem);
  const { registration } = entry;
  const client = clientFor(registration.address);
  try {
    const [info, sandboxes] = await Promise.all([
      client.node() as Promise<unknown>,
      options.listSandboxes ? (client.listSandboxes() as Promise<unknown>) : Promise.resolve(undefined),
    ]);
    if (!isNodeInfo(info)) return unhealthy(entry, `its agent at ${registration.address} answered GET /v1/node with something that is not a node`);
    if (options.listSandboxes && !isSandboxList(sandboxes)) {
      return unhealthy(entry, `its agent at ${registration.address} answered GET /v1/sandboxes with something that is not a sandbox list`);
    }
    return {
      info: { ...info, name: entry.name, address: registration.address, labels: registration.labels, health: 'healthy' },
      client,
      ...(options.listSandboxes ? { sandboxes: (sandboxes as SandboxInfo[]).map((sandbox) => ({ ...sandbox, node: entry.name })) } : {}),
    };
  } catch (error) {
    return unhealthy(entry, (error as Error).message);
  }
}
