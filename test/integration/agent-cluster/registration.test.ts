/**
 * A cluster agent's registration in etcd: under a lease that lapses when the
 * agent dies, revoked on a clean stop, registered again after etcd comes
 * back, never shared by two agents of one name; and bad cluster flags refuse
 * the start before any port is open.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startClusterAgent } from '../../../core/agent/cluster-daemon.js';
import { startAgentDaemon } from '../../../core/agent/daemon.js';
import { clusterKeys, type NodeRegistration } from '../../../core/cluster/keys.js';
import { REPO } from '../../helpers/agent-fixture.js';
import { EtcdCluster, freePorts } from '../../helpers/etcd.js';
import { ClusterNode, INERT_PLUGINS } from './cluster-node.js';

let etcd: EtcdCluster;
let kv: Etcd3;
const nodes: ClusterNode[] = [];

beforeAll(async () => {
  etcd = await EtcdCluster.start({ members: 1 });
  kv = new Etcd3({ hosts: etcd.endpoints });
}, 60_000);

afterEach(async () => {
  for (const node of nodes.splice(0)) await node.dispose();
}, 60_000);

afterAll(async () => {
  kv?.close();
  await etcd?.stop();
}, 60_000);

async function startNode(name: string, extra: Parameters<typeof ClusterNode.start>[2] = {}): Promise<ClusterNode> {
  const node = await ClusterNode.start(name, etcd.endpoints, extra);
  nodes.push(node);
  return node;
}

async function registration(name: string, prefix?: string): Promise<NodeRegistration | undefined> {
  const text = await kv.get(clusterKeys(prefix).node(name)).string();
  return text === null ? undefined : (JSON.parse(text) as NodeRegistration);
}

async function leaseOf(name: string): Promise<string | undefined> {
  const found = await kv.get(clusterKeys().node(name)).exec();
  return found.kvs[0]?.lease;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('cluster agent registration', () => {
  it('is in etcd when the start returns, under its prefix with address, labels and capacity, and a clean stop removes it at once', async () => {
    const node = await startNode('reg-a', { labels: { gpu: 'true' }, prefix: '/other' });
    const found = await registration('reg-a', '/other');
    expect(found).toMatchObject({ address: node.address, labels: { gpu: 'true' }, info: { name: 'reg-a', address: node.address, labels: { gpu: 'true' }, backends: ['inert'] } });
    expect(found!.info.capacity.cpu).toBeGreaterThan(0);
    expect(await registration('reg-a')).toBeUndefined();

    await node.stop();
    expect(await registration('reg-a', '/other')).toBeUndefined();
    expect(node.logText()).toMatch(/left the cluster: lease of \/other\/nodes\/reg-a revoked/);
  });

  it('refreshes the registration every two seconds', async () => {
    await startNode('reg-refresh');
    const first = (await registration('reg-refresh'))!;
    const later = await until('a newer updatedAt', async () => {
      const current = await registration('reg-refresh');
      return current && current.updatedAt !== first.updatedAt ? current : undefined;
    }, 4_000);
    expect(Date.parse(later.updatedAt) - Date.parse(first.updatedAt)).toBeGreaterThanOrEqual(1_500);
  });

  it('disappears within the lease TTL plus a second when the agent is killed with SIGKILL, and the same agent started again takes its name back at once', async () => {
    const node = await startNode('reg-killed', { leaseTtlSeconds: 2 });
    expect(await registration('reg-killed')).toBeDefined();
    await node.kill();
    const killedAt = Date.now();
    await until('the key to lapse', async () => ((await registration('reg-killed')) === undefined ? true : undefined), 4_000);
    expect(Date.now() - killedAt).toBeLessThanOrEqual(3_200);

    // Started again before its old lease lapsed: same address, so it is a previous run of this agent.
    await node.stop();
    const again = await startClusterAgent(node.options);
    node.pid = again.pid;
    await node.kill();
    const restarted = await startClusterAgent(node.options);
    node.pid = restarted.pid;
    expect(await registration('reg-killed')).toMatchObject({ address: node.address });
    expect(node.logText()).toMatch(/took over \/dsec\/nodes\/reg-killed from a previous run of this agent/);
  }, 30_000);

  it('refuses a second agent with a name another live agent holds, naming the holder', async () => {
    const first = await startNode('reg-twice');
    const error = await startNode('reg-twice').catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'DSEC_AGENT_START' });
    expect((error as Error).message).toContain(`node name "reg-twice" is already registered in etcd (/dsec/nodes/reg-twice) by the agent at ${first.address}`);
    expect(await registration('reg-twice')).toMatchObject({ address: first.address });
  });

  it('registers again after etcd is killed and restarted on the same data dir, and serves over TCP meanwhile', async () => {
    const node = await startNode('reg-etcd', { leaseTtlSeconds: 2 });
    const before = await leaseOf('reg-etcd');
    await etcd.kill(0);
    // Down for longer than twice the TTL: the client gives the lease up.
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    const client = node.client();
    try {
      await expect(client.health()).resolves.toMatchObject({ ok: true });
    } finally {
      client.close();
    }
    await etcd.restart(0);
    const restartedAt = Date.now();
    const back = await until('a fresh registration', async () => {
      const current = await registration('reg-etcd');
      return current && Date.parse(current.updatedAt) > restartedAt ? current : undefined;
    }, 15_000);
    expect(back.address).toBe(node.address);
    expect(node.logText()).toMatch(/the lease of \/dsec\/nodes\/reg-etcd was lost/);
    // Under a new lease that is kept alive: still there well past the TTL.
    const after = await leaseOf('reg-etcd');
    expect(after).not.toBe(before);
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    expect(await leaseOf('reg-etcd')).toBe(after);
  }, 60_000);

  it('refuses to start with a token file that is missing or too short, before any port is open', async () => {
    const node = await startNode('reg-token');
    await node.stop();
    writeFileSync(node.tokenFile, '  short-token \n');
    await expect(startClusterAgent(node.options)).rejects.toMatchObject({
      code: 'DSEC_USAGE',
      message: expect.stringContaining(`--token-file ${node.tokenFile}: the token has 11 character(s) after trimming; at least 16 are needed`),
    });
    await expect(startClusterAgent({ ...node.options, tokenFile: path.join(node.tmp, 'absent') })).rejects.toMatchObject({
      code: 'DSEC_USAGE',
      message: expect.stringContaining('cannot read it (ENOENT)'),
    });
    // The daemon checks for itself too, whoever spawns it.
    const [port] = await freePorts(1);
    const error = await startAgentDaemon({
      root: node.root,
      plugins: INERT_PLUGINS,
      builtins: false,
      baseDir: REPO,
      extraArgs: ['--listen', `127.0.0.1:${port}`, '--token-file', node.tokenFile],
    }).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'DSEC_AGENT_START' });
    expect((error as Error).message).toMatch(/at least 16 are needed/);
    const listenOnly = await startAgentDaemon({ root: node.root, plugins: INERT_PLUGINS, builtins: false, baseDir: REPO, extraArgs: ['--listen', `127.0.0.1:${port}`] }).catch(
      (caught: unknown) => caught,
    );
    expect((listenOnly as Error).message).toMatch(/--listen and --token-file go together/);
  }, 30_000);
});
