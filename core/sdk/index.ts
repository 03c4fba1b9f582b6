/**
 * The SDK: a typed client for a project's sandboxes, for programs (RL
 * harnesses, evaluators) that claim and drive sandboxes directly rather than
 * through `dsec apply`. It goes where the project's config says: its own
 * node agent (`provider: local`, the default; started on first use), or the
 * agents of a cluster found through etcd (`provider: { cluster: ... }`),
 * the same way the CLI does.
 *
 *   const dsec = await connect({ dir: '/path/to/project' });
 *   const box = await dsec.create({ backend: 'container', layers: [base] });
 *   const { stdout } = await dsec.exec(box.id, 'python -V');
 *   await dsec.writeFile(box.id, '/work/main.py', 'print(1)\n');
 *   const bytes = await dsec.readFile(box.id, '/work/out.json');          // a Buffer
 *   const run = await dsec.invoke('graders', { runtime: 'python3', code: 'print(2 + 2)' });   // an FnCall fleet
 *   await dsec.snapshot(box.id, { as: 'solved@1.0.0', exclude: ['/root/.token'] });   // local only
 *   await dsec.pause({ labels: { job: 'rollout-17' } });   // trainer preempted
 *   await dsec.resume({ labels: { job: 'rollout-17' } });
 *   await dsec.destroy(box.id);
 *   await dsec.close();
 */
import path from 'node:path';
import { asSandboxUpdate, type AgentClient } from '../agent/client.js';
import { findConfigFile } from '../config/index.js';
import { DsecError, isDsecError } from '../errors.js';
import {
  BACKEND_OPERATIONS,
  DEFAULT_READ_FILE_BYTES,
  type BackendOperation,
  type BatchOutcome,
  type ExecRequest,
  type ExecResult,
  type FunctionResult,
  type FunctionTask,
  type LayerRecord,
  type NodeInfo,
  type NodeUsage,
  type ProcessSummary,
  type ReleaseRequest,
  type ReleaseResult,
  type SandboxInfo,
  type SandboxUpdate,
  type SessionInfo,
} from '../live.js';
import type { LayerModel, PluginRef, Resources } from '../model.js';
import { createProjectProvider, isLocalProvider, loadProject, type ProjectProvider } from '../project.js';
import type { Provider } from '../provider.js';
import { createLocalProvider } from '../../providers/local/index.js';
import { ProcessClient } from '../agent/client-processes.js';
import { execRequestOf, needsStream, openSession, startBackground, streamExec, type ExecBytesResult, type ExecOptions, type ProcessHandle, type Session } from './processes.js';
import {
  acquireRequest,
  sandboxQuery,
  seconds,
  type AcquireOptions,
  type SandboxQuery,
} from './rollouts.js';
import {
  execRequest,
  sandboxSpec,
  sandboxTarget,
  writeFileRequest,
  type CreateSandboxInput,
  type SandboxSelector,
  type SnapshotOptions,
  type WriteFileOptions,
} from './requests.js';

export { acquireRequest, type AcquireOptions, type SandboxQuery } from './rollouts.js';
export { ProcessHandle, Session, type ExecBytesResult, type ExecOptions, type SessionRunOptions, type StdinSource } from './processes.js';
export {
  DEFAULT_SANDBOX_RESOURCES,
  execRequest,
  sandboxSpec,
  sandboxTarget,
  writeFileRequest,
  type CreateSandboxInput,
  type SandboxSelector,
  type SnapshotOptions,
  type WriteFileOptions,
} from './requests.js';

export interface ConnectOptions {
  /** The project folder (where dsec.yaml or dsec.ts is; without one, the local provider's defaults). @default process.cwd() */
  readonly dir?: string;
  /** The config file, relative to `dir`, instead of looking for dsec.ts / dsec.yaml. */
  readonly file?: string;
  /** Local provider: the project's state folder; its agent lives in `<stateDir>/agent`. @default the config's, else `<dir>/.dsec` */
  readonly stateDir?: string;
  /** Talk to the agent on this socket instead (never started by the SDK; the config is not read). */
  readonly socket?: string;
  /** Local provider: start the project's agent when it is not running. @default true */
  readonly autoStart?: boolean;
  /** Local provider: plugins an agent started by the SDK loads on top of the built-ins. @default the config's */
  readonly plugins?: readonly PluginRef[];
  /** Told what the provider did that was not asked for (an agent restarted, a sandbox placed elsewhere after a refusal). */
  readonly notice?: (message: string) => void;
}

/**
 * A project's sandboxes through its provider. Everything the Provider
 * interface has a word for works on both providers; what talks to one node
 * agent directly (`node`, `snapshot`) is local-only and, on a cluster,
 * throws DSEC_PROVIDER_UNSUPPORTED naming the operation and the provider.
 */
export class DsecClient {
  constructor(private readonly provider: Provider) {}

  /** `local` or `cluster`: where the project's config says its sandboxes are. */
  get providerName(): string {
    return this.provider.name;
  }

  /** The local agent's socket; undefined on a cluster (its agents are reached over TCP). */
  get socket(): string | undefined {
    return isLocalProvider(this.provider) ? this.provider.client.socketPath : undefined;
  }

  /** The local agent's node. On a cluster use `listNodes()`. */
  async node(): Promise<NodeInfo> {
    return (await this.agent('node()', 'a cluster has many nodes; use listNodes()')).node();
  }

  /** Every node: the local agent's, or each registered cluster node with its address and health (unhealthy ones with the reason). */
  async listNodes(): Promise<NodeInfo[]> {
    return this.provider.nodes();
  }

  /**
   * The sandboxes: `list()`, `list({ labels: { job: 'r7' } })` (their own
   * labels and their claims'), `list({ holder: 'trainer-3' })` (the ones a
   * holder has: a preempted trainer finds its rollouts again). A plain labels
   * object (`list({ team: 'rl' })`) is still taken as labels.
   */
  async list(query: SandboxQuery | Readonly<Record<string, string>> = {}): Promise<SandboxInfo[]> {
    const { labels, holder } = sandboxQuery(query);
    return this.provider.listSandboxes(labels, holder !== undefined ? { holder } : {});
  }

  /**
   * Take a ready sandbox of a fleet's warm pool for `holder` (a rollout),
   * atomically: never one another holder has; callers waiting are served
   * first come, first served, for up to `waitMs`; the pool makes a fresh one
   * in its place. `ttl` (seconds, or "30m"): the claim lapses unless renewed
   * and the sandbox is recycled. DSEC_POOL_EXHAUSTED (with the pool's ready,
   * claimed and creating counts) when none was free in time.
   */
  async acquire(fleet: string, options: AcquireOptions): Promise<SandboxInfo> {
    return this.provider.acquireSandbox(fleet, acquireRequest(options));
  }

  /**
   * Give a sandbox back. By default it is recycled (destroyed: nothing its
   * holder wrote reaches the next one; its pool already made a fresh one);
   * `{ keep: true }` keeps it, unclaimed, for inspection or a later turn
   * (never handed out by acquire again). `holder`: only if that holder has it.
   */
  async release(id: string, options: ReleaseRequest = {}): Promise<ReleaseResult> {
    return this.provider.releaseSandbox(id, options);
  }

  /** The holder extends its claim: `ttl` (seconds, or "30m") from now. */
  async renew(id: string, options: { holder: string; ttl: number | string }): Promise<SandboxInfo> {
    return this.provider.renewClaim(id, { holder: options.holder, ttlSeconds: seconds(options.ttl, 'ttl') });
  }

  /** One sandbox; DSEC_SANDBOX_NOT_FOUND when no node has it. */
  async get(id: string): Promise<SandboxInfo> {
    if (isLocalProvider(this.provider)) {
      await this.provider.ensureAgent();
      return this.provider.client.getSandbox(id);
    }
    // The cluster's view of it: as its node reports it, or `stopped` with the reason when its node is gone.
    const found = (await this.provider.listSandboxes()).find((sandbox) => sandbox.id === id);
    if (!found) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
    return found;
  }

  /** Create and start a sandbox (on a cluster: placed through the `place` hook); resolves once it runs. Idempotent on `id`. */
  async create(input: CreateSandboxInput): Promise<SandboxInfo> {
    return this.provider.createSandbox(sandboxSpec(input));
  }

  /**
   * Run a command in a sandbox, in its persistent state: `exec(id, 'ls')`
   * (through /bin/sh -c) or `exec(id, ['ls', '-l'])`. Output streams to
   * `onStdout`/`onStderr` as it comes; `stdin` may be a stream (fed as it
   * comes); `output: 'buffer'` gives the bytes unchanged; `signal` kills it;
   * `background: true` answers a ProcessHandle at once (it outlives the call).
   */
  exec(id: string, command: string | readonly string[] | ExecRequest, options: ExecOptions & { background: true }): Promise<ProcessHandle>;
  exec(id: string, command: string | readonly string[] | ExecRequest, options: ExecOptions & { output: 'buffer' }): Promise<ExecBytesResult>;
  exec(id: string, command: string | readonly string[] | ExecRequest, options?: ExecOptions): Promise<ExecResult>;
  async exec(id: string, command: string | readonly string[] | ExecRequest, options: ExecOptions = {}): Promise<ExecResult | ExecBytesResult | ProcessHandle> {
    const { cmd, ...inline } = execRequest(command);
    const merged = { ...inline, ...options } as ExecOptions;
    if (merged.background) return startBackground(this.provider, id, cmd, merged);
    if (needsStream(merged)) return streamExec(this.provider, id, cmd, merged);
    const request = execRequestOf(cmd, merged);
    const result = merged.signal ? await (await this.provider.sandboxAgent(id)).exec(id, request, { signal: merged.signal }) : await this.provider.exec(id, request);
    if (merged.output !== 'buffer') return result;
    return { ...result, stdout: Buffer.from(result.stdout, 'base64'), stderr: Buffer.from(result.stderr, 'base64') };
  }

  /** The background commands of a sandbox (running or finished, until forgotten). */
  async processes(id: string): Promise<ProcessSummary[]> {
    return new ProcessClient(await this.provider.sandboxAgent(id)).list(id);
  }

  /**
   * A persistent shell in a sandbox: `const sh = await dsec.session(id)`,
   * `await sh.run('cd repo && export A=1')`, `await sh.run('pwd; echo $A')`.
   * The sandbox's bash when it has one, else sh.
   */
  async session(id: string, options: { cwd?: string; env?: Readonly<Record<string, string>>; shell?: string } = {}): Promise<Session> {
    return openSession(this.provider, id, options);
  }

  /** The sessions open in a sandbox. */
  async sessions(id: string): Promise<SessionInfo[]> {
    return new ProcessClient(await this.provider.sandboxAgent(id)).sessions(id);
  }

  /**
   * One file from inside a sandbox, as bytes (a paused sandbox is resumed
   * first). The path is absolute inside the sandbox and resolved there: a
   * symlink planted inside never leads out of it. Missing: DSEC_FILE_NOT_FOUND;
   * bigger than `maxBytes` (16 MiB by default, at most 32 MiB):
   * DSEC_FILE_TOO_LARGE; a backend without file access (see `capabilities`):
   * DSEC_BACKEND_UNSUPPORTED naming it.
   */
  async readFile(id: string, filePath: string, options: { maxBytes?: number } = {}): Promise<Buffer> {
    const content = await this.provider.readFile(id, { path: filePath, maxBytes: options.maxBytes ?? DEFAULT_READ_FILE_BYTES });
    return Buffer.from(content.data, 'base64');
  }

  /** Create or replace one file inside a sandbox (parent folders created, owned by the sandbox's user); a string is written as utf-8. */
  async writeFile(id: string, filePath: string, data: Buffer | Uint8Array | string, options: WriteFileOptions = {}): Promise<void> {
    await this.provider.writeFile(id, writeFileRequest(id, filePath, data, options));
  }

  /**
   * Run a stateless task on an FnCall fleet's pool (`backend: fncall`): it
   * waits for a free worker, runs, and the worker is reset. A task past its
   * timeout is a result with `timedOut: true`, not a throw. A fleet without
   * workers: DSEC_FUNCTION_NO_WORKERS.
   */
  async invoke(fleet: string, task: FunctionTask): Promise<FunctionResult> {
    return this.provider.invokeFunction(fleet, task);
  }

  /**
   * What each backend can do beyond create and destroy (`exec`, `readFile`,
   * `writeFile`, `pause`, `resume`, `snapshot`, `update`, `usage`,
   * `invoke`), as the nodes report them from the plugins they run: with a
   * backend, its operations (the union over healthy nodes; empty when no node
   * runs it). A call a backend lacks fails with DSEC_BACKEND_UNSUPPORTED.
   */
  async capabilities(): Promise<Record<string, BackendOperation[]>>;
  async capabilities(backend: string): Promise<BackendOperation[]>;
  async capabilities(backend?: string): Promise<Record<string, BackendOperation[]> | BackendOperation[]> {
    const merged = capabilitiesOf(await this.provider.nodes());
    return backend === undefined ? merged : merged[backend] ?? [];
  }

  /**
   * Change a live sandbox in place: `{ resources?, ttl?, density? }` (a bare
   * `{ cpu, memoryMiB, pids }` is taken as resources). `ttl: {}` removes its
   * lifetime limits; density.memorySharing cannot change on a live sandbox.
   */
  async update(id: string, change: SandboxUpdate | Partial<Resources>): Promise<SandboxInfo> {
    return this.provider.updateSandbox(id, asSandboxUpdate(change));
  }

  /**
   * Freeze sandboxes and reclaim their memory: `pause('id')`, `pause(['a', 'b'])`
   * or `pause({ labels: { job: 'rollout-17' } })`. An exec or file call to a
   * paused sandbox resumes it first. Goes on past a failure: one outcome per
   * sandbox (`ok: false` with the error's code, e.g. DSEC_SANDBOX_BUSY while an
   * exec runs in it); throws only when the agent cannot be asked at all.
   */
  async pause(selector: SandboxSelector): Promise<BatchOutcome[]> {
    return this.provider.pauseSandboxes(sandboxTarget(selector));
  }

  /** Thaw paused sandboxes (their memory prefetched), selected as for `pause`; one outcome per sandbox. */
  async resume(selector: SandboxSelector): Promise<BatchOutcome[]> {
    return this.provider.resumeSandboxes(sandboxTarget(selector));
  }

  /**
   * Hold a sandbox for `holder` (a job or rollout): while the claim lasts its
   * fleet's ttl does not reap it. With `ttlSeconds` the claim itself ends then
   * and the sandbox is reaped (a fleet's re-created). Throws
   * DSEC_SANDBOX_CLAIMED when another holder has it.
   */
  async claim(id: string, holder: string, options: { ttlSeconds?: number } = {}): Promise<SandboxInfo> {
    return this.provider.claimSandbox(id, holder, options.ttlSeconds);
  }


  /**
   * Each node's usage: sandboxes by backend and state, requested vs allocatable
   * vs used CPU and memory, shared and reclaimed memory, swap, QoS (`dsec nodes`).
   * On a cluster, one report per healthy node.
   */
  async nodes(): Promise<NodeUsage[]> {
    return this.provider.nodeUsage();
  }

  /** Stop and remove a sandbox. Idempotent. */
  async destroy(id: string): Promise<void> {
    await this.provider.destroySandbox(id);
  }

  /**
   * Turn a sandbox's writable layer into a published layer `as` (name@version,
   * immutable like every layer), usable at once by an environment that
   * declares it `published: {}`. `exclude`: absolute paths inside the sandbox
   * (secrets, build residue) that must not be in the layer. Local only: on a
   * cluster the layer would exist on one node alone.
   */
  async snapshot(id: string, options: SnapshotOptions): Promise<LayerRecord> {
    const reason = 'the layer would be published on the sandbox\'s node alone, and sandboxes stacked on it could not be placed elsewhere';
    return (await this.agent('snapshot', reason)).snapshotSandbox(id, options);
  }

  /** The published layers (on a cluster: those every healthy node holds). */
  async layers(): Promise<LayerRecord[]> {
    if (isLocalProvider(this.provider)) {
      await this.provider.ensureAgent();
      return this.provider.client.listLayers();
    }
    return [...(await this.provider.refresh()).layers];
  }

  /** Publish a layer (on a cluster: on every healthy node). */
  async publishLayer(layer: LayerModel): Promise<LayerRecord> {
    return this.provider.publishLayer(layer);
  }

  /** Close connections. The agents and their sandboxes keep running. */
  async close(): Promise<void> {
    await this.provider.close();
  }

  /** The local agent, for what only it can do; on another provider DSEC_PROVIDER_UNSUPPORTED saying why. */
  private async agent(operation: string, reason: string): Promise<AgentClient> {
    if (!isLocalProvider(this.provider)) throw new DsecError('DSEC_PROVIDER_UNSUPPORTED', { operation, provider: this.provider.name, reason });
    await this.provider.ensureAgent();
    return this.provider.client;
  }
}

/**
 * Connect to a project's sandboxes where its config says they are, and make
 * sure they can be reached: the local agent answers (started unless
 * `autoStart: false`; else DSEC_AGENT_UNREACHABLE), or etcd answers
 * (DSEC_ETCD_UNREACHABLE naming the endpoints). A bad config is
 * DSEC_CONFIG_INVALID, as in the CLI.
 */
export async function connect(options: ConnectOptions = {}): Promise<DsecClient> {
  const provider = await openProvider(options);
  try {
    // Up front, so a provider that cannot be reached is reported by connect itself.
    if (isLocalProvider(provider)) await provider.ensureAgent();
    else await provider.etcd();
  } catch (error) {
    await provider.close().catch(() => undefined);
    throw error;
  }
  return new DsecClient(provider);
}

async function openProvider(options: ConnectOptions): Promise<ProjectProvider> {
  const dir = path.resolve(options.dir ?? process.cwd());
  const stateDir = options.stateDir === undefined ? undefined : path.resolve(dir, options.stateDir);
  if (options.socket) {
    return createLocalProvider({ stateDir: stateDir ?? path.join(dir, '.dsec'), baseDir: dir, socket: path.resolve(options.socket) });
  }
  const file = options.file ? path.resolve(dir, options.file) : configFileIn(dir);
  if (file === undefined) {
    // No config: the project's own agent, as the local provider's defaults have it.
    return createLocalProvider({ stateDir: stateDir ?? path.join(dir, '.dsec'), baseDir: dir, plugins: options.plugins, autoStart: options.autoStart, notice: options.notice });
  }
  const project = await loadProject(file);
  return createProjectProvider(project, { stateDir, plugins: options.plugins, autoStart: options.autoStart, notice: options.notice });
}

/** The folder's config file, or undefined when it has none (two of them is still an error). */
function configFileIn(dir: string): string | undefined {
  try {
    return findConfigFile(dir);
  } catch (error) {
    if (isDsecError(error, 'DSEC_CONFIG_NOT_FOUND')) return undefined;
    throw error;
  }
}

/** Each backend's operations over the healthy nodes (a node of an older agent reports none). */
export function capabilitiesOf(nodes: readonly NodeInfo[]): Record<string, BackendOperation[]> {
  const merged = new Map<string, Set<BackendOperation>>();
  for (const node of nodes) {
    if (node.health === 'unhealthy') continue;
    for (const backend of node.backends) merged.set(backend, merged.get(backend) ?? new Set());
    for (const [backend, operations] of Object.entries(node.capabilities ?? {})) {
      const set = merged.get(backend) ?? new Set<BackendOperation>();
      for (const operation of operations) set.add(operation);
      merged.set(backend, set);
    }
  }
  const order = (a: BackendOperation, b: BackendOperation) => BACKEND_OPERATIONS.indexOf(a) - BACKEND_OPERATIONS.indexOf(b);
  return Object.fromEntries([...merged.keys()].sort().map((backend) => [backend, [...merged.get(backend)!].sort(order)]));
}
