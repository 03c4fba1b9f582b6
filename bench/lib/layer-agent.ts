/**
 * A real node agent for the layer benchmarks: the compiled daemon, in a
 * temp root, with the storage-3fs plugin pointed at a folder standing in for
 * the 3FS mount and the container backend. Sandboxes are made and destroyed
 * through the agent's API (AgentClient), with bounded parallelism, and
 * "ready" means what a user waits for: created (running) and answering an
 * exec of `true`.
 *
 * `dispose` leaves nothing behind even after a failure half-way: it
 * destroys the agent's sandboxes, stops it, then sweeps whatever is left
 * (runc containers of this root and their cgroups, mounts and loop devices
 * under the work folder).
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentClient } from '../../core/agent/client.js';
import { agentStatus, startAgentDaemon, stopAgent } from '../../core/agent/daemon.js';
import { agentPaths } from '../../core/agent/layout.js';
import { detachLoop, loopsBackedBy, mountsUnder, unmount } from '../../core/layers/index.js';
import type { LayerRecord, LayerRef, SandboxInfo, SandboxSpec, StorageStats } from '../../core/live.js';
import type { LayerModel, PluginRef } from '../../core/model.js';
import { BUILTIN_PLUGINS } from '../../core/plugins.js';
import { removeCgroupDirs } from '../../plugins/backend-container/cgroups.js';
import { cgroupsPathOf, containerId } from '../../plugins/backend-container/index.js';
import { findRuntime, runRuntime } from '../../plugins/backend-container/runtime.js';
import { pool } from './measure.js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** The package root, from dist/bench/lib (compiled) or bench/lib (tsx). */
export const PACKAGE_ROOT = path.resolve(here, here.split(path.sep).includes('dist') ? '../../..' : '../..');

/** storage-3fs by name when it is a built-in, else by the path of its module beside this one. */
export function storage3fsRef(options: Record<string, unknown>): PluginRef {
  if (BUILTIN_PLUGINS.includes('storage-3fs')) return { name: 'storage-3fs', options };
  const dir = path.resolve(here, '../../plugins/storage-3fs');
  const file = ['index.js', 'index.ts'].map((name) => path.join(dir, name)).find((candidate) => existsSync(candidate));
  if (!file) throw new Error(`the storage-3fs plugin is not there (${dir}): has it landed, and was npm run build run?`);
  return { name: file, options };
}

/** A create or destroy that takes longer is a hang: fail (and clean up) rather than wait forever. */
const REQUEST_TIMEOUT_MS = 120_000;

/** Small limits, so 32 sandboxes fit any machine. */
const RESOURCES = { cpu: 0.25, memoryMiB: 128, pids: 64 };

/** A container sandbox on `layers` (labelled `bench: layers`); `overrides` replace any field (labels whole). */
export function sandboxSpec(
  id: string,
  layers: readonly LayerRef[],
  labels: Record<string, string> = {},
  overrides: Partial<SandboxSpec> = {},
): SandboxSpec {
  return {
    id,
    backend: 'container',
    layers,
    env: {},
    workdir: '/',
    user: 'root',
    resources: RESOURCES,
    network: 'none',
    qos: 'best-effort',
    labels: { bench: 'layers', ...labels },
    ...overrides,
  };
}

export const refOf = (record: LayerRecord): LayerRef => ({ name: record.name, version: record.version, digest: record.digest });

export class LayerAgent {
  readonly client: AgentClient;

  private constructor(
    /** The work folder everything of this agent lives under. */
    readonly work: string,
    readonly root: string,
    private readonly plugins: PluginRef[],
  ) {
    this.client = new AgentClient(agentPaths(root).socket);
  }

  /** Start an agent at `<work>/agent` with these plugins (and no built-ins: the list says it all). */
  static async start(work: string, plugins: PluginRef[]): Promise<LayerAgent> {
    const agent = new LayerAgent(work, path.join(work, 'agent'), plugins);
    await startAgentDaemon({ root: agent.root, plugins, baseDir: PACKAGE_ROOT, builtins: false, timeoutMs: 30_000 });
    return agent;
  }

  /**
   * Publish through the agent, given up after `timeoutMs` (a GiB layer takes
   * ~30-60 s here): a publish that never answers must fail the benchmark
   * and let it clean up, not hang it.
   */
  publish(layer: LayerModel, timeoutMs = 15 * 60_000): Promise<LayerRecord> {
    return this.client.request<LayerRecord>('POST', '/v1/layers', { layer }, timeoutMs);
  }

  storage(): Promise<StorageStats> {
    return this.client.storageStats();
  }

  /** Create one sandbox and wait until it answers `true`. */
  async startReady(spec: SandboxSpec): Promise<void> {
    const info = await this.client.request<SandboxInfo>('POST', '/v1/sandboxes', { spec }, REQUEST_TIMEOUT_MS);
    if (info.status !== 'running') throw new Error(`sandbox ${spec.id} is ${info.status} after create: ${info.error ?? ''}`);
    const result = await this.client.exec(spec.id, { cmd: ['true'], timeoutMs: 30_000 });
    if (result.exitCode !== 0) throw new Error(`exec true in ${spec.id} exited ${result.exitCode ?? result.signal}: ${result.stderr}`);
  }

  /** Start every spec (`parallel` at a time) and wait until all are ready; resolves to the wall seconds. */
  startAllReady(specs: readonly SandboxSpec[], parallel: number): Promise<number> {
    return pool(specs.length, parallel, (index) => this.startReady(specs[index]));
  }

  async destroy(ids: readonly string[], parallel: number): Promise<void> {
    await pool(ids.length, parallel, async (index) => {
      await this.client.request('DELETE', `/v1/sandboxes/${encodeURIComponent(ids[index])}`, undefined, REQUEST_TIMEOUT_MS);
    });
  }

  /** The backend's files of a sandbox (config.json, ...). */
  sandboxDir(id: string): string {
    return path.join(agentPaths(this.root).sandboxes, id);
  }

  /** The read-only lower dirs the agent resolved for a sandbox, bottom to top. */
  lowerDirsOf(id: string): string[] {
    const record = JSON.parse(readFileSync(path.join(this.sandboxDir(id), 'record.json'), 'utf8')) as { lowerDirs: string[] };
    return record.lowerDirs;
  }

  logTail(lines = 30): string {
    try {
      return readFileSync(agentPaths(this.root).logFile, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  /** Destroy every sandbox, stop the agent, sweep leftovers. Never throws; returns what could not be undone. */
  async dispose(): Promise<string[]> {
    const problems: string[] = [];
    const attempt = async (what: string, work: () => Promise<unknown>) => {
      try {
        await work();
      } catch (error) {
        problems.push(`${what}: ${(error as Error).message}`);
      }
    };
    await attempt('destroying sandboxes', async () => {
      if (!(await agentStatus(this.root)).running) return;
      const ids = (await this.client.listSandboxes()).map((sandbox) => sandbox.id);
      await this.destroy(ids, 8);
    });
    this.client.close();
    await attempt('stopping the agent', () => stopAgent(this.root));
    await attempt('sweeping', () => sweepAgentLeftovers(this.root, this.work));
    return problems;
  }
}

/** Whatever a failure left of an agent root: runc containers and their cgroups, mounts and loop devices under `work`. */
export async function sweepAgentLeftovers(root: string, work: string): Promise<void> {
  const runtime = findRuntime('runc');
  const prefix = containerId(root, '');
  const listed = await runRuntime(runtime, ['list', '--quiet']).catch(() => undefined);
  for (const id of (listed?.stdout ?? '').split('\n').filter((line) => line.startsWith(prefix))) {
    await runRuntime(runtime, ['delete', '--force', id]).catch(() => undefined);
    await removeCgroupDirs(cgroupsPathOf(id)).catch(() => undefined);
  }
  await sweepMounts(work);
}

/** Unmount everything under `work` (deepest first, lazily if busy) and detach loop devices of its files. */
export async function sweepMounts(work: string): Promise<void> {
  for (const mount of await mountsUnder(work)) {
    await unmount(mount.target, { attempts: 3 }).catch(() => lazyUnmount(mount.target));
  }
  for (const loop of await loopsBackedBy([work]).catch(() => [])) await detachLoop(loop.device).catch(() => undefined);
}

/** `umount -l`: detach a mount still busy; never throws. */
function lazyUnmount(target: string): Promise<void> {
  return new Promise((resolve) => execFile('umount', ['-l', target], () => resolve()));
}
