/**
 * The SDK on a cluster project: `connect({ dir })` reads a dsec.yaml whose
 * provider is `cluster` (a real etcd, two real cluster agents with the
 * container backend) and drives a sandbox through the cluster provider, as
 * a harness would. What only one agent can do is refused by name; an etcd
 * that does not answer is DSEC_ETCD_UNREACHABLE from connect.
 *
 * Needs the compiled agent: run `npm run build` first.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LayerModel } from '../../../core/model.js';
import { connect, type DsecClient } from '../../../core/sdk/index.js';
import { EtcdCluster, freePorts } from '../../helpers/etcd.js';
import { ClusterNode, CONTAINER_PLUGINS, TOKEN } from '../agent-cluster/cluster-node.js';

const BUSYBOX: LayerModel = { ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } };
const RESOURCES = { cpu: 0.1, memoryMiB: 64, pids: 64 };

let etcd: EtcdCluster | undefined;
const nodes: ClusterNode[] = [];
const projects: string[] = [];
let dsec: DsecClient | undefined;

/** A temp project on `endpoints`, its token file beside the config. */
function writeProject(endpoints: readonly string[]): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'dsec-sdk-cluster-'));
  projects.push(dir);
  writeFileSync(path.join(dir, 'token'), `${TOKEN}\n`, { mode: 0o600 });
  writeFileSync(
    path.join(dir, 'dsec.yaml'),
    `version: 1
provider:
  cluster: { etcd: [${endpoints.join(', ')}], tokenFile: ./token }
layers:
  busybox: { kind: base, version: 1.0.0, source: { busybox: {} } }
environments:
  shell: { layers: [busybox] }
`,
  );
  return dir;
}

beforeAll(async () => {
  etcd = await EtcdCluster.start({ members: 1 });
  for (const name of ['node-a', 'node-b']) nodes.push(await ClusterNode.start(name, etcd.endpoints, { plugins: CONTAINER_PLUGINS, leaseTtlSeconds: 3 }));
  dsec = await connect({ dir: writeProject(etcd.endpoints) });
}, 120_000);

afterAll(async () => {
  try {
    if (dsec) {
      for (const sandbox of await dsec.list().catch(() => [])) await dsec.destroy(sandbox.id).catch(() => undefined);
      await dsec.close();
    }
  } finally {
    // Each node destroys what is left on it, stops and sweeps its folder.
    for (const node of nodes.splice(0)) await node.dispose();
    await etcd?.stop();
    for (const dir of projects.splice(0)) rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);

describe('the SDK on a cluster project', () => {
  it('connects through the cluster provider and lists both nodes healthy, with their usage', async () => {
    expect(dsec!.providerName).toBe('cluster');
    expect(dsec!.socket).toBeUndefined();
    const listed = await dsec!.listNodes();
    expect(listed.map((node) => [node.name, node.health])).toEqual([
      ['node-a', 'healthy'],
      ['node-b', 'healthy'],
    ]);
    expect(listed.map((node) => node.address)).toEqual(nodes.map((node) => node.address));
    expect((await dsec!.nodes()).map((usage) => usage.node).sort()).toEqual(['node-a', 'node-b']);
  });

  it('creates, lists, execs, pauses, resumes and destroys a sandbox placed on one of the nodes', async () => {
    const layer = await dsec!.publishLayer(BUSYBOX);
    expect((await dsec!.layers()).map((record) => `${record.name}@${record.version}`)).toContain('busybox@1.0.0');

    const box = await dsec!.create({ id: 'sdk-cluster-1', backend: 'container', layers: [layer], resources: RESOURCES, labels: { job: 'rollout-1' } });
    expect(box).toMatchObject({ id: 'sdk-cluster-1', status: 'running' });
    expect(['node-a', 'node-b']).toContain(box.node);

    const listed = await dsec!.list({ job: 'rollout-1' });
    expect(listed.map((sandbox) => [sandbox.id, sandbox.node, sandbox.status])).toEqual([['sdk-cluster-1', box.node, 'running']]);
    expect(await dsec!.list({ job: 'someone-else' })).toEqual([]);

    expect(await dsec!.exec(box.id, 'echo "$((6 * 7))"')).toMatchObject({ stdout: '42\n', exitCode: 0 });
    expect((await dsec!.exec(box.id, ['sh', '-c', 'exit 3'])).exitCode).toBe(3);

    const paused = await dsec!.pause({ labels: { job: 'rollout-1' } });
    expect(paused.map((outcome) => [outcome.id, outcome.ok])).toEqual([['sdk-cluster-1', true]]);
    expect((await dsec!.get(box.id)).status).toBe('paused');
    const resumed = await dsec!.resume(box.id);
    expect(resumed.map((outcome) => [outcome.id, outcome.ok])).toEqual([['sdk-cluster-1', true]]);
    expect((await dsec!.get(box.id)).status).toBe('running');

    expect((await dsec!.claim(box.id, 'job-7')).claim).toMatchObject({ holder: 'job-7' });
    await expect(dsec!.claim(box.id, 'job-8')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_CLAIMED' });
    // Not a pool's sandbox: nothing to recycle it into, so the release only ends the claim.
    const released = await dsec!.release(box.id);
    expect(released).toMatchObject({ id: box.id, recycled: false });
    expect(released.sandbox).toBeDefined();
    expect(released.sandbox!.claim).toBeUndefined();
    expect((await dsec!.get(box.id)).claim).toBeUndefined();

    const updated = await dsec!.update(box.id, { resources: { ...RESOURCES, cpu: 0.2 } });
    expect(updated.resources.cpu).toBe(0.2);

    await dsec!.destroy(box.id);
    await dsec!.destroy(box.id); // idempotent
    expect(await dsec!.list()).toEqual([]);
    await expect(dsec!.get(box.id)).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
    await expect(dsec!.exec(box.id, ['true'])).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
  }, 120_000);

  it('refuses what only one node agent can do, naming the operation and the provider', async () => {
    const snapshot = dsec!.snapshot('any', { as: 'solved@1.0.0' });
    await expect(snapshot).rejects.toMatchObject({ code: 'DSEC_PROVIDER_UNSUPPORTED' });
    await expect(snapshot).rejects.toThrow(/^snapshot is not available with the cluster provider: /);
    await expect(dsec!.node()).rejects.toMatchObject({ code: 'DSEC_PROVIDER_UNSUPPORTED', message: expect.stringContaining('use listNodes()') });
  });

  it('reports an etcd that does not answer as DSEC_ETCD_UNREACHABLE naming the endpoint, from connect itself', async () => {
    const [port] = await freePorts(1);
    const endpoint = `http://127.0.0.1:${port}`;
    const started = Date.now();
    const failure = connect({ dir: writeProject([endpoint]) });
    await expect(failure).rejects.toMatchObject({ code: 'DSEC_ETCD_UNREACHABLE' });
    await expect(failure).rejects.toThrow(endpoint);
    expect(Date.now() - started).toBeLessThan(15_000);
  }, 30_000);
});
