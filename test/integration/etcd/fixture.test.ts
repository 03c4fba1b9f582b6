import { existsSync } from 'node:fs';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { EtcdCluster } from '../../helpers/etcd.js';

const clusters: EtcdCluster[] = [];
const clients: Etcd3[] = [];
afterEach(() => {
  for (const client of clients.splice(0)) client.close();
});
afterAll(async () => {
  for (const cluster of clusters.splice(0)) await cluster.stop();
});

async function start(members: 1 | 3): Promise<EtcdCluster> {
  const cluster = await EtcdCluster.start({ members });
  clusters.push(cluster);
  return cluster;
}

function client(endpoints: string[]): Etcd3 {
  const etcd = new Etcd3({ hosts: endpoints, dialTimeout: 2000 });
  clients.push(etcd);
  return etcd;
}

describe('EtcdCluster', () => {
  it('starts one member on a free loopback port that stores and returns a key', async () => {
    const cluster = await start(1);
    expect(cluster.endpoints).toHaveLength(1);
    expect(cluster.endpoints[0]).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(cluster.endpoints[0]).not.toMatch(/:(2379|2380)$/);
    const etcd = client(cluster.endpoints);
    await etcd.put('/fixture/a').value('1');
    expect(await etcd.get('/fixture/a').string()).toBe('1');
  });

  it('keeps serving writes through a client of all three endpoints while one member is killed, and takes it back after a restart', async () => {
    const cluster = await start(3);
    const etcd = client(cluster.endpoints);
    await etcd.put('/fixture/before').value('x');

    const pid = cluster.pid(0);
    await cluster.kill(0);
    expect(pid && processAlive(pid)).toBe(false);
    for (let i = 0; i < 5; i++) await etcd.put(`/fixture/during-${i}`).value(String(i));
    expect(await etcd.get('/fixture/during-4').string()).toBe('4');

    await cluster.restart(0);
    const alone = client([cluster.endpoints[0]]);
    expect(await alone.get('/fixture/during-4').string()).toBe('4');
    expect(await alone.get('/fixture/before').string()).toBe('x');
  });

  it('removes every member process and its temp folder on stop, and a second stop does nothing', async () => {
    const cluster = await start(1);
    const pid = cluster.pid(0);
    await cluster.stop();
    await cluster.stop();
    expect(pid && processAlive(pid)).toBe(false);
    expect(existsSync(cluster.dir)).toBe(false);
  });
});

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
