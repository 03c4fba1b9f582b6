/**
 * A cluster agent daemon for tests (the compiled dist/: run `npm run build`
 * first): its own temp root, token file and loopback port, registered in the
 * given etcd. `dispose` destroys its sandboxes, stops it, sweeps whatever is
 * left (containers, mounts, a killed daemon) and removes the folder; it never throws.
 */
import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { AgentClient } from '../../../core/agent/client.js';
import { startClusterAgent, type ClusterAgentOptions } from '../../../core/agent/cluster-daemon.js';
import { agentStatus, stopAgent } from '../../../core/agent/daemon.js';
import { agentPaths } from '../../../core/agent/layout.js';
import type { PluginRef } from '../../../core/model.js';
import { REPO, sweep } from '../../helpers/agent-fixture.js';
import { freePorts } from '../../helpers/etcd.js';

export const TOKEN = 'test-cluster-token-0123456789abcdef';
export const INERT_PLUGINS: PluginRef[] = [{ name: path.join(REPO, 'test/helpers/inert-backend-plugin.mjs'), options: {} }];
export const CONTAINER_PLUGINS: PluginRef[] = [
  { name: 'storage-local', options: {} },
  { name: 'backend-container', options: {} },
];

export class ClusterNode {
  private constructor(
    readonly tmp: string,
    readonly root: string,
    readonly tokenFile: string,
    readonly options: ClusterAgentOptions,
    public address: string,
    public pid: number,
  ) {}

  /** Start a node named `name` in `etcd`; `extra` overrides any option (the root, the port, the token file stay its own unless given). */
  static async start(name: string, etcd: readonly string[], extra: Partial<ClusterAgentOptions> = {}): Promise<ClusterNode> {
    const tmp = realpathSync(mkdtempSync(path.join(tmpdir(), 'dsec-cluster-node-')));
    const tokenFile = path.join(tmp, 'token');
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    const [port] = await freePorts(1);
    const options: ClusterAgentOptions = {
      root: path.join(tmp, 'agent'),
      name,
      etcd,
      listen: `127.0.0.1:${port}`,
      tokenFile,
      plugins: INERT_PLUGINS,
      builtins: false,
      baseDir: REPO,
      ...extra,
    };
    const node = new ClusterNode(tmp, options.root, tokenFile, options, '', 0);
    try {
      const started = await startClusterAgent(options);
      node.address = started.address;
      node.pid = started.pid;
    } catch (error) {
      await node.dispose();
      throw error;
    }
    return node;
  }

  /** A TCP client with the right token (or `token`); the caller closes it. */
  client(token = TOKEN, timeoutMs = 10_000): AgentClient {
    return new AgentClient({ url: `http://${this.address}`, token }, { timeoutMs });
  }

  logText(): string {
    try {
      return readFileSync(agentPaths(this.root).logFile, 'utf8');
    } catch {
      return '';
    }
  }

  /** SIGKILL the daemon (no lease revoke) and wait until it is gone. */
  async kill(): Promise<void> {
    process.kill(this.pid, 'SIGKILL');
    for (let i = 0; i < 200 && isAlive(this.pid); i++) await new Promise((resolve) => setTimeout(resolve, 25));
  }

  async stop(): Promise<void> {
    await stopAgent(this.root);
  }

  async dispose(): Promise<void> {
    const problems: string[] = [];
    try {
      if ((await agentStatus(this.root)).running) {
        const client = new AgentClient(agentPaths(this.root).socket, { timeoutMs: 20_000 });
        try {
          // Pools first: a pool makes a new sandbox for each one destroyed.
          for (const pool of await client.listPools()) await client.deletePool(pool.fleet, pool.lineage);
          for (const sandbox of await client.listSandboxes()) await client.destroySandbox(sandbox.id);
        } finally {
          client.close();
        }
      }
    } catch (error) {
      problems.push(`destroy sandboxes: ${(error as Error).message}`);
    }
    await stopAgent(this.root).catch((error: Error) => problems.push(`stop: ${error.message}`));
    await sweep(this.root, this.tmp).catch((error: Error) => problems.push(`sweep: ${error.message}`));
    rmSync(this.tmp, { recursive: true, force: true });
    if (problems.length > 0) console.warn(`ClusterNode.dispose: ${problems.join('; ')}`);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z');
  } catch {
    return false;
  }
}
