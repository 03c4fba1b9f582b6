/**
 * The remote state's lock through the real `dsec` binary (`state: {backend:
 * etcd}`): of two applies run at once exactly one proceeds and the other is
 * refused with DSEC_STATE_LOCKED naming the holder; an apply SIGKILLed
 * half-way keeps the lock only until its lease lapses (the store's default
 * TTL, 10 s: the config has no setting for it), then the next apply
 * converges from what the killed one left.
 *
 * Needs the compiled CLI and agent: run `npm run build` first.
 */
import { hostname } from 'node:os';
import { afterEach, expect, it } from 'vitest';
import { CliCluster, fleetYaml, KEYS, runningIn, sleep, STATE_KEY } from './cli-cluster.js';

let cluster: CliCluster | undefined;

afterEach(async () => {
  await cluster?.dispose();
  cluster = undefined;
}, 120_000);

/** "the state is locked by pid N on HOST running `dsec apply` since ..." */
function holderPattern(pid: number): RegExp {
  return new RegExp(`the state is locked by pid ${pid} on ${hostname()} running \`dsec apply\` since .* \\[DSEC_STATE_LOCKED\\]`);
}

it('lets exactly one of two concurrent applies against the etcd state proceed, and refuses the other naming the holder', async () => {
  cluster = await CliCluster.start({ nodes: ['node-a', 'node-b'] });
  cluster.writeConfig(fleetYaml('web', 4));

  const first = cluster.start(['apply', '--auto-approve']);
  const second = cluster.start(['apply', '--auto-approve']);
  const results = await Promise.all([first.result, second.result]);
  const pids = [first.child.pid!, second.child.pid!];

  const winners = results.map((result, i) => ({ result, i })).filter(({ result }) => result.code === 0);
  expect(winners.map(({ result }) => result.code), results.map((result) => result.stderr).join('\n---\n')).toEqual([0]);
  const winner = winners[0].i;
  const loser = results[1 - winner];
  expect(loser.code).toBe(1);
  expect(loser.stderr).toMatch(holderPattern(pids[winner]));
  // The refused apply changed nothing: the winner's 4 sandboxes and no more.
  const provider = cluster.provider();
  expect(await runningIn(provider, 'web')).toHaveLength(4);
  expect(Object.values(await cluster.idsByNode()).flat()).toHaveLength(4);
  expect(await (await cluster.client()).get(KEYS.stateLock(STATE_KEY)).string()).toBeNull();
}, 120_000);

it('frees the lock of an apply SIGKILLed half-way when its lease lapses, and the next apply converges with no sandbox created twice', async () => {
  cluster = await CliCluster.start({ nodes: ['node-a', 'node-b'] });
  cluster.writeConfig(fleetYaml('web', 8));
  const etcd = await cluster.client();

  const doomed = cluster.start(['apply', '--auto-approve', '--parallelism', '1']);
  const deadline = Date.now() + 60_000;
  while (Object.keys(await etcd.getAll().prefix(KEYS.placements).keys()).length < 2) {
    const early = await Promise.race([doomed.result, sleep(0)]);
    if (early || Date.now() > deadline) throw new Error(`the apply placed nothing: ${JSON.stringify(early)}`);
    await sleep(20);
  }
  doomed.child.kill('SIGKILL');
  const killedAt = Date.now();
  expect((await doomed.result).signal).toBe('SIGKILL');

  // Still held: refused, naming the dead holder and when the lock lapses.
  const refused = await cluster.dsec(['apply', '--auto-approve']);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toMatch(holderPattern(doomed.child.pid!));
  expect(refused.stderr).toMatch(/if that process is gone, the lock lapses within \d+ s/);

  while ((await etcd.get(KEYS.stateLock(STATE_KEY)).string()) !== null) {
    if (Date.now() - killedAt > 20_000) throw new Error('the killed apply still holds the lock 20 s later');
    await sleep(200);
  }
  expect(Date.now() - killedAt).toBeLessThan(12_000);

  const converged = await cluster.dsec(['apply', '--auto-approve']);
  expect(converged.code, converged.stderr).toBe(0);
  const running = await runningIn(cluster.provider(), 'web');
  expect(running).toHaveLength(8);
  const ids = Object.values(await cluster.idsByNode()).flat();
  expect(ids.sort()).toEqual(running.map((sandbox) => sandbox.id).sort());
  expect(new Set(ids).size).toBe(ids.length);
  // A placement the killed apply wrote for a create it never sent is gone too.
  expect((await etcd.getAll().prefix(KEYS.placements).keys()).map((key) => key.slice(KEYS.placements.length)).sort()).toEqual(ids);
  const again = await cluster.dsec(['plan', '--detailed-exitcode']);
  expect(again.code, again.stdout + again.stderr).toBe(0);
}, 120_000);
