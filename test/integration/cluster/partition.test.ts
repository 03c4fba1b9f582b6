/**
 * A node lost in the middle of an apply: the real `dsec apply` of a fleet of
 * 12 over three agents, one agent SIGKILLed once sandboxes are being placed.
 * That apply may fail in part (a create in flight on the dead node has no
 * answer); once the node's lease lapses, a second apply converges: 12
 * running on the two nodes left, each id on one node only, the state and
 * the placements in etcd naming exactly those, and nothing left to plan.
 * Then the partition heals: node-a's agent comes back with the sandboxes it
 * ran (already replaced, their placements dropped); the next apply removes
 * them and keeps the 12, each reachable through its placement.
 *
 * Needs the compiled CLI and agent: run `npm run build` first.
 */
import { afterEach, expect, it } from 'vitest';
import { startClusterAgent } from '../../../core/agent/cluster-daemon.js';
import { fleetSandboxIds } from '../../helpers/state.js';
import { CliCluster, fleetYaml, KEYS, runningIn, sleep } from './cli-cluster.js';

let cluster: CliCluster | undefined;

afterEach(async () => {
  await cluster?.dispose();
  cluster = undefined;
}, 120_000);

it('converges after an agent is SIGKILLed mid-apply and its lease lapses, with no sandbox created twice, and again when the agent comes back with its old sandboxes', async () => {
  cluster = await CliCluster.start({ nodes: ['node-a', 'node-b', 'node-c'] });
  cluster.writeConfig(fleetYaml('web', 12));
  const etcd = await cluster.client();

  const first = cluster.start(['apply', '--auto-approve', '--parallelism', '2']);
  const deadline = Date.now() + 60_000;
  // Kill node-a once it runs two of them, the apply still going.
  const runningOnA = async () => {
    const client = cluster!.node('node-a').client();
    try {
      return (await client.listSandboxes()).filter((sandbox) => sandbox.status === 'running').length;
    } finally {
      client.close();
    }
  };
  while ((await runningOnA()) < 2) {
    const early = await Promise.race([first.result, sleep(0)]);
    if (early || Date.now() > deadline) throw new Error(`node-a got no sandboxes in time: ${JSON.stringify(early)}`);
    await sleep(20);
  }
  await cluster.node('node-a').kill();
  const partial = await first.result;
  // It may fail in part, but only because of node-a.
  if (partial.code !== 0) expect(partial.stderr).toMatch(/node-a|127\.0\.0\.1:\d+/);

  // The lease (3 s) lapses: node-a is no longer registered.
  const lapse = Date.now() + 20_000;
  while ((await etcd.get(KEYS.node('node-a')).string()) !== null) {
    if (Date.now() > lapse) throw new Error('node-a is still registered 20 s after SIGKILL');
    await sleep(200);
  }

  const second = await cluster.dsec(['apply', '--auto-approve']);
  expect(second.code, second.stderr).toBe(0);

  const running = await runningIn(cluster.provider(), 'web');
  expect(running).toHaveLength(12);
  expect(running.every((sandbox) => sandbox.node === 'node-b' || sandbox.node === 'node-c')).toBe(true);
  const ids = running.map((sandbox) => sandbox.id).sort();
  // Each id in one node's list only, and nothing else on the live nodes.
  const lists = await cluster.idsByNode();
  expect(Object.keys(lists).sort()).toEqual(['node-b', 'node-c']);
  const listed = Object.values(lists).flat();
  expect(new Set(listed).size).toBe(listed.length);
  expect(listed.sort()).toEqual(ids);
  // The state and the placements name exactly those.
  expect(fleetSandboxIds(await cluster.state(), 'web')).toEqual(ids);
  expect((await etcd.getAll().prefix(KEYS.placements).keys()).map((key) => key.slice(KEYS.placements.length)).sort()).toEqual(ids);

  const plan = await cluster.dsec(['plan', '--detailed-exitcode']);
  expect(plan.code, plan.stdout + plan.stderr).toBe(0);

  // The partition heals: node-a's agent comes back (same root, name and port) with the sandboxes it ran, already replaced.
  const nodeA = cluster.node('node-a');
  const restarted = await startClusterAgent(nodeA.options);
  nodeA.pid = restarted.pid;
  // Its containers outlived the agent, which adopts them again.
  const back = (await cluster.idsByNode())['node-a'] ?? [];
  const healed = await cluster.dsec(['apply', '--auto-approve']);
  expect(healed.code, healed.stderr).toBe(0);
  const final = await runningIn(cluster.provider(), 'web');
  expect(final).toHaveLength(12);
  const finalByNode = await cluster.idsByNode();
  const finalLists = Object.values(finalByNode).flat();
  expect(new Set(finalLists).size).toBe(finalLists.length);
  expect(finalLists.sort()).toEqual(final.map((sandbox) => sandbox.id).sort());
  expect((await etcd.getAll().prefix(KEYS.placements).keys()).map((key) => key.slice(KEYS.placements.length)).sort()).toEqual(final.map((sandbox) => sandbox.id).sort());
  expect(back.length).toBeGreaterThanOrEqual(2);
  // None of what node-a came back with is still on node-a. An id may live on elsewhere: a create
  // that node-a's death interrupted was retried on another node under the same id, and the
  // heal removed node-a's stray copy of it (uniqueness across nodes is checked above).
  expect((finalByNode['node-a'] ?? []).filter((id) => back.includes(id))).toEqual([]);
  const settled = await cluster.dsec(['plan', '--detailed-exitcode']);
  expect(settled.code, settled.stdout + settled.stderr).toBe(0);
  // exec reaches every one of them through its placement.
  const provider = cluster.provider();
  for (const sandbox of final) expect((await provider.exec(sandbox.id, { cmd: ['/bin/true'] })).exitCode).toBe(0);
}, 150_000);
