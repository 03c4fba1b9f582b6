/**
 * The two projects of the cluster-burst benchmark, and the cluster's agents.
 *
 * Both projects hold the same busybox layer, environment and fleet `bench`
 * (small limits, so 200 fit one 2-core machine under density-admission's
 * default overcommit: 200 x 0.1 CPU of 2 x 20, 200 x 64 MiB of ~23 GiB), plus
 * holder sandboxes that live through the whole run so the layer stays
 * mounted on every node (see HOLD_FLEET in dsec-project.ts): one for the
 * local agent, one per cluster node, pinned there by a node selector.
 *
 * The cluster agents are real daemons (startClusterAgent), each with its own
 * root and loopback port, the default agent plugins (the same the local
 * provider's agent loads, density-admission included), a shared token file
 * and a `node=<name>` label.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { startClusterAgent } from '../../core/agent/cluster-daemon.js';
import { stopAgent } from '../../core/agent/daemon.js';
import { removeCgroupDirs } from '../../plugins/backend-container/cgroups.js';
import { cgroupsPathOf, containerId } from '../../plugins/backend-container/index.js';
import { type findRuntime, runRuntime } from '../../plugins/backend-container/runtime.js';
import { FLEET, HOLD_FLEET } from './dsec-project.js';
import { freePorts } from './etcd-cluster.js';

export const TOKEN = 'bench-cluster-burst-token-0123456789';
const RESOURCES = '{ cpu: 0.1, memory: 64Mi, pids: 64 }';

export interface ClusterAgent {
  readonly name: string;
  readonly root: string;
  readonly address: string;
  pid?: number;
}

/** `provider:` is `local: {}` or the cluster's; `holders` are node names for per-node holder fleets (none: one local holder). */
function projectYaml(provider: string, replicas: number, holders: readonly string[]): string {
  const holdFleets =
    holders.length === 0
      ? `  ${HOLD_FLEET}: { environment: shell, backend: container, replicas: 1, resources: ${RESOURCES} }\n`
      : holders
          .map(
            (node) =>
              `  ${HOLD_FLEET}-${node}: { environment: shell, backend: container, replicas: 1, resources: ${RESOURCES}, ` +
              `placement: { nodeSelector: { node: ${node} } } }\n`,
          )
          .join('');
  return `# written by bench/cluster-burst
version: 1
provider:
  ${provider}
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  shell: { layers: [base] }
fleets:
  ${FLEET}: { environment: shell, backend: container, replicas: ${replicas}, resources: ${RESOURCES}, labels: { bench: cluster-burst } }
${holdFleets}`;
}

export async function writeLocalProject(dir: string, replicas: number): Promise<void> {
  await writeFile(path.join(dir, 'dsec.yaml'), projectYaml('local: {}', replicas, []));
}

export async function writeClusterProject(dir: string, replicas: number, etcd: string, tokenFile: string, nodes: readonly string[]): Promise<void> {
  const provider = `cluster: { etcd: [${etcd}], tokenFile: ${JSON.stringify(tokenFile)} }`;
  await writeFile(path.join(dir, 'dsec.yaml'), projectYaml(provider, replicas, nodes));
}

export async function writeToken(file: string): Promise<void> {
  await writeFile(file, `${TOKEN}\n`, { mode: 0o600 });
}

/** Start one cluster agent per name, roots under `dir`; `started` receives each as soon as it runs (for cleanup). */
export async function startAgents(
  dir: string,
  names: readonly string[],
  etcd: string,
  tokenFile: string,
  started: ClusterAgent[],
): Promise<void> {
  const ports = await freePorts(names.length);
  for (const [index, name] of names.entries()) {
    const root = path.join(dir, name);
    // Listed before it starts: a start that fails half-way still leaves a root to sweep.
    const agent: ClusterAgent = { name, root, address: `127.0.0.1:${ports[index]}` };
    started.push(agent);
    ({ pid: agent.pid } = await startClusterAgent({ root, name, etcd: [etcd], listen: agent.address, tokenFile, labels: { node: name } }));
  }
}

/** Stop the agent of `root` and remove by hand whatever of its containers is left. Returns what went wrong. */
export async function sweepAgent(runtime: ReturnType<typeof findRuntime>, root: string): Promise<string[]> {
  const problems: string[] = [];
  await stopAgent(root).catch((error: Error) => problems.push(`stopping the agent of ${root}: ${error.message}`));
  const prefix = containerId(root, '');
  const listed = await runRuntime(runtime, ['list', '--quiet']).catch(() => undefined);
  for (const id of (listed?.stdout ?? '').split('\n').filter((line) => line.startsWith(prefix))) {
    problems.push(`container ${id} was left running; deleting it`);
    await runRuntime(runtime, ['delete', '--force', id]);
    await removeCgroupDirs(cgroupsPathOf(id)).catch((error: Error) => problems.push(error.message));
  }
  return problems;
}
