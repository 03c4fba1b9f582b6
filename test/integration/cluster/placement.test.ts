/**
 * The cluster provider end to end on this machine: a real etcd, three real
 * cluster agents (each its own root and loopback port, container backend),
 * the engine planning and applying a fleet through the provider. A fleet of
 * six spreads two per node (within one); a node whose admission refuses
 * every sandbox sends them elsewhere and the notices say so.
 *
 * Needs the compiled agent: run `npm run build` first.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../core/config/index.js';
import { Dsec } from '../../../core/dsec.js';
import { applyPlan } from '../../../core/engine/apply.js';
import { planProject } from '../../../core/engine/engine.js';
import { LABEL_FLEET } from '../../../core/live.js';
import type { PluginRef } from '../../../core/model.js';
import { LocalStateStore } from '../../../core/state/index.js';
import densityPlacement from '../../../plugins/density-placement/index.js';
import { createClusterProvider, type ClusterProvider } from '../../../providers/cluster/index.js';
import { EtcdCluster } from '../../helpers/etcd.js';
import { REPO } from '../../helpers/agent-fixture.js';
import { ClusterNode, CONTAINER_PLUGINS, TOKEN } from '../agent-cluster/cluster-node.js';

const NODE_PLUGINS: PluginRef[] = [...CONTAINER_PLUGINS, { name: 'density-admission', options: {} }];
/** Refuses a sandbox labelled `refuse=<reason>` (loaded only on the picky node). */
const REFUSING: PluginRef = { name: path.join(REPO, 'test/helpers/refuse-plugin.mjs'), options: {} };

let etcd: EtcdCluster;
const nodes: ClusterNode[] = [];
let project: string | undefined;
let provider: ClusterProvider | undefined;

beforeAll(async () => {
  etcd = await EtcdCluster.start({ members: 1 });
}, 60_000);

afterEach(async () => {
  try {
    if (provider) {
      // Pools first: a pool makes a new sandbox for each one destroyed.
      for (const pool of (await provider.refresh().catch(() => undefined))?.pools ?? []) await provider.deletePool!(pool.fleet, pool.lineage).catch(() => undefined);
      for (const sandbox of await provider.listSandboxes().catch(() => [])) await provider.destroySandbox(sandbox.id).catch(() => undefined);
      await provider.close();
    }
  } finally {
    provider = undefined;
    for (const node of nodes.splice(0)) await node.dispose();
    if (project) rmSync(project, { recursive: true, force: true });
    project = undefined;
  }
}, 120_000);

afterAll(async () => {
  await etcd?.stop();
}, 60_000);

async function startNodes(names: readonly string[], extra: Record<string, PluginRef[]> = {}): Promise<void> {
  for (const name of names) {
    nodes.push(await ClusterNode.start(name, etcd.endpoints, { plugins: [...NODE_PLUGINS, ...(extra[name] ?? [])], leaseTtlSeconds: 3 }));
  }
}

function writeProject(fleet: string): string {
  project = mkdtempSync(path.join(tmpdir(), 'dsec-cluster-project-'));
  writeFileSync(path.join(project, 'token'), `${TOKEN}\n`, { mode: 0o600 });
  writeFileSync(
    path.join(project, 'dsec.yaml'),
    `version: 1
provider:
  cluster: { etcd: [${etcd.endpoints.join(', ')}], tokenFile: token }
layers:
  base: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  shell: { layers: [base] }
fleets:
${fleet}`,
  );
  return path.join(project, 'dsec.yaml');
}

/** plan + apply through the cluster provider, as `dsec apply` does; the notices it gave. */
async function apply(file: string, placement: { k?: number } = {}): Promise<{ notices: string[]; failed: number }> {
  const { model: config } = await loadConfig(file);
  const dsec = new Dsec();
  dsec.use(densityPlacement(placement));
  const notices: string[] = [];
  const provider_ = createClusterProvider({ etcd: etcd.endpoints, token: TOKEN, dsec, notice: (message) => notices.push(message) });
  provider = provider_;
  const session = await new LocalStateStore(path.join(config.dir, '.dsec')).lock({ command: 'test apply' });
  try {
    const plan = await planProject({ config, provider: provider_, state: session.state, dsec, options: {} });
    const result = await applyPlan(plan, { provider: provider_, state: session, dsec });
    for (const failure of result.failed) notices.push(`failed: ${failure.change.address}: ${failure.error.message}`);
    return { notices, failed: result.failed.length };
  } finally {
    await session.release();
  }
}

function countByNode(sandboxes: readonly { node: string }[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const sandbox of sandboxes) counts[sandbox.node] = (counts[sandbox.node] ?? 0) + 1;
  return counts;
}

describe('the cluster provider', () => {
  it('spreads a fleet of 6 over three agents, two per node within one, each running where etcd says it was placed', async () => {
    await startNodes(['node-a', 'node-b', 'node-c']);
    // k = 3 samples every node: with three nodes, two samples leave one node out of six decisions about 1% of
    // the time (power of k's statistics are the unit tests' and the bench's; this is about the cluster's mechanics).
    const { failed, notices } = await apply(writeProject('  web: { environment: shell, replicas: 6, resources: { cpu: 0.1, memory: 64Mi, pids: 64 } }\n'), { k: 3 });
    expect(notices).toEqual([]);
    expect(failed).toBe(0);
    const sandboxes = (await provider!.listSandboxes({ [LABEL_FLEET]: 'web' })).filter((sandbox) => sandbox.status === 'running');
    expect(sandboxes).toHaveLength(6);
    const counts = countByNode(sandboxes);
    expect(Object.keys(counts).sort()).toEqual(['node-a', 'node-b', 'node-c']);
    expect(counts).toEqual({ 'node-a': 2, 'node-b': 2, 'node-c': 2 });
    // Each node answers for its own: exec reaches the sandbox through its placement.
    const result = await provider!.exec(sandboxes[0].id, { cmd: ['/bin/sh', '-c', 'echo hi'] });
    expect(result.stdout).toBe('hi\n');
    // The nodes are listed healthy, with the address they advertise.
    const listed = await provider!.nodes();
    expect(listed.map((node) => [node.name, node.health])).toEqual([
      ['node-a', 'healthy'],
      ['node-b', 'healthy'],
      ['node-c', 'healthy'],
    ]);
    expect(listed.every((node) => /^127\.0\.0\.1:\d+$/.test(node.address ?? ''))).toBe(true);
  }, 240_000);

  it('shows the sandboxes of a SIGKILLed node as drift once its lease lapses, and apply recreates them on the other nodes', async () => {
    await startNodes(['node-a', 'node-b', 'node-c']);
    const file = writeProject('  web: { environment: shell, replicas: 6, resources: { cpu: 0.1, memory: 64Mi, pids: 64 } }\n');
    expect((await apply(file)).failed).toBe(0);
    const before = await provider!.listSandboxes({ [LABEL_FLEET]: 'web' });
    const victim = nodes[0];
    const lost = before.filter((sandbox) => sandbox.node === 'node-a').map((sandbox) => sandbox.id);
    expect(lost.length).toBeGreaterThan(0);
    await provider!.close();
    provider = undefined;

    await victim.kill();
    // The lease (3 s) lapses: the node is no longer registered.
    const deadline = Date.now() + 20_000;
    const { model: config } = await loadConfig(file);
    const dsec = new Dsec();
    dsec.use(densityPlacement());
    const watcher = createClusterProvider({ etcd: etcd.endpoints, token: TOKEN, dsec });
    try {
      while ((await watcher.nodes()).some((node) => node.name === 'node-a')) {
        if (Date.now() > deadline) throw new Error('node-a is still registered 20 s after SIGKILL');
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      const view = await watcher.refresh();
      const gone = view.sandboxes.filter((sandbox) => lost.includes(sandbox.id));
      expect(gone.map((sandbox) => [sandbox.status, sandbox.error])).toEqual(lost.map(() => ['stopped', 'node node-a is gone (its lease lapsed)']));
      const session = await new LocalStateStore(path.join(config.dir, '.dsec')).lock({ command: 'test plan' });
      try {
        const plan = await planProject({ config, provider: watcher, state: session.state, dsec, options: {} });
        const change = plan.resource_changes.find((candidate) => candidate.address === 'fleet.web');
        expect(change?.action).not.toBe('no-op');
        expect(change?.fleet?.operations.length).toBe(lost.length);
      } finally {
        await session.release();
      }
    } finally {
      await watcher.close();
    }

    const { failed, notices } = await apply(file);
    expect(failed).toBe(0);
    for (const id of lost) expect(notices).toContain(`sandbox ${id}: its node node-a is gone (its lease lapsed); the sandbox went with it, its placement is dropped`);
    const after = (await provider!.listSandboxes({ [LABEL_FLEET]: 'web' })).filter((sandbox) => sandbox.status === 'running');
    expect(after).toHaveLength(6);
    expect(after.every((sandbox) => sandbox.node !== 'node-a')).toBe(true);
  }, 240_000);

  it('sends the sandboxes a node refuses to the other nodes, and the notices say which node refused and where each went', async () => {
    // pack puts every sandbox first on the most loaded node that fits, ties by name: a-picky, which refuses.
    await startNodes(['a-picky', 'b-node', 'c-node'], { 'a-picky': [REFUSING] });
    const fleet = `  graders:
    environment: shell
    replicas: 3
    resources: { cpu: 0.1, memory: 64Mi, pids: 64 }
    labels: { refuse: "picky admits nothing" }
    placement: { strategy: pack }
`;
    const { failed, notices } = await apply(writeProject(fleet));
    expect(failed).toBe(0);
    const sandboxes = await provider!.listSandboxes({ [LABEL_FLEET]: 'graders' });
    expect(sandboxes.map((sandbox) => sandbox.status)).toEqual(['running', 'running', 'running']);
    expect(sandboxes.some((sandbox) => sandbox.node === 'a-picky')).toBe(false);
    expect(notices).toHaveLength(3);
    for (const notice of notices) {
      expect(notice).toMatch(/^sandbox graders-[a-z0-9]{8}: node a-picky refused \(picky admits nothing\); placed on (b-node|c-node)$/);
    }
    // The refusing node kept no failed record of them.
    const picky = nodes[0].client();
    try {
      expect(await picky.listSandboxes()).toEqual([]);
    } finally {
      picky.close();
    }
  }, 240_000);
});
