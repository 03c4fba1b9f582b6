/**
 * A cluster for tests that drive the real `dsec` binary (the compiled CLI:
 * `npm run build` first): a real etcd (1 or 3 members), real cluster agents
 * (container backend, each its own root and loopback port, lease TTL 3 s),
 * and a temp project whose dsec.yaml names them (`provider.cluster`, and
 * `state: {backend: etcd}` unless asked otherwise).
 *
 *   const cluster = await CliCluster.start({ etcdMembers: 3, nodes: ['a', 'b', 'c'] });
 *   cluster.writeConfig(fleetYaml('web', 12));
 *   await cluster.dsec(['apply', '--auto-approve']);
 *   await cluster.dispose();   // in afterEach: sandboxes, agents, etcd, folder; never throws
 */
import { execFile } from 'node:child_process';
import type { Etcd3 } from 'etcd3';
import { connectEtcd } from '../../../core/cluster/etcd.js';
import { clusterKeys } from '../../../core/cluster/keys.js';
import { Dsec } from '../../../core/dsec.js';
import type { SandboxInfo } from '../../../core/live.js';
import type { PluginRef } from '../../../core/model.js';
import type { StateFile } from '../../../core/plan.js';
import { EtcdStateStore } from '../../../core/state/etcd-store.js';
import densityPlacement from '../../../plugins/density-placement/index.js';
import { createClusterProvider, type ClusterProvider } from '../../../providers/cluster/index.js';
import { Project, type RunningCommand, type RunResult } from '../../e2e/harness.js';
import { EtcdCluster } from '../../helpers/etcd.js';
import { ClusterNode, CONTAINER_PLUGINS, TOKEN } from '../agent-cluster/cluster-node.js';

export const NODE_PLUGINS: PluginRef[] = [...CONTAINER_PLUGINS, { name: 'density-admission', options: {} }];
export const STATE_KEY = 'cluster-test';
export const KEYS = clusterKeys();

export interface CliClusterOptions {
  readonly etcdMembers?: 1 | 3;
  readonly nodes?: readonly string[];
  /** The agents' registration lease. @default 3 */
  readonly leaseTtlSeconds?: number;
}

/** A fleet of `replicas` small busybox containers. */
export function fleetYaml(name: string, replicas: number): string {
  return `  ${name}: { environment: shell, replicas: ${replicas}, resources: { cpu: 0.05, memory: 64Mi, pids: 64 } }\n`;
}

export class CliCluster {
  readonly nodes: ClusterNode[] = [];
  private readonly clients: { close(): void }[] = [];

  private constructor(
    readonly etcd: EtcdCluster,
    readonly project: Project,
  ) {}

  static async start(options: CliClusterOptions = {}): Promise<CliCluster> {
    const etcd = await EtcdCluster.start({ members: options.etcdMembers ?? 1 });
    const cluster = new CliCluster(etcd, Project.copy());
    try {
      cluster.project.write('token', `${TOKEN}\n`);
      for (const name of options.nodes ?? []) await cluster.startNode(name, options.leaseTtlSeconds ?? 3);
    } catch (error) {
      await cluster.dispose();
      throw error;
    }
    return cluster;
  }

  async startNode(name: string, leaseTtlSeconds = 3): Promise<ClusterNode> {
    const node = await ClusterNode.start(name, this.etcd.endpoints, { plugins: NODE_PLUGINS, leaseTtlSeconds });
    this.nodes.push(node);
    return node;
  }

  node(name: string): ClusterNode {
    const node = this.nodes.find((candidate) => candidate.options.name === name);
    if (!node) throw new Error(`no node ${name}`);
    return node;
  }

  /** dsec.yaml: the cluster provider on every etcd member, the state in etcd (or the local file). */
  writeConfig(fleets: string, options: { state?: 'etcd' | 'local'; etcd?: readonly string[] } = {}): void {
    const endpoints = (options.etcd ?? this.etcd.endpoints).join(', ');
    this.project.write(
      'dsec.yaml',
      `version: 1
provider:
  cluster: { etcd: [${endpoints}], tokenFile: token }
${options.state === 'local' ? '' : `state: { backend: etcd, key: ${STATE_KEY} }\n`}layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  shell: { layers: [base] }
fleets:
${fleets}`,
    );
  }

  dsec(args: readonly string[]): Promise<RunResult> {
    return this.project.run(args);
  }

  start(args: readonly string[]): RunningCommand {
    return this.project.start(args);
  }

  /** An etcd client on every member (closed by dispose). */
  async client(): Promise<Etcd3> {
    const client = await connectEtcd(this.etcd.endpoints);
    this.clients.push(client);
    return client;
  }

  /** A cluster provider as the CLI makes one (closed by dispose). */
  provider(): ClusterProvider {
    const dsec = new Dsec();
    dsec.use(densityPlacement());
    const provider = createClusterProvider({ etcd: this.etcd.endpoints, token: TOKEN, dsec, agentTimeoutMs: 2_000 });
    this.clients.push({ close: () => void provider.close() });
    return provider;
  }

  async state(): Promise<StateFile> {
    return new EtcdStateStore(await this.client(), STATE_KEY).read();
  }

  /** Each node's own list of sandbox ids, asked over TCP (nodes whose agent is gone are left out). */
  async idsByNode(): Promise<Record<string, string[]>> {
    const lists: Record<string, string[]> = {};
    for (const node of this.nodes) {
      const client = node.client(TOKEN, 5_000);
      try {
        lists[node.options.name!] = (await client.listSandboxes()).map((sandbox: SandboxInfo) => sandbox.id).sort();
      } catch {
        // a killed node
      } finally {
        client.close();
      }
    }
    return lists;
  }

  /** Index of the etcd member that leads right now. */
  async leader(): Promise<number> {
    const text = await new Promise<string>((resolve, reject) =>
      execFile('etcdctl', ['--endpoints', this.etcd.endpoints.join(','), 'endpoint', 'status', '-w', 'json'], { env: { ...process.env, ETCDCTL_API: '3' } }, (error, stdout) =>
        error ? reject(error) : resolve(stdout),
      ),
    );
    const statuses = JSON.parse(text) as { Endpoint: string; Status: { header: { member_id: number | string }; leader: number | string } }[];
    const leading = statuses.find((status) => String(status.Status.header.member_id) === String(status.Status.leader));
    if (!leading) throw new Error(`no leader in ${text}`);
    return this.etcd.endpoints.indexOf(leading.Endpoint);
  }

  /** Everything this cluster made goes: sandboxes (through the agents), agents, etcd, the project folder. Never throws. */
  async dispose(): Promise<void> {
    for (const client of this.clients.splice(0)) {
      try {
        client.close();
      } catch {
        // already closed
      }
    }
    // The agents destroy their own sandboxes (and a killed one's are swept) in dispose.
    for (const node of this.nodes.splice(0)) await node.dispose();
    await this.etcd.stop().catch(() => undefined);
    await this.project.cleanup().catch(() => undefined);
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The running sandboxes of a fleet, as the provider reports them. */
export async function runningIn(provider: ClusterProvider, fleet: string): Promise<SandboxInfo[]> {
  return (await provider.listSandboxes({ 'dsec.io/fleet': fleet })).filter((sandbox) => sandbox.status === 'running');
}
