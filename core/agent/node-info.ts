/**
 * What `GET /v1/node` says about the node (and so every refresh and the
 * plan's capacity check): its name, backends and what each can do, capacity,
 * sandbox count, the storage plugin's format, a cluster agent's address and
 * labels, then whatever the `describeNode` taps add (admission's allocatable
 * and requested figures).
 */
import type { Dsec } from '../dsec.js';
import type { NodeContext } from '../hooks.js';
import type { NodeInfo } from '../live.js';
import { DSEC_VERSION } from '../version.js';
import { backendCapabilities } from './backend-hooks.js';

export interface NodeDescriberHost {
  readonly dsec: Dsec;
  readonly node: NodeContext;
  /** How many sandboxes the agent holds. */
  sandboxCount(): number;
  /** A cluster agent: where it serves over TCP (`host:port`) and its labels. */
  readonly cluster?: { readonly address: string; readonly labels: Readonly<Record<string, string>> };
}

export class NodeDescriber {
  private storage: NodeInfo['storage'];

  constructor(private readonly host: NodeDescriberHost) {}

  async describe(): Promise<NodeInfo> {
    const { dsec, node, cluster } = this.host;
    const storage = await this.storageSummary().catch(() => undefined);
    const info: NodeInfo = {
      name: node.name,
      backends: dsec.backends,
      capabilities: backendCapabilities(dsec),
      capacity: node.capacity,
      sandboxes: this.host.sandboxCount(),
      agentVersion: DSEC_VERSION,
      pid: process.pid,
      ...(storage ? { storage } : {}),
      ...(cluster ? { address: cluster.address, labels: cluster.labels } : {}),
    };
    return dsec.hooks.describeNode.promise(info, node).catch((error: Error) => {
      node.log.warn(`a describeNode tap failed (the node is described without it): ${error.message}`);
      return info;
    });
  }

  /**
   * The storage plugin's name and format, asked once: a store keeps its
   * format for the agent's life, and its full stats read every in-use
   * record (O(sandboxes) file reads), too much for each `GET /v1/node`.
   */
  async storageSummary(): Promise<NodeInfo['storage']> {
    if (this.storage) return this.storage;
    const stats = await this.host.dsec.hooks.storageStats.promise(this.host.node);
    if (!stats) return undefined;
    this.storage = { plugin: stats.plugin, format: stats.format, ...(stats.reason ? { reason: stats.reason } : {}) };
    return this.storage;
  }
}
