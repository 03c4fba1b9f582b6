/**
 * Warm pools on a cluster: a real etcd and two real cluster agents. apply
 * gives each node the fleet's pool record with its share; acquires through
 * the provider get distinct sandboxes from the nodes that have ready ones,
 * with their claims in the placements; each node refills its own share and
 * records the refills' placements (so the cluster's view never takes them
 * for strays, and the next plan is empty); a release recycles the sandbox
 * and its placement; a node that dies takes its share with it, and the next
 * apply makes it up on the node that is left.
 *
 * Needs the compiled agent: run `npm run build` first.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readPlacements } from '../../../providers/cluster/registry.js';
import type { ClusterProvider } from '../../../providers/cluster/index.js';
import { DsecClient } from '../../../core/sdk/index.js';
import { CliCluster, KEYS, sleep } from './cli-cluster.js';

let cluster: CliCluster;
let provider: ClusterProvider;
const FLEET = '  swe: { environment: shell, replicas: 4, resources: { cpu: 0.05, memory: 64Mi, pids: 64 }, pool: { maxClaimed: 4 } }\n';

const fleetSandboxes = async () => (await provider.listSandboxes({ 'dsec.io/fleet': 'swe' })).sort((a, b) => a.id.localeCompare(b.id));
async function until<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await sleep(250);
  }
}

beforeAll(async () => {
  cluster = await CliCluster.start({ nodes: ['node-a', 'node-b'] });
  cluster.writeConfig(FLEET);
  const applied = await cluster.dsec(['apply', '--auto-approve']);
  if (applied.code !== 0) throw new Error(`apply failed: ${applied.stderr}${applied.stdout}`);
  provider = cluster.provider();
}, 180_000);

afterAll(async () => {
  await cluster?.dispose();
}, 120_000);

describe('warm pools on a cluster', () => {
  it('gives every healthy node the pool record, with shares that add up to replicas', async () => {
    const live = await provider.refresh();
    const pools = (live.pools ?? []).filter((pool) => pool.fleet === 'swe');
    expect(pools.map((pool) => pool.node).sort()).toEqual(['node-a', 'node-b']);
    expect(pools.reduce((sum, pool) => sum + pool.ready, 0)).toBe(4);
    const byNode = new Map((await fleetSandboxes()).map((s) => [s.id, s.node]));
    for (const pool of pools) expect([...byNode.values()].filter((node) => node === pool.node)).toHaveLength(pool.ready);
  });

  it('hands out distinct sandboxes across the nodes, keeps the claims in the placements, and each node refills its own share with placed sandboxes', async () => {
    const got = await Promise.all([0, 1, 2].map((i) => provider.acquireSandbox('swe', { holder: `r${i}`, waitMs: 30_000 })));
    expect(new Set(got.map((s) => s.id)).size).toBe(3);
    const placements = await readPlacements(await cluster.client(), KEYS);
    for (const [i, info] of got.entries()) expect(placements.get(info.id)?.claim?.holder).toBe(`r${i}`);
    // 4 fresh again beside the 3 claimed, every one running (a refill without a placement would be reported stopped).
    const all = await until('the pools refilled', fleetSandboxes, (list) => list.length === 7 && list.every((s) => s.status === 'running'));
    expect(all.filter((s) => s.claim).map((s) => s.claim!.holder).sort()).toEqual(['r0', 'r1', 'r2']);
    const placed = await readPlacements(await cluster.client(), KEYS);
    for (const sandbox of all) expect(placed.get(sandbox.id)?.node).toBe(sandbox.node);
    const plan = await cluster.dsec(['plan', '--detailed-exitcode']);
    expect(plan.code, plan.stdout + plan.stderr).toBe(0);
    // Found again by holder, as a preempted trainer would.
    expect((await provider.listSandboxes(undefined, { holder: 'r1' })).map((s) => s.id)).toEqual([got[1].id]);
    for (const info of got) {
      const released = await provider.releaseSandbox(info.id, { holder: info.claim!.holder });
      expect(released.recycled).toBe(true);
    }
    const after = await readPlacements(await cluster.client(), KEYS);
    for (const info of got) expect(after.has(info.id)).toBe(false);
    await until('4 left', fleetSandboxes, (list) => list.length === 4 && list.every((s) => !s.claim));
  }, 120_000);

  it('drives an acquired sandbox on its node through the SDK: streamed output, a session, a background command', async () => {
    const dsec = new DsecClient(provider);
    const sandbox = await dsec.acquire('swe', { holder: 'sdk-rollout', waitMs: 30_000 });
    const chunks: string[] = [];
    const streamed = await dsec.exec(sandbox.id, ['sh', '-c', 'echo one; sleep 0.5; echo two'], { onStdout: (chunk) => chunks.push(chunk.toString()) });
    expect(streamed.stdout).toBe('one\ntwo\n');
    expect(chunks.length).toBeGreaterThanOrEqual(2);
    const sh = await dsec.session(sandbox.id);
    await sh.run('cd /tmp && export ROLLOUT=7');
    await expect(sh.run('echo "$ROLLOUT $(pwd)"')).resolves.toMatchObject({ exitCode: 0, stdout: '7 /tmp\n' });
    const background = await dsec.exec(sandbox.id, ['sleep', '60'], { background: true });
    expect((await dsec.processes(sandbox.id)).map((p) => p.handle)).toContain(background.handle);
    await background.kill();
    await expect(background.wait()).resolves.toMatchObject({ signal: 'SIGKILL' });
    await sh.close();
    expect(await dsec.release(sandbox.id, { holder: 'sdk-rollout' })).toMatchObject({ recycled: true });
    await until('4 left', fleetSandboxes, (list) => list.length === 4 && list.every((s) => !s.claim && s.status === 'running'));
  }, 120_000);

  it('loses a dead node\'s share until the next apply, which makes it up on the node that is left', async () => {
    const victim = cluster.node('node-b');
    const share = (await fleetSandboxes()).filter((s) => s.node === 'node-b').length;
    await victim.kill();
    // Gone once its lease lapsed (3 s): its sandboxes are reported stopped from their placements.
    await until('node-b gone', () => provider.nodes(), (nodes) => !nodes.some((node) => node.name === 'node-b'), 30_000);
    const applied = await cluster.dsec(['apply', '--auto-approve']);
    expect(applied.code, applied.stderr + applied.stdout).toBe(0);
    const running = (await fleetSandboxes()).filter((s) => s.status === 'running');
    expect(running).toHaveLength(4);
    expect(running.every((s) => s.node === 'node-a')).toBe(true);
    const pool = (await provider.refresh()).pools?.find((item) => item.fleet === 'swe' && item.node === 'node-a');
    expect(pool?.ready).toBe(4);
    expect(share).toBeGreaterThan(0);
  }, 180_000);
});
