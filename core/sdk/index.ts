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
 *   await dsec.snapshot(box.id, { as: 'solved@1.0.0', exclude: ['/root/.token'] });   // local only
 *   await dsec.pause({ labels: { job: 'rollout-17' } });   // trainer preempted
 *   await dsec.resume({ labels: { job: 'rollout-17' } });
 *   await dsec.destroy(box.id);
 *   await dsec.close();
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { asSandboxUpdate, type AgentClient, type SnapshotRequestBody } from '../agent/client.js';
import { findConfigFile } from '../config/index.js';
import { DsecError, isDsecError } from '../errors.js';
import type {
  BatchOutcome,
  DensitySettings,
  ExecRequest,
  ExecResult,
  LayerRecord,
  LayerRef,
  NodeInfo,
  NodeUsage,
  SandboxInfo,
  SandboxSpec,
  SandboxTarget,
  SandboxTtl,
  SandboxUpdate,
} from '../live.js';
import type { LayerModel, PluginRef, Resources } from '../model.js';
import { createProjectProvider, isLocalProvider, loadProject, type ProjectProvider } from '../project.js';
import type { Provider } from '../provider.js';
import { createLocalProvider } from '../../providers/local/index.js';

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

/** What `create` takes: a SandboxSpec with everything but backend and layers optional. */
export interface CreateSandboxInput {
  /** @default `sbx-<random>` */
  readonly id?: string;
  readonly backend: string;
  /** Bottom to top. */
  readonly layers: readonly LayerRef[];
  /** @default cpu 1, memoryMiB 256, pids 256 */
  readonly resources?: Partial<Resources>;
  readonly env?: Readonly<Record<string, string>>;
  readonly labels?: Readonly<Record<string, string>>;
  /** @default "/" */
  readonly workdir?: string;
  /** @default "root" */
  readonly user?: string;
  /** @default "best-effort" */
  readonly qos?: SandboxSpec['qos'];
  /** Lifetime limits the agent's reaper enforces. @default none */
  readonly ttl?: SandboxTtl;
  /** Density switches (memory sharing, reclaim on pause). @default { memorySharing: false, reclaimOnPause: true } */
  readonly density?: DensitySettings;
}

/** Which sandboxes `pause`/`resume` act on: one id, a list of ids, or `{ ids?, labels? }`. */
export type SandboxSelector = string | readonly string[] | SandboxTarget;

/** The selector as the agent takes it. */
export function sandboxTarget(selector: SandboxSelector): SandboxTarget {
  if (typeof selector === 'string') return { ids: [selector] };
  if (Array.isArray(selector)) return { ids: [...(selector as readonly string[])] };
  return selector as SandboxTarget;
}

/** What `snapshot` takes: `{ as: 'name@version', kind?: 'workspace', exclude?: ['/root/.token'] }`. */
export type SnapshotOptions = SnapshotRequestBody;

export const DEFAULT_SANDBOX_RESOURCES: Resources = Object.freeze({ cpu: 1, memoryMiB: 256, pids: 256 });

/** A full SandboxSpec from the short form, defaults filled. */
export function sandboxSpec(input: CreateSandboxInput): SandboxSpec {
  return {
    id: input.id ?? `sbx-${randomBytes(5).toString('hex')}`,
    backend: input.backend,
    layers: input.layers.map(({ name, version, digest }) => ({ name, version, digest })),
    env: { ...input.env },
    workdir: input.workdir ?? '/',
    user: input.user ?? 'root',
    resources: { ...DEFAULT_SANDBOX_RESOURCES, ...input.resources },
    network: 'none',
    qos: input.qos ?? 'best-effort',
    labels: { ...input.labels },
    ...(input.ttl ? { ttl: { ...input.ttl } } : {}),
    ...(input.density ? { density: { ...input.density } } : {}),
  };
}

/** A string runs through `/bin/sh -c`; an array runs as it is. */
export function execRequest(command: string | readonly string[] | ExecRequest): ExecRequest {
  if (typeof command === 'string') return { cmd: ['/bin/sh', '-c', command] };
  if (Array.isArray(command)) return { cmd: [...(command as readonly string[])] };
  return command as ExecRequest;
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

  async list(labels?: Readonly<Record<string, string>>): Promise<SandboxInfo[]> {
    return this.provider.listSandboxes(labels);
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

  async exec(id: string, command: string | readonly string[] | ExecRequest, options: Omit<ExecRequest, 'cmd'> = {}): Promise<ExecResult> {
    return this.provider.exec(id, { ...execRequest(command), ...options });
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

  /** End a sandbox's claim: its fleet's ttl applies again. A no-op when it has none. */
  async release(id: string): Promise<SandboxInfo> {
    return this.provider.releaseSandbox(id);
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
