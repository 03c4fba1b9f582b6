/**
 * File calls and FnCall tasks through the cluster provider (a real etcd, two
 * real cluster agents): a file call goes to the node its sandbox's placement
 * names, and a task to a healthy node holding workers of the fleet, spread
 * over them least recently used first; a fleet with no workers anywhere is
 * DSEC_FUNCTION_NO_WORKERS naming it. The function backend is the test
 * stand-in (test/helpers/echo-function-plugin.mjs), which says which worker
 * ran the task.
 *
 * Needs the compiled agent: run `npm run build` first.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LayerModel, PluginRef } from '../../../core/model.js';
import { createClusterProvider, type ClusterProvider } from '../../../providers/cluster/index.js';
import { Dsec } from '../../../core/dsec.js';
import densityPlacement from '../../../plugins/density-placement/index.js';
import { sandboxSpec } from '../../../core/sdk/requests.js';
import { REPO } from '../../helpers/agent-fixture.js';
import { EtcdCluster } from '../../helpers/etcd.js';
import { ClusterNode, CONTAINER_PLUGINS, TOKEN } from '../agent-cluster/cluster-node.js';

const BUSYBOX: LayerModel = { ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } };
const RESOURCES = { cpu: 0.1, memoryMiB: 64, pids: 64 };
const PLUGINS: PluginRef[] = [...CONTAINER_PLUGINS, { name: path.join(REPO, 'test/helpers/echo-function-plugin.mjs'), options: {} }];

let etcd: EtcdCluster | undefined;
const nodes: ClusterNode[] = [];
let provider: ClusterProvider | undefined;

beforeAll(async () => {
  etcd = await EtcdCluster.start({ members: 1 });
  for (const name of ['node-a', 'node-b']) nodes.push(await ClusterNode.start(name, etcd.endpoints, { plugins: PLUGINS, leaseTtlSeconds: 3 }));
  provider = createClusterProvider({ etcd: etcd.endpoints, token: TOKEN, dsec: new Dsec().use(densityPlacement()), nodesTtlMs: 0 });
}, 120_000);

afterAll(async () => {
  try {
    if (provider) {
      // Pools first: a pool makes a new sandbox for each one destroyed.
      for (const pool of (await provider.refresh().catch(() => undefined))?.pools ?? []) await provider.deletePool!(pool.fleet, pool.lineage).catch(() => undefined);
      for (const sandbox of await provider.listSandboxes().catch(() => [])) await provider.destroySandbox(sandbox.id).catch(() => undefined);
      await provider.close();
    }
  } finally {
    for (const node of nodes.splice(0)) await node.dispose();
    await etcd?.stop();
  }
}, 120_000);

describe('file calls and tasks on a cluster', () => {
  it('routes each file call to the node its sandbox is on', async () => {
    const layer = await provider!.publishLayer(BUSYBOX);
    const boxes = [];
    for (const id of ['files-1', 'files-2']) boxes.push(await provider!.createSandbox(sandboxSpec({ id, backend: 'container', layers: [layer], resources: RESOURCES })));
    // Spread puts the second on the other node.
    expect(new Set(boxes.map((box) => box.node))).toEqual(new Set(['node-a', 'node-b']));
    for (const box of boxes) {
      await provider!.writeFile(box.id, { path: '/whoami', data: Buffer.from(`${box.id} on ${box.node}`).toString('base64') });
    }
    for (const box of boxes) {
      const content = await provider!.readFile(box.id, { path: '/whoami' });
      expect(Buffer.from(content.data, 'base64').toString()).toBe(`${box.id} on ${box.node}`);
      // The file is really on that node: its agent, asked directly, has it.
      const direct = nodes.find((node) => node.options.name === box.node)!.client();
      try {
        expect((await direct.exec(box.id, { cmd: ['cat', '/whoami'] })).stdout).toBe(`${box.id} on ${box.node}`);
      } finally {
        direct.close();
      }
    }
    await expect(provider!.readFile('no-such-box', { path: '/x' })).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
  }, 120_000);

  it('sends a task to a node with workers of the fleet, spreads tasks over such nodes, and names a fleet that has none', async () => {
    const worker = (id: string) => sandboxSpec({ id, backend: 'fnecho', layers: [], resources: RESOURCES, labels: { 'dsec.io/fleet': 'graders' } });
    const first = await provider!.createSandbox(worker('graders-1'));
    const ran = JSON.parse((await provider!.invokeFunction('graders', { runtime: 'sh', code: 'echo 1' })).stdout);
    expect(ran).toMatchObject({ fleet: 'graders', workers: 1 });
    const only = await provider!.invokeFunction('graders', { runtime: 'sh', code: 'exit 0' });
    expect(only.worker).toBe(first.id);

    const second = await provider!.createSandbox(worker('graders-2'));
    expect(second.node).not.toBe(first.node);
    const workers = new Set<string>();
    for (let i = 0; i < 4; i++) workers.add((await provider!.invokeFunction('graders', { runtime: 'sh', code: 'exit 0' })).worker);
    expect(workers).toEqual(new Set(['graders-1', 'graders-2']));

    const none = provider!.invokeFunction('nobody', { runtime: 'sh', code: 'true' });
    await expect(none).rejects.toMatchObject({ code: 'DSEC_FUNCTION_NO_WORKERS' });
    await expect(none).rejects.toThrow('fleet nobody has no FnCall workers on any healthy node of the cluster');
  }, 120_000);
});
