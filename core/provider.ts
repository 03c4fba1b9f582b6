/**
 * A provider is how the engine reaches the live cluster. `local` talks to one
 * node agent on this machine (starting it on first use); `cluster` talks to
 * many, found through etcd. The engine only ever sees this interface.
 */
import type {
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
  WriteFileRequest,
} from './live.js';
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
  /** End a sandbox's claim; a no-op when it has none. */
  releaseSandbox(id: string): Promise<SandboxInfo>;
  /** Each node's usage report (`dsec nodes`). */
  nodeUsage(): Promise<NodeUsage[]>;
  /** Stop and remove a sandbox and everything it left on its node. Idempotent. */
  destroySandbox(id: string): Promise<void>;
  exec(id: string, request: ExecRequest): Promise<ExecResult>;
  /** One file from inside a sandbox (a paused one is resumed first). */
  readFile(id: string, request: ReadFileRequest): Promise<FileContent>;
  /** Create or replace one file inside a sandbox. */
  writeFile(id: string, request: WriteFileRequest): Promise<void>;
  /** Run a stateless task on an FnCall fleet's pool (on a cluster: a node that has workers of it). */
  invokeFunction(fleet: string, task: FunctionTask): Promise<FunctionResult>;
  listSandboxes(labels?: Readonly<Record<string, string>>): Promise<SandboxInfo[]>;
  nodes(): Promise<NodeInfo[]>;
  /**
   * Remove what the provider itself left inconsistent, before `apply` plans
   * (under the state lock, so nothing else is creating): on a cluster, a copy
   * of a sandbox on a node other than the one its placement names (a create
   * retried elsewhere after its first node vanished mid-request, which then
   * came back with it). Resolves to one line per thing removed. Optional.
   */
  sweepStrays?(): Promise<string[]>;
  /** Release connections; never stops the agents (sandboxes outlive the CLI). */
  close(): Promise<void>;
}
