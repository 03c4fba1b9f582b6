/**
 * A stale placement: etcd says a sandbox is on a healthy node that does not
 * have it (the placement is written before the create, and the create never
 * reached the node: the CLI was killed in between, or the request was lost).
 * The live view must show it as drift (`stopped`, with the reason), so the
 * next apply converges (drops it) and destroy removes it, instead of
 * leaving the key in etcd forever.
 *
 * Needs the compiled CLI and agent: run `npm run build` first.
 */
import type { Etcd3 } from 'etcd3';
import { afterEach, expect, it } from 'vitest';
import type { Placement } from '../../../core/cluster/keys.js';
import type { SandboxSpec } from '../../../core/live.js';
import { CliCluster, fleetYaml, KEYS } from './cli-cluster.js';

let cluster: CliCluster | undefined;

afterEach(async () => {
  await cluster?.dispose();
  cluster = undefined;
}, 120_000);

async function placements(etcd: Etcd3): Promise<Map<string, Placement>> {
  const raw = await etcd.getAll().prefix(KEYS.placements).strings();
  return new Map(Object.values(raw).map((text) => JSON.parse(text) as Placement).map((placement) => [placement.sandbox, placement]));
}

/** A placement of `id` on `node` as the provider writes one, the labels copied from a real sandbox of the fleet. */
async function injectStale(etcd: Etcd3, id: string, node: string): Promise<void> {
  const model = [...(await placements(etcd)).values()][0];
  const stale: Placement = { ...model, sandbox: id, node, at: new Date().toISOString() };
  await etcd.put(KEYS.placement(id)).value(JSON.stringify(stale));
}

interface PlanJson {
  resource_changes: { address: string; fleet_summary?: { create: number; delete: number; replace: number; unchanged: number } }[];
}

it('shows a placement on a healthy node that lacks the sandbox as stopped drift, and apply and destroy remove it', async () => {
  cluster = await CliCluster.start({ nodes: ['node-a', 'node-b'] });
  cluster.writeConfig(fleetYaml('web', 3));
  const applied = await cluster.dsec(['apply', '--auto-approve']);
  expect(applied.code, applied.stderr).toBe(0);
  const etcd = await cluster.client();
  const live = [...(await placements(etcd)).keys()].sort();
  expect(live).toHaveLength(3);

  await injectStale(etcd, 'web-stale001', 'node-a');
  const view = await cluster.provider().listSandboxes({ 'dsec.io/fleet': 'web' });
  const stale = view.find((sandbox) => sandbox.id === 'web-stale001');
  expect(stale?.status).toBe('stopped');
  expect(stale?.node).toBe('node-a');
  expect(stale?.error).toBe('node node-a does not have it (its create never reached the node)');

  const plan = await cluster.dsec(['plan', '--json']);
  expect(plan.code, plan.stderr).toBe(0);
  const fleet = (JSON.parse(plan.stdout) as PlanJson).resource_changes.find((change) => change.address === 'fleet.web');
  expect(fleet?.fleet_summary).toMatchObject({ create: 0, delete: 1, replace: 0, unchanged: 3 });
  const human = await cluster.dsec(['plan']);
  expect(human.stdout).toMatch(/-1 destroy; 3 unchanged/);

  const converged = await cluster.dsec(['apply', '--auto-approve']);
  expect(converged.code, converged.stderr).toBe(0);
  expect([...(await placements(etcd)).keys()].sort()).toEqual(live);
  expect(Object.values(await cluster.idsByNode()).flat().sort()).toEqual(live);
  const again = await cluster.dsec(['plan', '--detailed-exitcode']);
  expect(again.code, again.stdout + again.stderr).toBe(0);

  // destroy removes a stale placement with the rest.
  await injectStale(etcd, 'web-stale002', 'node-b');
  const destroyed = await cluster.dsec(['destroy', '--auto-approve']);
  expect(destroyed.code, destroyed.stderr).toBe(0);
  expect((await placements(etcd)).size).toBe(0);
  expect(Object.values(await cluster.idsByNode()).flat()).toEqual([]);
}, 120_000);

it('removes a stray copy of a sandbox from a node its placement does not name before apply plans (a create retried elsewhere whose first node came back with it)', async () => {
  cluster = await CliCluster.start({ nodes: ['node-a', 'node-b'] });
  cluster.writeConfig(fleetYaml('web', 2));
  const applied = await cluster.dsec(['apply', '--auto-approve']);
  expect(applied.code, applied.stderr).toBe(0);
  const [first] = [...(await placements(await cluster.client())).values()];
  const other = first.node === 'node-a' ? 'node-b' : 'node-a';
  // The same sandbox, created again on the other node: what a create retried there leaves when its first node returns.
  const [original] = await cluster.provider().listSandboxes({ 'dsec.io/fleet': 'web' }).then((all) => all.filter((s) => s.id === first.sandbox));
  const direct = cluster.node(other).client();
  try {
    const spec: SandboxSpec = {
      id: first.sandbox,
      backend: 'container',
      layers: original.layers,
      env: {},
      workdir: '/',
      user: 'root',
      resources: original.resources,
      network: 'none',
      qos: 'best-effort',
      labels: original.labels,
    };
    await direct.createSandbox(spec);
    expect((await direct.listSandboxes()).map((s) => s.id)).toContain(first.sandbox);
  } finally {
    direct.close();
  }
  const again = await cluster.dsec(['apply', '--auto-approve']);
  expect(again.code, again.stderr).toBe(0);
  expect(again.stderr).toContain(`sandbox ${first.sandbox}: removed a stray copy from node ${other} (its placement is on ${first.node})`);
  const lists = await cluster.idsByNode();
  expect(lists[other] ?? []).not.toContain(first.sandbox);
  expect(lists[first.node]).toContain(first.sandbox);
}, 120_000);
