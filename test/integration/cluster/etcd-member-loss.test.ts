/**
 * One etcd member of three SIGKILLed (the leader, the worst case) while the
 * real `dsec apply` creates a fleet of 12 over three agents, with the state
 * in etcd: the apply still succeeds, every sandbox the state records is
 * running, and a second plan has nothing to do.
 *
 * Needs the compiled CLI and agent: run `npm run build` first.
 */
import { afterEach, expect, it } from 'vitest';
import { fleetSandboxIds } from '../../helpers/state.js';
import { CliCluster, fleetYaml, KEYS, runningIn, sleep } from './cli-cluster.js';

let cluster: CliCluster | undefined;

afterEach(async () => {
  await cluster?.dispose();
  cluster = undefined;
}, 120_000);

it('keeps applying a fleet of 12 over three agents when the etcd leader is SIGKILLed part-way, and a second plan shows no changes', async () => {
  cluster = await CliCluster.start({ etcdMembers: 3, nodes: ['node-a', 'node-b', 'node-c'] });
  cluster.writeConfig(fleetYaml('web', 12));
  const watcher = await cluster.client();

  const apply = cluster.start(['apply', '--auto-approve', '--parallelism', '2']);
  // Kill the leader once the apply is placing sandboxes (placements go to etcd before each create).
  const deadline = Date.now() + 60_000;
  let placed = 0;
  while ((placed = Object.keys(await watcher.getAll().prefix(KEYS.placements).keys()).length) < 3) {
    if (Date.now() > deadline) throw new Error(`the apply placed ${placed} sandbox(es) in 60 s: ${JSON.stringify(await Promise.race([apply.result, sleep(10)]))}`);
    await sleep(20);
  }
  const leader = await cluster.leader();
  await cluster.etcd.kill(leader);

  const result = await apply.result;
  expect(result.stderr).not.toMatch(/error|warning|DSEC_/i);
  expect(result.code, result.stderr).toBe(0);
  expect(placed).toBeLessThan(12);

  const provider = cluster.provider();
  const running = await runningIn(provider, 'web');
  expect(running).toHaveLength(12);
  expect(new Set(running.map((sandbox) => sandbox.node))).toEqual(new Set(['node-a', 'node-b', 'node-c']));
  // The state records exactly the live sandboxes.
  const state = await cluster.state();
  expect(fleetSandboxIds(state, 'web')).toEqual(running.map((sandbox) => sandbox.id).sort());
  // Each id on exactly one node.
  const lists = await cluster.idsByNode();
  expect(Object.values(lists).flat().sort()).toEqual(running.map((sandbox) => sandbox.id).sort());

  const plan = await cluster.dsec(['plan', '--detailed-exitcode']);
  expect(plan.code, plan.stderr).toBe(0);
  expect(plan.stdout).toMatch(/No changes/);
}, 180_000);
