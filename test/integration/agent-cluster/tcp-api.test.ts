/**
 * A cluster agent's TCP API: the shared token guards every request (refusals
 * logged, rate-limited, with the caller's address), the Unix socket stays
 * as it was, sandboxes are driven over TCP, and the client maps what it meets
 * (no answer, a 401, garbage) to clear error codes.
 */
import http from 'node:http';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentClient } from '../../../core/agent/client.js';
import { agentPaths } from '../../../core/agent/layout.js';
import { clusterKeys, type NodeRegistration } from '../../../core/cluster/keys.js';
import type { SandboxSpec } from '../../../core/live.js';
import { BUSYBOX } from '../../helpers/busybox-tree.js';
import { EtcdCluster, freePorts } from '../../helpers/etcd.js';
import { ClusterNode, CONTAINER_PLUGINS, TOKEN } from './cluster-node.js';

let etcd: EtcdCluster;
let kv: Etcd3;
let node: ClusterNode;

beforeAll(async () => {
  etcd = await EtcdCluster.start({ members: 1 });
  kv = new Etcd3({ hosts: etcd.endpoints });
  node = await ClusterNode.start('tcp-node', etcd.endpoints, { plugins: CONTAINER_PLUGINS, labels: { gpu: 'true', zone: 'a' } });
}, 60_000);

afterAll(async () => {
  try {
    await node?.dispose();
  } finally {
    kv?.close();
    await etcd?.stop();
  }
}, 60_000);

/** One raw request on the TCP port, for what the typed client never sends. */
function raw(method: string, urlPath: string, headers: Record<string, string> = {}, body?: Buffer): Promise<{ status: number; json: any }> {
  const [host, port] = node.address.split(':');
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port: Number(port), method, path: urlPath, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString('utf8') || 'null') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function registration(): Promise<NodeRegistration | undefined> {
  const text = await kv.get(clusterKeys().node('tcp-node')).string();
  return text === null ? undefined : (JSON.parse(text) as NodeRegistration);
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('the TCP API of a cluster agent', () => {
  it('refuses requests without the token or with a wrong one as DSEC_AGENT_UNAUTHORIZED and logs each with the caller address', async () => {
    const missing = await raw('GET', '/v1/node');
    expect(missing.status).toBe(401);
    expect(missing.json.error.code).toBe('DSEC_AGENT_UNAUTHORIZED');
    const malformed = await raw('GET', '/v1/sandboxes', { authorization: TOKEN });
    expect(malformed.status).toBe(401);

    const wrong = node.client('not-the-token-but-long-enough');
    try {
      const error = await wrong.node().catch((caught: unknown) => caught);
      expect(error).toMatchObject({ code: 'DSEC_AGENT_UNAUTHORIZED' });
      expect((error as Error).message).toContain(`the node agent at ${node.address} refused the request: wrong token`);
    } finally {
      wrong.close();
    }
    const log = node.logText();
    expect(log).toMatch(/warn +refused GET "\/v1\/node" over TCP from 127\.0\.0\.1:\d+: no Authorization header/);
    expect(log).toMatch(/refused GET "\/v1\/sandboxes" over TCP from 127\.0\.0\.1:\d+: the Authorization header is not "Bearer <token>"/);
    expect(log).toMatch(/refused GET "\/v1\/node" over TCP from 127\.0\.0\.1:\d+: wrong token/);
    expect(log).not.toContain(TOKEN);
  });

  it('keeps the Unix socket (0600, no token) and does not serve /v1/shutdown over TCP', async () => {
    const socket = new AgentClient(agentPaths(node.root).socket);
    try {
      await expect(socket.node()).resolves.toMatchObject({ name: 'tcp-node', address: node.address, labels: { gpu: 'true', zone: 'a' } });
    } finally {
      socket.close();
    }
    const shutdown = await raw('POST', '/v1/shutdown', { authorization: `Bearer ${TOKEN}` });
    expect(shutdown.status).toBe(404);
    await expect(raw('GET', '/v1/health', { authorization: `Bearer ${TOKEN}` })).resolves.toMatchObject({ status: 200, json: { ok: true } });
  });

  it('keeps the request body size limit on TCP', async () => {
    const big = Buffer.alloc(9 * 1024 * 1024, 0x20);
    const answer = await raw('POST', '/v1/sandboxes', { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, big).catch((error: Error) => ({
      status: -1,
      json: error.message,
    }));
    // The agent answers 413 then hangs up; a client still writing may see the reset instead.
    if (answer.status !== -1) expect(answer.status).toBe(413);
    await expect(raw('GET', '/v1/health', { authorization: `Bearer ${TOKEN}` })).resolves.toMatchObject({ status: 200 });
  });

  it('logs at most 20 refusals a minute, however many bad requests arrive', async () => {
    const before = node.logText().split('\n').filter((line) => line.includes('over TCP from')).length;
    await Promise.all(Array.from({ length: 60 }, () => raw('GET', '/v1/flood', { authorization: 'Bearer flood-flood-flood-flood' })));
    const lines = node.logText().split('\n').filter((line) => line.includes('over TCP from'));
    expect(lines.length).toBeLessThanOrEqual(20);
    expect(lines.length).toBeGreaterThanOrEqual(before);
  });

  it('creates, execs in and destroys a container sandbox over TCP, and the registration in etcd follows the count', async () => {
    const client = node.client(TOKEN, 60_000);
    try {
      const initial = await until('the registration', registration, 5_000);
      expect(initial).toMatchObject({ address: node.address, labels: { gpu: 'true', zone: 'a' }, info: { name: 'tcp-node', sandboxes: 0 } });
      expect(initial.info.capacity.cpu).toBeGreaterThan(0);
      expect(initial.info.capacity.memoryMiB).toBeGreaterThan(0);
      expect(initial.info.backends).toContain('container');

      const layer = await client.publishLayer({ ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: BUSYBOX } });
      const spec: SandboxSpec = {
        id: 'tcp-sandbox',
        backend: 'container',
        layers: [layer],
        env: {},
        workdir: '/',
        user: 'root',
        resources: { cpu: 0.5, memoryMiB: 64, pids: 64 },
        network: 'none',
        qos: 'best-effort',
        labels: {},
      };
      await expect(client.createSandbox(spec)).resolves.toMatchObject({ id: 'tcp-sandbox', status: 'running' });
      const result = await client.exec('tcp-sandbox', { cmd: ['/bin/sh', '-c', 'echo over-tcp'] });
      expect(result).toMatchObject({ exitCode: 0, stdout: 'over-tcp\n' });
      await until('sandboxes: 1 in etcd', async () => ((await registration())?.info.sandboxes === 1 ? true : undefined), 5_000);

      await expect(client.destroySandbox('tcp-sandbox')).resolves.toMatchObject({ existed: true });
      const after = await until('sandboxes: 0 in etcd', async () => {
        const current = await registration();
        return current?.info.sandboxes === 0 ? current : undefined;
      }, 5_000);
      expect(Date.parse(after.updatedAt)).toBeGreaterThan(Date.parse(initial.updatedAt));
    } finally {
      client.close();
    }
  }, 90_000);
});

describe('AgentClient over TCP', () => {
  it('reports an address where nothing listens as DSEC_AGENT_UNREACHABLE naming it', async () => {
    const [port] = await freePorts(1);
    const client = new AgentClient({ url: `http://127.0.0.1:${port}`, token: TOKEN }, { timeoutMs: 2_000 });
    try {
      const error = await client.node().catch((caught: unknown) => caught);
      expect(error).toMatchObject({ code: 'DSEC_AGENT_UNREACHABLE' });
      expect((error as Error).message).toContain(`the node agent at 127.0.0.1:${port} is not reachable`);
    } finally {
      client.close();
    }
  });

  it('reports an answer that is not JSON as DSEC_AGENT_BAD_ANSWER, and one that never comes within the timeout as unreachable', async () => {
    const server = http.createServer((req, res) => {
      if (req.url === '/v1/node') res.end('<html>not an agent</html>');
      // /v1/health: never answered
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    const { port } = server.address() as { port: number };
    const client = new AgentClient({ url: `http://127.0.0.1:${port}`, token: TOKEN }, { timeoutMs: 500 });
    try {
      const garbage = await client.node().catch((caught: unknown) => caught);
      expect(garbage).toMatchObject({ code: 'DSEC_AGENT_BAD_ANSWER' });
      expect((garbage as Error).message).toMatch(new RegExp(`agent at 127\\.0\\.0\\.1:${port} gave an answer that is not valid: GET /v1/node: HTTP 200 with a body that is not JSON`));
      await expect(client.health()).rejects.toMatchObject({ code: 'DSEC_AGENT_UNREACHABLE', message: expect.stringContaining('no answer within 500 ms') });
    } finally {
      client.close();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('refuses a URL that is not http://HOST:PORT or a missing token', () => {
    expect(() => new AgentClient({ url: 'https://127.0.0.1:7001', token: TOKEN })).toThrow(/expected http:\/\/HOST:PORT/);
    expect(() => new AgentClient({ url: 'http://127.0.0.1:7001', token: '' })).toThrow(/a token is required over TCP/);
  });
});
