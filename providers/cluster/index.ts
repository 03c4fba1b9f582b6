/**
 * The `cluster` provider: many node agents, found through etcd. Agents
 * started with `dsec agent start --join` register under a lease
 * (`<prefix>/nodes/<name>`); this provider reads them, asks each over TCP
 * (with the shared token) for its node info and sandboxes, places new
 * sandboxes through the `place` hook, and records each placement in etcd
 * (`<prefix>/placements/<id>`) before the node is asked to create it.
 *
 * What it never does: trust a node that does not answer properly (it is
 * `unhealthy`, and its sandboxes are reported from their placements as
 * `stopped`), or return an empty view when etcd is unreachable
 * (DSEC_ETCD_UNREACHABLE naming the endpoints).
 */
import type { Etcd3 } from 'etcd3';
import { AgentClient } from '../../core/agent/client.js';
import { connectEtcd } from '../../core/cluster/etcd.js';
import { clusterKeys, DEFAULT_CLUSTER_PREFIX, type Placement } from '../../core/cluster/keys.js';
import type { Dsec } from '../../core/dsec.js';
import { DsecError, isDsecError } from '../../core/errors.js';
import {
  selectorLabels,
  type AcquireRequest,
  type BatchOutcome,
  type ExecRequest,
  type ExecResult,
  type FileContent,
  type FunctionResult,
  type FunctionTask,
  type LayerRecord,
  type LiveView,
  type NodeInfo,
  type NodeUsage,
  type SandboxInfo,
  type SandboxSpec,
  type SandboxTarget,
  type SandboxUpdate,
  type ReadFileRequest,
  type WriteFileRequest,
  type ReleaseRequest,
  type ReleaseResult,
  type RenewRequest,
} from '../../core/live.js';
import type { LayerModel } from '../../core/model.js';
import type { FleetPoolRequest, Provider } from '../../core/provider.js';
import { createClusterAcquirer } from './acquire.js';
import { createInCluster } from './create.js';
import { invokeInCluster } from './functions.js';
import { commonLayers, sandboxesOf } from './view.js';
import { mapLimit, probeNode, type ProbedNode } from './nodes.js';
import { deletePlacement, readPlacement, readPlacements, readRegistrations, writePlacement } from './registry.js';

export interface ClusterProviderOptions {
  /** etcd client URLs. */
  readonly etcd: readonly string[];
  /** The token every agent of the cluster wants (`--token-file`). */
  readonly token: string;
  /** @default "/dsec" */
  readonly prefix?: string;
  /** The engine's Dsec: its `place` hook chooses nodes (density-placement by default). */
  readonly dsec: Pick<Dsec, 'hooks'>;
  /** Told what the user did not ask for: a sandbox sent elsewhere after a refusal, a placement dropped with its node. */
  readonly notice?: (message: string) => void;
  /** How many times a refused sandbox is placed again. @default 3 */
  readonly maxRetries?: number;
  /** How long a node may take to answer a probe before it is unhealthy. @default 5000 */
  readonly agentTimeoutMs?: number;
  /** How many nodes are asked at once. @default 16 */
  readonly concurrency?: number;
  /** How long the healthy nodes read for placing are reused (one array for a burst, see the place hook). @default 10000 */
  readonly nodesTtlMs?: number;
}

export interface ClusterProvider extends Provider {
  /** The etcd client (connected on first use). */
  etcd(): Promise<Etcd3>;
}

export function createClusterProvider(options: ClusterProviderOptions): ClusterProvider {
  const keys = clusterKeys(options.prefix ?? DEFAULT_CLUSTER_PREFIX);
  const timeoutMs = options.agentTimeoutMs ?? 5_000;
  const concurrency = options.concurrency ?? 16;
  const nodesTtlMs = options.nodesTtlMs ?? 10_000;
  let connecting: Promise<Etcd3> | undefined;
  const etcd = (): Promise<Etcd3> => {
    connecting ??= connectEtcd(options.etcd);
    connecting.catch(() => (connecting = undefined));
    return connecting;
  };

  // Probes get a timeout; operations (a create, an exec) take as long as they take.
  const probeClients = new Map<string, AgentClient>();
  const workClients = new Map<string, AgentClient>();
  const clientIn = (cache: Map<string, AgentClient>, timeout: number) => (address: string) => {
    let client = cache.get(address);
    if (!client) cache.set(address, (client = new AgentClient({ url: `http://${address}`, token: options.token }, { timeoutMs: timeout })));
    return client;
  };
  const probeClient = clientIn(probeClients, timeoutMs);
  const workClient = clientIn(workClients, 0);

  /** Every registered node, probed (with its sandboxes when asked). */
  const probeAll = async (listSandboxes: boolean): Promise<ProbedNode[]> => {
    const registrations = [...(await readRegistrations(await etcd(), keys)).values()];
    const probed = await mapLimit(registrations, concurrency, (entry) => probeNode(entry, probeClient, { listSandboxes }));
    // Operations run on a client without the probe's timeout.
    return probed.map((node) => (node.client && node.info.address ? { ...node, client: workClient(node.info.address) } : node));
  };

  /**
   * The latest probe, reused: by `healthyNodes` for `nodesTtlMs` (one array
   * for a burst, see the place hook), and by `nodes()` for a moment after it
   * finished, so one command probes each node once. A node that never
   * answers costs the whole probe timeout, so probing it twice in a row
   * (refresh, then placing; usage, then health) doubled every command's wait.
   */
  let lastProbe: { at: number; finishedAt?: number; value: Promise<ProbedNode[]> } | undefined;
  const remember = (value: Promise<ProbedNode[]>): Promise<ProbedNode[]> => {
    const entry: { at: number; finishedAt?: number; value: Promise<ProbedNode[]> } = { at: Date.now(), value };
    lastProbe = entry;
    value.then(
      () => (entry.finishedAt = Date.now()),
      () => lastProbe === entry && (lastProbe = undefined),
    );
    return value;
  };
  const probeReused = (fresh: (probe: NonNullable<typeof lastProbe>) => boolean): Promise<ProbedNode[]> =>
    lastProbe && fresh(lastProbe) ? lastProbe.value : remember(probeAll(false));
  // One healthy array per probe: the place hook counts its own placements per array.
  const healthyOf = new WeakMap<ProbedNode[], { infos: NodeInfo[]; byName: Map<string, ProbedNode> }>();
  const healthyNodes = async () => {
    const probed = await probeReused((probe) => Date.now() - probe.at <= nodesTtlMs);
    let healthy = healthyOf.get(probed);
    if (!healthy) {
      const nodes = probed.filter((node) => node.client);
      healthy = { infos: nodes.map((node) => node.info), byName: new Map(nodes.map((node) => [node.info.name, node])) };
      healthyOf.set(probed, healthy);
    }
    return healthy;
  };

  /** The healthy node a placed sandbox is on; a gone or unhealthy node is an error naming it. */
  const nodeOf = async (id: string): Promise<{ client: AgentClient; node: string }> => {
    const placement = await readPlacement(await etcd(), keys, id);
    if (!placement) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
    const healthy = await healthyNodes();
    const node = healthy.byName.get(placement.node);
    if (!node?.client) {
      const registered = (await readRegistrations(await etcd(), keys)).has(placement.node);
      const why = registered ? 'is unhealthy' : 'is gone (its lease lapsed)';
      throw new DsecError('DSEC_AGENT_UNREACHABLE', { address: placement.node, message: `sandbox ${id} is on node ${placement.node}, which ${why}` });
    }
    return { client: node.client, node: placement.node };
  };

  /** Keep the placement's copy of a sandbox's claim in step with the node's; returns the placement. */
  const recordClaim = async (id: string, claim: SandboxInfo['claim']): Promise<Placement | undefined> => {
    const client = await etcd();
    const placement = await readPlacement(client, keys, id);
    if (!placement) return undefined;
    const { claim: _old, ...rest } = placement;
    const next: Placement = claim ? { ...rest, claim } : rest;
    await writePlacement(client, keys, next);
    return next;
  };

  /** Keep the placement's copy of a sandbox's labels in step with the node's. */
  const recordLabels = async (id: string, labels: SandboxInfo['labels']): Promise<void> => {
    const client = await etcd();
    const placement = await readPlacement(client, keys, id);
    if (placement) await writePlacement(client, keys, { ...placement, labels });
  };

  /** A sandbox on a lost node, as the live view reports it. */
  const lostInfo = async (id: string, placement: Placement | undefined): Promise<SandboxInfo> => {
    const client = await etcd();
    const [probed, placements] = await Promise.all([probeAll(true), readPlacements(client, keys)]);
    const found = sandboxesOf(probed, placements).find((sandbox) => sandbox.id === id);
    if (!found || !placement) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
    return found;
  };

  const onAllHealthy = async <T>(work: (client: AgentClient, node: NodeInfo) => Promise<T>): Promise<T[]> => {
    const healthy = await healthyNodes();
    return mapLimit(healthy.infos, concurrency, (info) => work(healthy.byName.get(info.name)!.client!, info));
  };

  /** Batch calls: ids go to their placements' nodes, labels to every healthy node. */
  const batch = async (target: SandboxTarget, call: (client: AgentClient, target: SandboxTarget) => Promise<BatchOutcome[]>): Promise<BatchOutcome[]> => {
    const outcomes: BatchOutcome[] = [];
    if (target.labels && !target.ids) {
      for (const found of await onAllHealthy((client) => call(client, target))) outcomes.push(...found);
      return outcomes;
    }
    const byNode = new Map<string, { client: AgentClient; ids: string[] }>();
    for (const id of target.ids ?? []) {
      try {
        const { client, node } = await nodeOf(id);
        const group = byNode.get(node) ?? { client, ids: [] };
        group.ids.push(id);
        byNode.set(node, group);
      } catch (error) {
        const { code, message } = error as DsecError;
        outcomes.push({ id, ok: false, error: { code: code ?? 'DSEC_INTERNAL', message } });
      }
    }
    for (const group of byNode.values()) outcomes.push(...(await call(group.client, { ...target, ids: group.ids })));
    return outcomes;
  };

  const acquireInCluster = createClusterAcquirer({ healthyNodes, concurrency });

  // When each node was last sent an FnCall task, so tasks spread over the nodes with workers.
  const lastInvoked = new Map<string, number>();

  const firstHealthy = async (): Promise<AgentClient> => {
    const healthy = await healthyNodes();
    const first = healthy.infos[0];
    if (!first) throw new DsecError('DSEC_PLACEMENT_FAILED', { id: '(layer)', reason: 'no healthy node is registered' });
    return healthy.byName.get(first.name)!.client!;
  };

  return {
    name: 'cluster',
    etcd,
    async refresh(): Promise<LiveView> {
      const client = await etcd();
      const [probed, placements] = await Promise.all([remember(probeAll(true)), readPlacements(client, keys)]);
      const healthy = probed.filter((node) => node.client);
      const [layers, pools] = await Promise.all([
        mapLimit(healthy, concurrency, (node) => node.client!.listLayers()),
        mapLimit(healthy, concurrency, (node) => node.client!.listPools()),
      ]);
      return { nodes: probed.map((node) => node.info), layers: commonLayers(layers), sandboxes: sandboxesOf(probed, placements), pools: pools.flat() };
    },
    digestLayer: async (layer: LayerModel): Promise<string> => (await firstHealthy()).digestLayer(layer),
    // Every healthy node gets the layer, so any of them can run the sandboxes stacked on it.
    publishLayer: async (layer: LayerModel): Promise<LayerRecord> => {
      const records = await onAllHealthy((client) => client.publishLayer(layer));
      if (records.length === 0) throw new DsecError('DSEC_PLACEMENT_FAILED', { id: `(layer ${layer.ref})`, reason: 'no healthy node is registered' });
      return records[0];
    },
    unpublishLayer: async (name: string, version: string): Promise<void> => {
      await onAllHealthy((client) => client.unpublishLayer(name, version));
    },
    createSandbox: async (spec: SandboxSpec): Promise<SandboxInfo> => {
      const client = await etcd();
      return createInCluster(spec, {
        hooks: options.dsec.hooks,
        maxRetries: options.maxRetries ?? 3,
        notice: options.notice,
        healthyNodes,
        readPlacement: (id) => readPlacement(client, keys, id),
        writePlacement: (placement: Placement) => writePlacement(client, keys, placement),
        deletePlacement: (id) => deletePlacement(client, keys, id),
      });
    },
    async updateSandbox(id: string, change: SandboxUpdate): Promise<SandboxInfo> {
      const info = await (await nodeOf(id)).client.updateSandbox(id, change);
      // The placement keeps the labels too, so a sandbox on a lost node is still found by them.
      if (change.labels) await recordLabels(id, info.labels);
      return info;
    },
    pauseSandboxes: (target: SandboxTarget) => batch(target, (client, part) => client.pauseSandboxes(part)),
    resumeSandboxes: (target: SandboxTarget) => batch(target, (client, part) => client.resumeSandboxes(part)),
    async claimSandbox(id: string, holder: string, ttlSeconds?: number): Promise<SandboxInfo> {
      const info = await (await nodeOf(id)).client.claimSandbox(id, holder, ttlSeconds);
      await recordClaim(id, info.claim);
      return info;
    },
    async releaseSandbox(id: string, request: ReleaseRequest = {}): Promise<ReleaseResult> {
      let result: ReleaseResult | undefined;
      try {
        result = await (await nodeOf(id)).client.release(id, request);
      } catch (error) {
        // Its node is gone: the claim lives on only in the placement; releasing it lets the plan replace the sandbox.
        if (!isDsecError(error, 'DSEC_AGENT_UNREACHABLE')) throw error;
      }
      if (result?.recycled) {
        // The node destroyed it (and dropped a placement its pool made); one the engine placed goes here.
        await deletePlacement(await etcd(), keys, id);
        return result;
      }
      const placement = await recordClaim(id, undefined);
      return result ?? { id, recycled: false, sandbox: await lostInfo(id, placement) };
    },
    acquireSandbox: async (fleet: string, request: AcquireRequest): Promise<SandboxInfo> => {
      const info = await acquireInCluster(fleet, request);
      await recordClaim(info.id, info.claim);
      return info;
    },
    async renewClaim(id: string, request: RenewRequest): Promise<SandboxInfo> {
      const info = await (await nodeOf(id)).client.renew(id, request);
      await recordClaim(id, info.claim);
      return info;
    },
    // Every healthy node gets the record (a node without a share keeps none ready); maxClaimed is shared out like the sandboxes.
    async setPool(pool: FleetPoolRequest): Promise<void> {
      const { shares, maxClaimed, ...spec } = pool;
      const healthy = await healthyNodes();
      const total = Object.values(shares).reduce((sum, count) => sum + count, 0);
      await mapLimit(healthy.infos, concurrency, async (node) => {
        const ready = shares[node.name] ?? 0;
        const bound = maxClaimed === undefined ? undefined : total > 0 ? Math.ceil((maxClaimed * ready) / total) : Math.ceil(maxClaimed / Math.max(1, healthy.infos.length));
        await healthy.byName.get(node.name)!.client!.setPool({ ...spec, ready, ...(bound !== undefined ? { maxClaimed: bound } : {}) });
      });
    },
    deletePool: async (fleet: string, lineage: string): Promise<void> => {
      await onAllHealthy((client) => client.deletePool(fleet, lineage));
    },
    nodeUsage: async (): Promise<NodeUsage[]> => onAllHealthy(async (client, node) => ({ ...(await client.nodeUsage()), node: node.name })),
    async destroySandbox(id: string, destroyOptions: { unlessClaimed?: boolean } = {}): Promise<void> {
      const client = await etcd();
      const placement = await readPlacement(client, keys, id);
      if (!placement) {
        // Never placed through this cluster's etcd (or already destroyed): make sure no node holds it.
        await onAllHealthy((agent) => agent.destroySandbox(id, destroyOptions));
        return;
      }
      const registrations = await readRegistrations(client, keys);
      if (!registrations.has(placement.node)) {
        options.notice?.(`sandbox ${id}: its node ${placement.node} is gone (its lease lapsed); the sandbox went with it, its placement is dropped`);
        await deletePlacement(client, keys, id);
        return;
      }
      const { client: agent } = await nodeOf(id);
      await agent.destroySandbox(id, destroyOptions);
      await deletePlacement(client, keys, id);
    },
    exec: async (id: string, request: ExecRequest): Promise<ExecResult> => (await nodeOf(id)).client.exec(id, request),
    readFile: async (id: string, request: ReadFileRequest): Promise<FileContent> => (await nodeOf(id)).client.readFile(id, request),
    writeFile: async (id: string, request: WriteFileRequest): Promise<void> => (await nodeOf(id)).client.writeFile(id, request),
    invokeFunction: async (fleet: string, task: FunctionTask): Promise<FunctionResult> => {
      const client = await etcd();
      return invokeInCluster(fleet, task, { healthyNodes, readPlacements: () => readPlacements(client, keys), lastUsed: lastInvoked });
    },
    async sweepStrays(): Promise<string[]> {
      const client = await etcd();
      const [probed, placements] = await Promise.all([probeAll(true), readPlacements(client, keys)]);
      const swept: string[] = [];
      for (const node of probed) {
        if (!node.client) continue;
        for (const sandbox of node.sandboxes ?? []) {
          const placedOn = placements.get(sandbox.id)?.node;
          if (placedOn === undefined || placedOn === node.info.name) continue;
          // The placement names another node: this copy is not the one anything routes to.
          await node.client.destroySandbox(sandbox.id);
          swept.push(`sandbox ${sandbox.id}: removed a stray copy from node ${node.info.name} (its placement is on ${placedOn})`);
        }
      }
      return swept;
    },
    async listSandboxes(labels?: Readonly<Record<string, string>>, listOptions: { holder?: string } = {}): Promise<SandboxInfo[]> {
      const client = await etcd();
      const [probed, placements] = await Promise.all([probeAll(true), readPlacements(client, keys)]);
      const matches = (sandbox: SandboxInfo) => {
        if (listOptions.holder !== undefined && sandbox.claim?.holder !== listOptions.holder) return false;
        const seen = selectorLabels(sandbox);
        return Object.entries(labels ?? {}).every(([key, value]) => seen[key] === value);
      };
      return sandboxesOf(probed, placements).filter(matches);
    },
    // Health is asked fresh, but a probe that finished within the last second is fresh.
    nodes: async (): Promise<NodeInfo[]> =>
      (await probeReused((probe) => probe.finishedAt !== undefined && Date.now() - probe.finishedAt <= 1_000)).map((node) => node.info),
    sandboxAgent: async (id: string): Promise<AgentClient> => (await nodeOf(id)).client,
    async close(): Promise<void> {
      for (const client of [...probeClients.values(), ...workClients.values()]) client.close();
      const client = await connecting?.catch(() => undefined);
      client?.close();
      connecting = undefined;
    },
  };
}
