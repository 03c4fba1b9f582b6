/**
 * What the cluster keeps in etcd, and where. One prefix (default `/dsec`)
 * holds everything, so several clusters can share one etcd:
 *
 *   <prefix>/nodes/<node>            NodeRegistration, under the node's lease: a node
 *                                    whose agent stops renewing it disappears (unhealthy)
 *   <prefix>/placements/<sandbox>    Placement: which node a sandbox was sent to, written
 *                                    before the create (so a sandbox on a node that died
 *                                    is still known), deleted after its destroy
 *   <prefix>/state/<key>             the remote state (StateFile JSON)
 *   <prefix>/state/<key>.lock        its lock (LockInfo JSON), under the holder's lease:
 *                                    a crashed apply releases it when the lease lapses
 *
 * Plain data, no etcd client here: the agent, the provider and the state
 * store all build their keys from this file.
 */
import { LABEL_FLEET, type NodeInfo, type SandboxClaim, type SandboxSpec } from '../live.js';
import type { Resources } from '../model.js';

export const DEFAULT_CLUSTER_PREFIX = '/dsec';

/** What a node agent publishes about itself under its lease, refreshed every few seconds. */
export interface NodeRegistration {
  /** The node as `GET /v1/node` describes it (capacity, allocatable, requested, backends...). */
  readonly info: NodeInfo;
  /** `host:port` where the agent serves its API over TCP (token required). */
  readonly address: string;
  /** The node's labels, matched by fleets' `placement.nodeSelector` (e.g. `gpu: "true"`). */
  readonly labels: Readonly<Record<string, string>>;
  /** When the agent last refreshed this record (ISO time). */
  readonly updatedAt: string;
}

/** Where a sandbox was sent. */
export interface Placement {
  readonly sandbox: string;
  readonly node: string;
  /** The fleet it belongs to, when it has the dsec.io/fleet label. */
  readonly fleet?: string;
  readonly at: string;
  /**
   * What the sandbox is, from its spec, so the provider can still report it
   * (as `stopped`) when its node is gone and the planner sees the drift and
   * replaces it: its labels carry the ownership, fleet and spec hash.
   */
  readonly labels?: Readonly<Record<string, string>>;
  readonly backend?: string;
  readonly resources?: Resources;
  /**
   * A job's claim on it, kept here beside the node's own record so that a
   * claimed sandbox on a node that died is still known as claimed: the plan
   * leaves it for its job instead of replacing it.
   */
  readonly claim?: SandboxClaim;
}

/** The placement of a sandbox about to be created on `node` (by the engine's provider, or by a node's pool refilling). */
export function placementOf(spec: SandboxSpec, node: string): Placement {
  return {
    sandbox: spec.id,
    node,
    ...(spec.labels[LABEL_FLEET] ? { fleet: spec.labels[LABEL_FLEET] } : {}),
    at: new Date().toISOString(),
    labels: spec.labels,
    backend: spec.backend,
    resources: spec.resources,
  };
}

export function clusterKeys(prefix: string = DEFAULT_CLUSTER_PREFIX) {
  const root = prefix.replace(/\/+$/, '');
  return {
    nodes: `${root}/nodes/`,
    node: (name: string) => `${root}/nodes/${name}`,
    placements: `${root}/placements/`,
    placement: (sandbox: string) => `${root}/placements/${sandbox}`,
    state: (key: string) => `${root}/state/${key}`,
    stateLock: (key: string) => `${root}/state/${key}.lock`,
  };
}
