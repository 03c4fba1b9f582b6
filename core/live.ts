/**
 * What is really there: the shapes the node agent speaks over its API and the
 * provider hands to the planner as the live view. Plain JSON-able data.
 */
import type { LayerKind, Resources } from './model.js';

/** Labels dsec sets on every sandbox it creates for a config (ownership). */
export const LABEL_LINEAGE = 'dsec.io/lineage';
export const LABEL_FLEET = 'dsec.io/fleet';
/** Hash of everything that forces a replace: backend + environment identity. */
export const LABEL_SPEC = 'dsec.io/spec';

/** A published, immutable layer as the store holds it. */
export interface LayerRecord {
  readonly name: string;
  readonly version: string;
  readonly kind: LayerKind;
  /** `sha256:<hex>` over the canonical listing of the layer's content. */
  readonly digest: string;
  readonly sizeBytes: number;
  readonly files: number;
  readonly publishedAt: string;
}

/** A layer as a sandbox spec names it: resolved to a digest by the engine. */
export interface LayerRef {
  readonly name: string;
  readonly version: string;
  readonly digest: string;
}

/**
 * The digest of a layer that exists only once apply built it (a `build`
 * source whose inputs were never built): `pending:<build identity>`. Plans
 * show it as "(known after apply)", fleets stacked on it are replaced, and
 * apply puts the real digest in its place once the layer is published.
 */
export const PENDING_DIGEST_PREFIX = 'pending:';

export function pendingDigest(identity: string): string {
  return `${PENDING_DIGEST_PREFIX}${identity}`;
}

export function isPendingDigest(digest: string): boolean {
  return digest.startsWith(PENDING_DIGEST_PREFIX);
}

/** Everything a backend needs to create one sandbox. */
export interface SandboxSpec {
  /** Chosen by the caller so that a crashed create can be found again; `[a-z0-9-]`, <= 63 chars. */
  readonly id: string;
  readonly backend: string;
  /** Bottom to top. */
  readonly layers: readonly LayerRef[];
  readonly env: Readonly<Record<string, string>>;
  readonly workdir: string;
  readonly user: string;
  readonly resources: Resources;
  readonly network: 'none';
  readonly qos: 'best-effort' | 'latency-sensitive';
  readonly labels: Readonly<Record<string, string>>;
}

export type SandboxStatus =
  /** Being created: layers resolving, backend starting. */
  | 'creating'
  | 'running'
  | 'paused'
  /** Its processes are gone (killed from outside, or the node restarted). */
  | 'stopped'
  /** Creation or a later step failed; `error` says why. */
  | 'failed';

export interface SandboxInfo {
  readonly id: string;
  readonly node: string;
  readonly backend: string;
  readonly status: SandboxStatus;
  readonly labels: Readonly<Record<string, string>>;
  readonly resources: Resources;
  readonly layers: readonly LayerRef[];
  readonly createdAt: string;
  readonly error?: string;
  /** The backend's own handle (e.g. the OCI runtime's container id), for debugging. */
  readonly handle?: string;
}

export interface NodeInfo {
  readonly name: string;
  /** Backend kinds some plugin on this node can provision. */
  readonly backends: readonly string[];
  readonly capacity: { readonly cpu: number; readonly memoryMiB: number };
  readonly sandboxes: number;
  readonly agentVersion: string;
  readonly pid: number;
}

export interface ExecRequest {
  readonly cmd: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  readonly workdir?: string;
  readonly stdin?: string;
  /** @default 60000 */
  readonly timeoutMs?: number;
  /** Per stream; output past it is dropped and `truncated` set. @default 1 MiB */
  readonly maxOutputBytes?: number;
}

export interface ExecResult {
  readonly exitCode: number | null;
  /** Set when the process was killed by a signal (including on timeout). */
  readonly signal: string | null;
  readonly stdout: string;
  readonly stderr: string;
  /** True when either stream went over `maxOutputBytes` and was cut. */
  readonly truncated: boolean;
  readonly timedOut: boolean;
  readonly durationMs: number;
}

/** What refresh reads from the provider: every layer, node and sandbox it can see. */
export interface LiveView {
  readonly nodes: readonly NodeInfo[];
  readonly layers: readonly LayerRecord[];
  readonly sandboxes: readonly SandboxInfo[];
}
