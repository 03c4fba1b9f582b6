/**
 * Nodes that are registered in etcd but whose "agent" cannot be trusted:
 * tiny HTTP servers standing in for a broken agent (the thing under test is
 * how the provider treats them), registered under a lease with a tempting
 * registration (lots of capacity, no load). One answers HTML, one answers
 * JSON that is not a node, one accepts connections and never answers. The
 * real `dsec nodes --json` shows each unhealthy with the reason, `dsec
 * apply` places nothing on them (and never asks them to create anything),
 * and the next plan still sees the fleet (no changes).
 *
 * Needs the compiled CLI and agent: run `npm run build` first.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { afterEach, expect, it } from 'vitest';
import type { NodeRegistration } from '../../../core/cluster/keys.js';
import { freePorts } from '../../helpers/etcd.js';
import { CliCluster, fleetYaml, KEYS, runningIn } from './cli-cluster.js';

let cluster: CliCluster | undefined;
const servers: FakeAgent[] = [];

afterEach(async () => {
  try {
    for (const server of servers.splice(0)) await server.close();
  } finally {
    await cluster?.dispose();
    cluster = undefined;
  }
}, 120_000);

type Behaviour = 'html' | 'not-a-node' | 'silent';

/** An HTTP server that answers every request the same broken way, and remembers what it was asked. */
class FakeAgent {
  readonly requests: string[] = [];
  private readonly sockets = new Set<Socket>();

  private constructor(
    readonly server: Server,
    readonly address: string,
  ) {
    server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
  }

  static async start(behaviour: Behaviour): Promise<FakeAgent> {
    const [port] = await freePorts(1);
    let agent: FakeAgent | undefined;
    const server = createServer((request: IncomingMessage, response) => {
      agent?.requests.push(`${request.method} ${request.url}`);
      if (behaviour === 'silent') return; // never answers
      if (behaviour === 'html') {
        response.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>502 Bad Gateway</body></html>');
      } else {
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ hello: 'world', sandboxes: 'many' }));
      }
    });
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    agent = new FakeAgent(server, `127.0.0.1:${port}`);
    servers.push(agent);
    return agent;
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** What a node with nothing on it and lots of room would register: placement would love it. */
function tempting(name: string, address: string): NodeRegistration {
  return {
    info: {
      name,
      backends: ['container'],
      capacity: { cpu: 64, memoryMiB: 262_144 },
      sandboxes: 0,
      agentVersion: '0.1.0',
      pid: 1,
    },
    address,
    labels: {},
    updatedAt: new Date().toISOString(),
  };
}

interface NodeJson {
  node: string;
  health?: string;
  healthReason?: string;
  address?: string;
}

it('shows agents that answer garbage or time out as unhealthy with the reason, never places on them, and keeps planning the fleet', async () => {
  cluster = await CliCluster.start({ nodes: ['node-real'] });
  const etcd = await cluster.client();
  const fakes = { 'node-html': await FakeAgent.start('html'), 'node-liar': await FakeAgent.start('not-a-node'), 'node-silent': await FakeAgent.start('silent') };
  const lease = etcd.lease(3);
  for (const [name, fake] of Object.entries(fakes)) await lease.put(KEYS.node(name)).value(JSON.stringify(tempting(name, fake.address)));
  cluster.writeConfig(fleetYaml('web', 4));

  const nodes = await cluster.dsec(['nodes', '--json']);
  expect(nodes.code, nodes.stderr).toBe(0);
  const listed = new Map((JSON.parse(nodes.stdout) as NodeJson[]).map((node) => [node.node, node]));
  expect([...listed.keys()].sort()).toEqual(['node-html', 'node-liar', 'node-real', 'node-silent']);
  expect(listed.get('node-real')?.health).toBe('healthy');
  const html = listed.get('node-html')!;
  expect(html.health).toBe('unhealthy');
  expect(html.healthReason).toMatch(new RegExp(`node agent at ${fakes['node-html'].address} gave an answer that is not valid`));
  const liar = listed.get('node-liar')!;
  expect(liar.health).toBe('unhealthy');
  expect(liar.healthReason).toBe(`its agent at ${fakes['node-liar'].address} answered GET /v1/node with something that is not a node`);
  const silent = listed.get('node-silent')!;
  expect(silent.health).toBe('unhealthy');
  expect(silent.healthReason).toMatch(new RegExp(`node agent at ${fakes['node-silent'].address} is not reachable: .*no answer within \\d+ ms`));

  const apply = await cluster.dsec(['apply', '--auto-approve']);
  expect(apply.code, apply.stderr).toBe(0);
  const running = await runningIn(cluster.provider(), 'web');
  expect(running.map((sandbox) => sandbox.node)).toEqual(['node-real', 'node-real', 'node-real', 'node-real']);
  const placements = Object.values(await etcd.getAll().prefix(KEYS.placements).strings()).map((text) => JSON.parse(text) as { node: string });
  expect(placements.map((placement) => placement.node)).toEqual(['node-real', 'node-real', 'node-real', 'node-real']);
  // They were only ever asked what they are (and, when refreshing, what they run); never to create or publish anything.
  for (const fake of Object.values(fakes)) {
    expect(fake.requests.filter((request) => !request.startsWith('GET '))).toEqual([]);
  }

  // Not an emptied live view: the fleet is still seen, nothing to do.
  const plan = await cluster.dsec(['plan', '--detailed-exitcode']);
  expect(plan.code, plan.stdout + plan.stderr).toBe(0);
  await lease.revoke();
}, 120_000);
