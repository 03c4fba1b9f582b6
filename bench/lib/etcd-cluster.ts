/**
 * A real etcd (the `etcd` binary, 3.4) for tests and benchmarks (tests
 * import it as test/helpers/etcd.ts; it lives here because bench/ is part of
 * the compiled tree and test/ is not): one or three members on free loopback ports (never 2379/2380, a packaged etcd may own them), each
 * with its own data dir and log in one temp folder, short heartbeat and
 * election timings so a killed member's absence is noticed quickly.
 *
 *   const etcd = await EtcdCluster.start({ members: 3 });
 *   afterAll(() => etcd.stop());
 *   etcd.endpoints            // ['http://127.0.0.1:PORT', ...]
 *   await etcd.kill(1);       // SIGKILL, like a crashed machine
 *   await etcd.restart(1);    // same data dir and flags, back in the cluster
 *
 * `stop()` kills every member and removes the folder; it is idempotent and
 * also runs on process exit, so a failed test leaves no etcd behind.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';

export interface EtcdClusterOptions {
  /** How many members. @default 1 */
  readonly members?: 1 | 3;
  /** How long start/restart wait for health. @default 30000 */
  readonly readyTimeoutMs?: number;
}

interface Member {
  readonly name: string;
  readonly dir: string;
  readonly clientUrl: string;
  readonly peerUrl: string;
  readonly log: string;
  process?: ChildProcess;
}

const live = new Set<EtcdCluster>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Synchronous on purpose: 'exit' handlers cannot await.
  process.on('exit', () => {
    for (const cluster of live) cluster.stopSync();
  });
}

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

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** `etcdctl endpoint health` for one endpoint: true when it answers a quorum read. */
function endpointHealthy(endpoint: string): Promise<boolean> {
  return new Promise((resolve) => {
    execFile(
      'etcdctl',
      ['--endpoints', endpoint, '--dial-timeout', '1s', '--command-timeout', '2s', 'endpoint', 'health'],
      { env: { ...process.env, ETCDCTL_API: '3' }, timeout: 5000 },
      (error) => resolve(!error),
    );
  });
}

export class EtcdCluster {
  private stopped = false;

  private constructor(
    /** The temp folder holding every member's data dir and log. */
    readonly dir: string,
    private readonly members: Member[],
    private readonly flags: (member: Member, state: 'new' | 'existing') => string[],
    private readonly readyTimeoutMs: number,
  ) {}

  static async start(options: EtcdClusterOptions = {}): Promise<EtcdCluster> {
    installExitHook();
    const count = options.members ?? 1;
    const dir = mkdtempSync(path.join(tmpdir(), 'dsec-etcd-'));
    const ports = await freePorts(count * 2);
    const members: Member[] = Array.from({ length: count }, (_, i) => {
      const memberDir = path.join(dir, `member-${i}`);
      mkdirSync(memberDir, { recursive: true });
      return {
        name: `m${i}`,
        dir: memberDir,
        clientUrl: `http://127.0.0.1:${ports[i * 2]}`,
        peerUrl: `http://127.0.0.1:${ports[i * 2 + 1]}`,
        log: path.join(memberDir, 'etcd.log'),
      };
    });
    const initialCluster = members.map((member) => `${member.name}=${member.peerUrl}`).join(',');
    const token = `dsec-test-${randomBytes(6).toString('hex')}`;
    const flags = (member: Member, state: 'new' | 'existing'): string[] => [
      '--name', member.name,
      '--data-dir', path.join(member.dir, 'data'),
      '--listen-client-urls', member.clientUrl,
      '--advertise-client-urls', member.clientUrl,
      '--listen-peer-urls', member.peerUrl,
      '--initial-advertise-peer-urls', member.peerUrl,
      '--initial-cluster', initialCluster,
      '--initial-cluster-state', state,
      '--initial-cluster-token', token,
      '--heartbeat-interval', '50',
      '--election-timeout', '500',
      '--logger', 'zap',
      '--log-outputs', 'stderr',
    ];
    const cluster = new EtcdCluster(dir, members, flags, options.readyTimeoutMs ?? 30_000);
    live.add(cluster);
    try {
      for (const member of members) cluster.spawnMember(member, 'new');
      await Promise.all(members.map((member) => cluster.waitHealthy(member)));
    } catch (error) {
      await cluster.stop();
      throw error;
    }
    return cluster;
  }

  /** The client URLs, one per member (a killed member's stays in the list). */
  get endpoints(): string[] {
    return this.members.map((member) => member.clientUrl);
  }

  /** The pid of member `i` while it runs. */
  pid(i: number): number | undefined {
    return this.member(i).process?.pid;
  }

  /** The member's log (stdout and stderr), for failure messages. */
  log(i: number): string {
    try {
      return readFileSync(this.member(i).log, 'utf8');
    } catch {
      return '';
    }
  }

  /** SIGKILL member `i` and wait until it is gone. */
  async kill(i: number): Promise<void> {
    const member = this.member(i);
    const child = member.process;
    member.process = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGKILL');
    await exited;
  }

  /** Start member `i` again on its data dir and ports, and wait until it serves. */
  async restart(i: number): Promise<void> {
    if (this.stopped) throw new Error('the etcd cluster was stopped');
    const member = this.member(i);
    if (member.process) await this.kill(i);
    this.spawnMember(member, 'existing');
    await this.waitHealthy(member);
  }

  /** Kill every member and remove the temp folder. Idempotent. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    for (let i = 0; i < this.members.length; i++) await this.kill(i);
    this.stopSync();
  }

  /** The exit-hook form of stop: SIGKILL without waiting, remove the folder. */
  stopSync(): void {
    this.stopped = true;
    live.delete(this);
    for (const member of this.members) {
      try {
        member.process?.kill('SIGKILL');
      } catch {
        // already gone
      }
      member.process = undefined;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  private member(i: number): Member {
    const member = this.members[i];
    if (!member) throw new Error(`no etcd member ${i} (the cluster has ${this.members.length})`);
    return member;
  }

  private spawnMember(member: Member, state: 'new' | 'existing'): void {
    const log = openSync(member.log, 'a');
    try {
      member.process = spawn('etcd', this.flags(member, state), { stdio: ['ignore', log, log] });
    } finally {
      closeSync(log);
    }
    member.process.on('error', () => undefined);
  }

  private async waitHealthy(member: Member): Promise<void> {
    const deadline = Date.now() + this.readyTimeoutMs;
    for (;;) {
      const child = member.process;
      if (!child || child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`etcd member ${member.name} exited while starting; its log:\n${this.tail(member)}`);
      }
      if (await endpointHealthy(member.clientUrl)) return;
      if (Date.now() > deadline) {
        throw new Error(`etcd member ${member.name} not healthy after ${this.readyTimeoutMs} ms; its log:\n${this.tail(member)}`);
      }
      await sleep(100);
    }
  }

  private tail(member: Member): string {
    try {
      return readFileSync(member.log, 'utf8').split('\n').slice(-30).join('\n');
    } catch {
      return '(no log)';
    }
  }
}
