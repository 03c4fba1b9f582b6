/**
 * A real node agent daemon (the compiled dist/: run `npm run build` first) in
 * a temp root, with a busybox base layer ready to use, and a `dispose` that
 * leaves nothing behind even when the test failed half-way: it destroys the
 * agent's sandboxes, stops it, then sweeps whatever is left (runc containers
 * of this root, mounts under the temp folder, cgroup dirs) and removes the folder.
 *
 * The base layer comes from the real storage-local plugin when it is built;
 * else from a hand-made busybox tree served by a tiny test plugin.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { readdir, rmdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentClient } from '../../core/agent/client.js';
import { agentStatus, startAgentDaemon, stopAgent } from '../../core/agent/daemon.js';
import { agentPaths } from '../../core/agent/layout.js';
import type { LayerRef, SandboxSpec } from '../../core/live.js';
import type { PluginRef } from '../../core/model.js';
import { containerId } from '../../plugins/backend-container/index.js';
import { cgroupMountPoints } from '../../plugins/backend-container/cgroups.js';
import { buildBusyboxTree, BUSYBOX } from './busybox-tree.js';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const FIXED_LAYERS_PLUGIN = path.join(REPO, 'test/helpers/fixed-layers-plugin.mjs');
const STORAGE_LOCAL_BUILT = path.join(REPO, 'dist/plugins/storage-local/index.js');

export interface TestAgentOptions {
  /** The backend plugins to load. @default backend-container (with `backendOptions`) */
  readonly backends?: readonly PluginRef[];
  /** Extra plugins (loaded after the backends and the layer source). */
  readonly plugins?: readonly PluginRef[];
  /** Use the storage-local plugin (default: when it is built) or the hand-made tree. */
  readonly storage?: 'storage-local' | 'fixed';
  /** Options for backend-container. */
  readonly backendOptions?: Record<string, unknown>;
  /** The agent's reaper interval (`--reap-interval-ms`); short for TTL tests. @default the agent's (5000) */
  readonly reapIntervalMs?: number;
}

export class TestAgent {
  readonly client: AgentClient;
  baseLayer!: LayerRef;
  private fixedLayers: Record<string, string> = {};

  private constructor(
    readonly tmp: string,
    readonly root: string,
    private readonly plugins: PluginRef[],
    private readonly reapIntervalMs?: number,
  ) {
    this.client = new AgentClient(agentPaths(root).socket);
  }

  get socket(): string {
    return agentPaths(this.root).socket;
  }

  /**
   * A container sandbox on the base layer: half a CPU, 64 MiB, 64 pids, no
   * network, best-effort, nothing else set; `extra` replaces whole fields.
   */
  spec(id: string, extra: Partial<SandboxSpec> = {}): SandboxSpec {
    return {
      id,
      backend: 'container',
      layers: [this.baseLayer],
      env: {},
      workdir: '/',
      user: 'root',
      resources: { cpu: 0.5, memoryMiB: 64, pids: 64 },
      network: 'none',
      qos: 'best-effort',
      labels: {},
      ...extra,
    };
  }

  /** The runc container id of a sandbox of this agent. */
  containerId(sandboxId: string): string {
    return containerId(this.root, sandboxId);
  }

  static async start(options: TestAgentOptions = {}): Promise<TestAgent> {
    // realpath: /tmp may be a symlink, and mount points are reported resolved.
    const tmp = realpathSync(mkdtempSync(path.join(tmpdir(), 'dsec-agent-')));
    const root = path.join(tmp, 'agent');
    // The real store unless a test asks for the fixed-layers stand-in; tests run after `npm run build`.
    const storage = options.storage ?? 'storage-local';
    if (storage === 'storage-local' && !existsSync(STORAGE_LOCAL_BUILT)) {
      throw new Error(`${STORAGE_LOCAL_BUILT} is missing: run npm run build before the integration tests`);
    }
    const plugins: PluginRef[] = [...(options.backends ?? [{ name: 'backend-container', options: options.backendOptions ?? {} }])];
    let fixedLayers: Record<string, string> = {};
    if (storage === 'storage-local') plugins.unshift({ name: 'storage-local', options: {} });
    else {
      fixedLayers = { 'busybox@1.0.0': buildBusyboxTree(path.join(tmp, 'layers/busybox')) };
      plugins.unshift({ name: FIXED_LAYERS_PLUGIN, options: { layers: fixedLayers } });
    }
    plugins.push(...(options.plugins ?? []));
    const agent = new TestAgent(tmp, root, plugins, options.reapIntervalMs);
    agent.fixedLayers = fixedLayers;
    try {
      await agent.startDaemon();
      agent.baseLayer =
        storage === 'storage-local'
          ? await agent.client.publishLayer({
              ref: 'busybox@1.0.0',
              name: 'busybox',
              version: '1.0.0',
              kind: 'base',
              source: { type: 'busybox', path: BUSYBOX },
            })
          : { name: 'busybox', version: '1.0.0', digest: 'sha256:test-fixed-layer' };
    } catch (error) {
      await agent.dispose();
      throw error;
    }
    return agent;
  }

  /** The layer folders the fixed-layers plugin serves (empty with storage-local). */
  get layerDirs(): Readonly<Record<string, string>> {
    return this.fixedLayers;
  }

  async startDaemon(): Promise<{ pid: number }> {
    return startAgentDaemon({
      root: this.root,
      plugins: this.plugins,
      baseDir: REPO,
      builtins: false,
      timeoutMs: 20_000,
      ...(this.reapIntervalMs !== undefined ? { reapIntervalMs: this.reapIntervalMs } : {}),
    });
  }

  async pid(): Promise<number | null> {
    return (await agentStatus(this.root)).pid;
  }

  /** SIGKILL the agent process (its sandboxes keep running), and wait until it is gone. */
  async kill(): Promise<void> {
    const pid = Number.parseInt(readFileSync(agentPaths(this.root).pidFile, 'utf8'), 10);
    process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 200 && isAlive(pid); i++) await new Promise((resolve) => setTimeout(resolve, 25));
  }

  async stop(): Promise<void> {
    await stopAgent(this.root);
  }

  logText(): string {
    try {
      return readFileSync(agentPaths(this.root).logFile, 'utf8');
    } catch {
      return '';
    }
  }

  /** Destroy every sandbox, stop the agent, sweep leftovers, remove the temp folder. Never throws. */
  async dispose(): Promise<void> {
    const problems: string[] = [];
    const attempt = async (what: string, work: () => Promise<unknown>) => {
      try {
        await work();
      } catch (error) {
        problems.push(`${what}: ${(error as Error).message}`);
      }
    };
    await attempt('destroy sandboxes', async () => {
      if (!(await agentStatus(this.root)).running) return;
      // Pools first: a pool makes a new sandbox for each one destroyed.
      for (const pool of await this.client.listPools()) await this.client.deletePool(pool.fleet, pool.lineage);
      for (const sandbox of await this.client.listSandboxes()) await this.client.destroySandbox(sandbox.id);
    });
    this.client.close();
    await attempt('stop agent', () => stopAgent(this.root));
    await attempt('sweep', () => sweep(this.root, this.tmp));
    await attempt('remove temp', async () => rmSync(this.tmp, { recursive: true, force: true }));
    if (problems.length > 0) console.warn(`TestAgent.dispose: ${problems.join('; ')}`);
  }
}

/** Whatever a crashed test left of this root: containers, mounts, cgroups, a running agent. */
export async function sweep(root: string, tmp: string): Promise<void> {
  const prefix = containerId(root, '');
  for (const id of runcContainers().filter((name) => name.startsWith(prefix))) {
    try {
      execFileSync('runc', ['delete', '--force', id], { stdio: 'ignore' });
    } catch {
      // gone meanwhile
    }
  }
  const mounts = mountPointsUnder(tmp);
  for (const point of mounts) {
    try {
      execFileSync('umount', ['-l', point], { stdio: 'ignore' });
    } catch {
      // already unmounted
    }
  }
  for (const mount of await cgroupMountPoints()) {
    const dsecDir = path.join(mount, 'dsec');
    for (const name of await readdir(dsecDir).catch(() => [] as string[])) {
      if (name.startsWith(prefix)) await rmdir(path.join(dsecDir, name)).catch(() => {});
    }
  }
  const pidFile = agentPaths(root).pidFile;
  if (existsSync(pidFile)) {
    const pid = Number.parseInt(readFileSync(pidFile, 'utf8'), 10);
    if (Number.isInteger(pid) && isAlive(pid)) {
      try {
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        if (cmdline.includes(root)) process.kill(pid, 'SIGKILL');
      } catch {
        // gone
      }
    }
  }
}

/**
 * The ids of every runc container on the machine. `runc list` fails now and
 * then when a container is deleted while it reads the states (other test
 * files run beside this one), so it is asked again.
 */
export function runcContainers(attempts = 5): string[] {
  for (let attempt = 1; ; attempt += 1) {
    try {
      const output = execFileSync('runc', ['list', '--quiet'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
      return output.split('\n').filter(Boolean);
    } catch (error) {
      if (attempt >= attempts) throw error;
    }
  }
}

export function mountPointsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4] ?? '')
    .filter((point) => point === dir || point.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z');
  } catch {
    return false;
  }
}
