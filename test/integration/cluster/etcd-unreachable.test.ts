/**
 * etcd unreachable when planning: the real `dsec plan` (and `apply`) exits
 * non-zero with DSEC_ETCD_UNREACHABLE naming the endpoints and plans
 * nothing, never an empty live view that would plan to recreate the whole
 * fleet; the sandboxes on the nodes are left alone.
 *
 * Needs the compiled CLI and agent: run `npm run build` first.
 */
import { afterEach, expect, it } from 'vitest';
import { CliCluster, fleetYaml } from './cli-cluster.js';

let cluster: CliCluster | undefined;

afterEach(async () => {
  await cluster?.dispose();
  cluster = undefined;
}, 120_000);

it('refuses to plan with DSEC_ETCD_UNREACHABLE naming the endpoints when etcd is down, with the state local or in etcd, and touches no sandbox', async () => {
  cluster = await CliCluster.start({ nodes: ['node-a', 'node-b'] });
  // The state in the local file: only the provider needs etcd, so the provider's own check is what is tested.
  cluster.writeConfig(fleetYaml('web', 4), { state: 'local' });
  const applied = await cluster.dsec(['apply', '--auto-approve']);
  expect(applied.code, applied.stderr).toBe(0);
  const before = await cluster.idsByNode();
  expect(Object.values(before).flat()).toHaveLength(4);

  await cluster.etcd.kill(0);
  const endpoint = cluster.etcd.endpoints[0];
  const unreachable = new RegExp(`Error: etcd is not reachable at ${endpoint}: .* \\[DSEC_ETCD_UNREACHABLE\\]`);

  const plan = await cluster.dsec(['plan']);
  expect(plan.code).toBe(1);
  expect(plan.stderr).toMatch(unreachable);
  expect(plan.stdout).toBe('');

  const json = await cluster.dsec(['plan', '--json']);
  expect(json.code).toBe(1);
  const body = JSON.parse(json.stdout) as { error: { code: string; message: string }; resource_changes?: unknown };
  expect(body.error.code).toBe('DSEC_ETCD_UNREACHABLE');
  expect(body.error.message).toContain(endpoint);
  expect(body.resource_changes).toBeUndefined();

  const apply = await cluster.dsec(['apply', '--auto-approve']);
  expect(apply.code).toBe(1);
  expect(apply.stderr).toMatch(unreachable);

  // Two endpoints, neither answering, with the state in etcd too: both named.
  const dead = `http://127.0.0.1:1`;
  cluster.writeConfig(fleetYaml('web', 4), { etcd: [endpoint, dead] });
  const both = await cluster.dsec(['plan']);
  expect(both.code).toBe(1);
  expect(both.stderr).toMatch(new RegExp(`Error: etcd is not reachable at ${endpoint}, ${dead}: .* \\[DSEC_ETCD_UNREACHABLE\\]`));
  expect(both.stdout).toBe('');

  // Nothing was destroyed or created meanwhile.
  expect(await cluster.idsByNode()).toEqual(before);
}, 120_000);
