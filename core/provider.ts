/**
 * A provider is how the engine reaches the live cluster. `local` talks to one
 * node agent on this machine (starting it on first use); `cluster` talks to
 * many, found through etcd. The engine only ever sees this interface.
 */
import type {
  AcquireRequest,
  BatchOutcome,
  ExecRequest,
  ExecResult,
  FileContent,
  FunctionResult,
  FunctionTask,
  LayerRecord,
  LiveView,
  NodeInfo,
  NodeUsage,
  SandboxInfo,
  SandboxSpec,
  SandboxTarget,
  SandboxUpdate,
  ReadFileRequest,
  ReleaseRequest,
  ReleaseResult,
  RenewRequest,
  WriteFileRequest,
} from './live.js';
import type { AgentClient } from './agent/client.js';
import type { LayerModel } from './model.js';

export interface Provider {
  readonly name: string;
  /** Read every node, layer and sandbox. Throws (never returns an empty view) when unreachable. */
  refresh(): Promise<LiveView>;
  /**
   * Compute the digest a layer would have once published, without publishing
   * it. Plans use it to tell a new layer version from an unchanged one.
   */
  digestLayer(layer: LayerModel): Promise<string>;
  /** Publish a layer; a no-op if the same digest is already there, an error if `name@version` holds other content. */
  publishLayer(layer: LayerModel): Promise<LayerRecord>;
  /** Remove a published layer. Refused while a sandbox uses it. */
  unpublishLayer(name: string, version: string): Promise<void>;
  /** Create and start one sandbox; resolves once it is running. Idempotent on `spec.id`. */
  createSandbox(spec: SandboxSpec): Promise<SandboxInfo>;
  /** Change a running sandbox's limits, TTLs or density settings in place. */
  updateSandbox(id: string, change: SandboxUpdate): Promise<SandboxInfo>;
  /** Freeze (and reclaim) each targeted sandbox; one outcome per sandbox, failures included. */
  pauseSandboxes(target: SandboxTarget): Promise<BatchOutcome[]>;
  /** Thaw each targeted paused sandbox; one outcome per sandbox. */
  resumeSandboxes(target: SandboxTarget): Promise<BatchOutcome[]>;
  /**
   * Hold a sandbox for `holder` (a job): while the claim lasts its fleet's ttl
   * does not reap it; with `ttlSeconds` the claim itself ends then.
   * DSEC_SANDBOX_CLAIMED when another holder has it.
   */
  claimSandbox(id: string, holder: string, ttlSeconds?: number): Promise<SandboxInfo>;
  /**
   * Take a ready sandbox of the fleet's warm pool for `request.holder`, never
   * one another holder has, waiting up to `request.waitMs` (first come,
   * first served); the pool makes a fresh one in its place.
   * DSEC_POOL_EXHAUSTED with the pool's counts when none was free in time.
   */
  acquireSandbox(fleet: string, request: AcquireRequest): Promise<SandboxInfo>;
  /** End a claim: a pool's sandbox is recycled (destroyed), or with `keep` kept, unclaimed; another sandbox just loses its claim. */
  releaseSandbox(id: string, request?: ReleaseRequest): Promise<ReleaseResult>;
  /** The holder extends its claim to `ttlSeconds` from now. */
  renewClaim(id: string, request: RenewRequest): Promise<SandboxInfo>;
  /**
   * Set a fleet's pool record on the nodes (apply does, before and after a
   * fleet's sandbox operations): the template, the claim settings, and how
   * many ready sandboxes each node keeps. Optional: a provider without
   * pools leaves acquire to fail with DSEC_POOL_NOT_FOUND.
   */
  setPool?(pool: FleetPoolRequest): Promise<void>;
  /** Remove a fleet's pool records (before its sandboxes are deleted). */
  deletePool?(fleet: string, lineage: string): Promise<void>;
  /** Each node's usage report (`dsec nodes`). */
  nodeUsage(): Promise<NodeUsage[]>;
  /**
   * Stop and remove a sandbox and everything it left on its node. Idempotent.
   * `unlessClaimed`: refused with DSEC_SANDBOX_CLAIMED when a holder has it
   * (apply's deletes, for a sandbox acquired since the plan was made).
   */
  destroySandbox(id: string, options?: { unlessClaimed?: boolean }): Promise<void>;
  exec(id: string, request: ExecRequest): Promise<ExecResult>;
  /** One file from inside a sandbox (a paused one is resumed first). */
  readFile(id: string, request: ReadFileRequest): Promise<FileContent>;
  /** Create or replace one file inside a sandbox. */
  writeFile(id: string, request: WriteFileRequest): Promise<void>;
  /** Run a stateless task on an FnCall fleet's pool (on a cluster: a node that has workers of it). */
  invokeFunction(fleet: string, task: FunctionTask): Promise<FunctionResult>;
  /** The sandboxes whose labels (their own and their claim's) match; with `holder`, only those it holds. */
  listSandboxes(labels?: Readonly<Record<string, string>>, options?: { holder?: string }): Promise<SandboxInfo[]>;
  nodes(): Promise<NodeInfo[]>;
  /**
   * Remove what the provider itself left inconsistent, before `apply` plans
   * (under the state lock, so nothing else is creating): on a cluster, a copy
   * of a sandbox on a node other than the one its placement names (a create
   * retried elsewhere after its first node vanished mid-request, which then
   * came back with it). Resolves to one line per thing removed. Optional.
   */
  sweepStrays?(): Promise<string[]>;
  /**
   * The node agent that holds a sandbox, for the calls into it the Provider
   * has no word for: streamed execs, background commands, sessions (see
   * core/agent/client-processes.ts). DSEC_SANDBOX_NOT_FOUND when no node has it.
   */
  sandboxAgent(id: string): Promise<AgentClient>;
  /** Release connections; never stops the agents (sandboxes outlive the CLI). */
  close(): Promise<void>;
}

/** A fleet's pool as apply sets it: what every node's record holds, and each node's share of the ready sandboxes. */
export interface FleetPoolRequest {
  readonly fleet: string;
  readonly lineage: string;
  readonly template: Omit<SandboxSpec, 'id'>;
  /** Fleet-wide; a cluster shares it out over the nodes in proportion to their shares. */
  readonly maxClaimed?: number;
  readonly claimTtlSeconds?: number;
  readonly revision: string;
  /** How many ready sandboxes each node keeps (node name -> count); a node left out keeps none. */
  readonly shares: Readonly<Record<string, number>>;
}
