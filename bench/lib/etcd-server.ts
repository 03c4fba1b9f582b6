/**
 * A single-member etcd for benchmarks: the `etcd` binary on two free
 * loopback ports (never 2379/2380, a packaged etcd may own them), its data
 * dir and log in a folder the caller owns. The tests' fixture
 * (test/helpers/etcd.ts) is not part of the compiled tree, hence this small
 * twin. `stop()` is idempotent, and a process exit kills it too.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import path from 'node:path';

/** Distinct free loopback ports: all bound at once (port 0) so none is handed out twice, then released. */
export async function freePorts(count: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = createServer();
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', () => resolve());
      });
    }
    return servers.map((server) => {
      const address = server.address();
      if (!address || typeof address === 'string') throw new Error('no port bound');
      return address.port;
    });
  } finally {
    await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  }
}

function healthy(endpoint: string): Promise<boolean> {
  return new Promise((resolve) => {
    execFile(
      'etcdctl',
      ['--endpoints', endpoint, '--dial-timeout', '1s', '--command-timeout', '2s', 'endpoint', 'health'],
      { env: { ...process.env, ETCDCTL_API: '3' }, timeout: 5000 },
      (error) => resolve(!error),
    );
  });
}

export class EtcdServer {
  private constructor(
    readonly endpoint: string,
    private readonly log: string,
    private child: ChildProcess | undefined,
  ) {}

  /** Start etcd with its data and log under `dir`; resolves once it answers a quorum read. */
  static async start(dir: string, timeoutMs = 30_000): Promise<EtcdServer> {
    mkdirSync(dir, { recursive: true });
    const [client, peer] = await freePorts(2);
    const clientUrl = `http://127.0.0.1:${client}`;
    const peerUrl = `http://127.0.0.1:${peer}`;
    const log = path.join(dir, 'etcd.log');
    const fd = openSync(log, 'a');
    let child: ChildProcess;
    try {
      child = spawn(
        'etcd',
        [
          '--name', 'bench',
          '--data-dir', path.join(dir, 'data'),
          '--listen-client-urls', clientUrl,
          '--advertise-client-urls', clientUrl,
          '--listen-peer-urls', peerUrl,
          '--initial-advertise-peer-urls', peerUrl,
          '--initial-cluster', `bench=${peerUrl}`,
          '--logger', 'zap',
          '--log-outputs', 'stderr',
        ],
        { stdio: ['ignore', fd, fd] },
      );
    } finally {
      closeSync(fd);
    }
    child.on('error', () => undefined);
    const server = new EtcdServer(clientUrl, log, child);
    const onExit = () => server.child?.kill('SIGKILL');
    process.once('exit', onExit);
    child.once('exit', () => process.off('exit', onExit));
    const deadline = Date.now() + timeoutMs;
    while (!(await healthy(clientUrl))) {
      if (child.exitCode !== null || child.signalCode !== null || Date.now() > deadline) {
        await server.stop();
        throw new Error(`etcd did not start on ${clientUrl}; its log:\n${server.tail()}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return server;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Kill it and wait until it is gone. */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGKILL');
    await exited;
  }

  tail(lines = 30): string {
    try {
      return readFileSync(this.log, 'utf8').split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }
}
