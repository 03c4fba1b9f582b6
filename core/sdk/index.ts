/**
 * The SDK: a typed client for the sandboxes of a project's local agent, for
 * programs (RL harnesses, evaluators) that claim and drive sandboxes
 * directly rather than through `dsec apply`.
 *
 *   const dsec = await connect({ dir: '/path/to/project' });
 *   const box = await dsec.create({ backend: 'container', layers: [base] });
 *   const { stdout } = await dsec.exec(box.id, 'python -V');
 *   await dsec.snapshot(box.id, { as: 'solved@1.0.0', exclude: ['/root/.token'] });
 *   await dsec.pause({ labels: { job: 'rollout-17' } });   // trainer preempted
 *   await dsec.resume({ labels: { job: 'rollout-17' } });
 *   await dsec.destroy(box.id);
 *   await dsec.close();
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { AgentClient, type SnapshotRequestBody } from '../agent/client.js';
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
import { createLocalProvider } from '../../providers/local/index.js';

export interface ConnectOptions {
  /** The project folder (where dsec.yaml is). @default process.cwd() */
  readonly dir?: string;
  /** The project's state folder; its agent lives in `<stateDir>/agent`. @default `<dir>/.dsec` */
  readonly stateDir?: string;
  /** Talk to the agent on this socket instead (never started by the SDK). */
  readonly socket?: string;
  /** Start the project's agent when it is not running. @default true */
  readonly autoStart?: boolean;
  /** Plugins an agent started by the SDK loads on top of the built-ins. */
  readonly plugins?: readonly PluginRef[];
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

export class DsecClient {
  constructor(
    private readonly client: AgentClient,
    /** Makes sure an agent answers before each call (starting it if allowed). */
    private readonly ready: () => Promise<void>,
  ) {}

  /** The agent's socket. */
  get socket(): string {
    return this.client.socketPath;
  }

  async node(): Promise<NodeInfo> {
    await this.ready();
    return this.client.node();
  }

  async list(labels?: Readonly<Record<string, string>>): Promise<SandboxInfo[]> {
    await this.ready();
    return this.client.listSandboxes(labels);
  }

  async get(id: string): Promise<SandboxInfo> {
    await this.ready();
    return this.client.getSandbox(id);
  }

  /** Create and start a sandbox; resolves once it runs. Idempotent on `id`. */
  async create(input: CreateSandboxInput): Promise<SandboxInfo> {
    await this.ready();
    return this.client.createSandbox(sandboxSpec(input));
  }

  async exec(id: string, command: string | readonly string[] | ExecRequest, options: Omit<ExecRequest, 'cmd'> = {}): Promise<ExecResult> {
    await this.ready();
    return this.client.exec(id, { ...execRequest(command), ...options });
  }

  /**
   * Change a live sandbox in place: `{ resources?, ttl?, density? }` (a bare
   * `{ cpu, memoryMiB, pids }` is taken as resources). `ttl: {}` removes its
   * lifetime limits; density.memorySharing cannot change on a live sandbox.
   */
  async update(id: string, change: SandboxUpdate | Partial<Resources>): Promise<SandboxInfo> {
    await this.ready();
    return this.client.updateSandbox(id, change);
  }

  /**
   * Freeze sandboxes and reclaim their memory: `pause('id')`, `pause(['a', 'b'])`
   * or `pause({ labels: { job: 'rollout-17' } })`. An exec or file call to a
   * paused sandbox resumes it first. Goes on past a failure: one outcome per
   * sandbox (`ok: false` with the error's code, e.g. DSEC_SANDBOX_BUSY while an
   * exec runs in it); throws only when the agent cannot be asked at all.
   */
  async pause(selector: SandboxSelector): Promise<BatchOutcome[]> {
    await this.ready();
    return this.client.pauseSandboxes(sandboxTarget(selector));
  }

  /** Thaw paused sandboxes (their memory prefetched), selected as for `pause`; one outcome per sandbox. */
  async resume(selector: SandboxSelector): Promise<BatchOutcome[]> {
    await this.ready();
    return this.client.resumeSandboxes(sandboxTarget(selector));
  }

  /**
   * Hold a sandbox for `holder` (a job or rollout): while the claim lasts its
   * fleet's ttl does not reap it. With `ttlSeconds` the claim itself ends then
   * and the sandbox is reaped (a fleet's re-created). Throws
   * DSEC_SANDBOX_CLAIMED when another holder has it.
   */
  async claim(id: string, holder: string, options: { ttlSeconds?: number } = {}): Promise<SandboxInfo> {
    await this.ready();
    return this.client.claimSandbox(id, holder, options.ttlSeconds);
  }

  /** End a sandbox's claim: its fleet's ttl applies again. A no-op when it has none. */
  async release(id: string): Promise<SandboxInfo> {
    await this.ready();
    return this.client.releaseSandbox(id);
  }

  /**
   * Each node's usage: sandboxes by backend and state, requested vs allocatable
   * vs used CPU and memory, shared and reclaimed memory, swap, QoS (`dsec nodes`).
   */
  async nodes(): Promise<NodeUsage[]> {
    await this.ready();
    return [await this.client.nodeUsage()];
  }

  /** Stop and remove a sandbox. Idempotent. */
  async destroy(id: string): Promise<void> {
    await this.ready();
    await this.client.destroySandbox(id);
  }

  /**
   * Turn a sandbox's writable layer into a published layer `as` (name@version,
   * immutable like every layer), usable at once by an environment that
   * declares it `published: {}`. `exclude`: absolute paths inside the sandbox
   * (secrets, build residue) that must not be in the layer.
   */
  async snapshot(id: string, options: SnapshotOptions): Promise<LayerRecord> {
    await this.ready();
    return this.client.snapshotSandbox(id, options);
  }

  async layers(): Promise<LayerRecord[]> {
    await this.ready();
    return this.client.listLayers();
  }

  async publishLayer(layer: LayerModel): Promise<LayerRecord> {
    await this.ready();
    return this.client.publishLayer(layer);
  }

  /** Close connections. The agent and its sandboxes keep running. */
  async close(): Promise<void> {
    this.client.close();
  }
}

/** Connect to a project's local agent (starting it unless told not to). Throws DSEC_AGENT_UNREACHABLE when none answers. */
export async function connect(options: ConnectOptions = {}): Promise<DsecClient> {
  if (options.socket) {
    const client = new AgentClient(path.resolve(options.socket));
    await client.health({ timeoutMs: 5_000 }).catch((error: unknown) => {
      client.close();
      throw error;
    });
    return new DsecClient(client, async () => {});
  }
  const dir = path.resolve(options.dir ?? process.cwd());
  const stateDir = path.resolve(dir, options.stateDir ?? '.dsec');
  const provider = createLocalProvider({ stateDir, baseDir: dir, plugins: options.plugins, autoStart: options.autoStart });
  // Up front, so an agent that cannot be reached or started is reported by connect itself.
  await provider.ensureAgent();
  return new DsecClient(provider.client, () => provider.ensureAgent());
}
