/**
 * Sandboxes and nodes as they really are: the shapes the node agent speaks
 * over its API (specs, infos, exec requests and results, layer records).
 * Plain JSON-able data. Import them through live.ts, with the rest.
 */
import type { BackendOperation } from './live-calls.js';
import type { LayerKind, Resources } from './model.js';

/** Labels dsec sets on every sandbox it creates for a config (ownership). */
export const LABEL_LINEAGE = 'dsec.io/lineage';
export const LABEL_FLEET = 'dsec.io/fleet';
/** Hash of everything that forces a replace: backend + environment identity. */
export const LABEL_SPEC = 'dsec.io/spec';
/** Label keys dsec keeps for itself: a config or a caller never sets them. */
export const RESERVED_LABEL_PREFIX = 'dsec.io/';

/** The labels a sandbox carries for its fleet's declaration (and its caller), without dsec's own. */
export function userLabels(labels: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(labels).filter(([key]) => !key.startsWith(RESERVED_LABEL_PREFIX)));
}

/** How a store keeps a layer: an EROFS image mounted read-only, or a plain directory tree. */
export type LayerFormat = 'erofs' | 'tree';

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
  /** How the store keeps it; records written before formats existed are trees. @default 'tree' */
  readonly format?: LayerFormat;
}

/**
 * A run of consecutive layers merged offline into one image (`dsec layers
 * squash`). The plan still sees the layers; the store mounts the one merged
 * image wherever a sandbox stacks exactly this run.
 */
export interface SquashRecord {
  /** The run, bottom to top. */
  readonly layers: readonly LayerRef[];
  /** Digest of the merged tree (whiteouts and opaque marks included, unless `bottom`). */
  readonly digest: string;
  /** The run starts at a base layer: whiteouts were applied and dropped, so it only replaces a stack's bottom. */
  readonly bottom: boolean;
  readonly format: LayerFormat;
  readonly sizeBytes: number;
  readonly files: number;
  readonly createdAt: string;
}

/** One image mounted on the node, and what was read of it. */
export interface MountStats {
  /** The digest of the mounted tree (a layer's, or a squash's). */
  readonly digest: string;
  readonly path: string;
  /** The loop device the image's data is read through. */
  readonly device?: string;
  /** `store`: the data is read from the store (on demand, for a shared store); `cache`: from this node's copy. */
  readonly source?: 'store' | 'cache';
  /** Size of the data behind the device (the image, or a split image's blob). */
  readonly dataBytes?: number;
  /** The file the device reads: the image, a split image's blob on the store, or its cached copy. */
  readonly data?: string;
  /** A split image's metadata image, copied to this node. */
  readonly metadata?: string;
  /** The loop device of the metadata image (its read-ahead is the filesystem's). */
  readonly metadataDevice?: string;
  /** Bytes read through the device since it was mounted (/sys/block/loopN/stat sectors read x 512). */
  readonly bytesRead?: number;
  /** Sandboxes on this node using it. */
  readonly users: number;
}

export interface CacheStats {
  readonly dir: string;
  readonly maxBytes: number;
  readonly bytes: number;
  readonly entries: number;
}

/** What the storage plugin of a node says about itself (`GET /v1/storage`). */
export interface StorageStats {
  readonly plugin: string;
  /** The format new layers are stored in. */
  readonly format: LayerFormat;
  /** Why it is not EROFS, when it fell back to trees. */
  readonly reason?: string;
  /** The format's own words: `erofs (lz4)`, `erofs split: metadata on local disk, blob read on demand`. */
  readonly description: string;
  readonly store: string;
  /** What the store folder is on, when the plugin says (storage-3fs: a 3FS mount, or an ordinary directory). */
  readonly backing?: string;
  readonly mounts: readonly MountStats[];
  readonly cache?: CacheStats;
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
  /** Lifetime limits the agent's reaper enforces (absent: none). */
  readonly ttl?: SandboxTtl;
  /** The fleet's density switches (absent: the defaults, DEFAULT_DENSITY). */
  readonly density?: DensitySettings;
  /** Where the cluster provider may put it (absent: spread over any healthy node). */
  readonly placement?: PlacementSettings;
  /**
   * The fleet's `backendOptions`, for the backend plugin alone (a microVM's
   * upper layer, a full VM's display, an FnCall pool's output cap). Each
   * backend validates its own; part of the spec hash (a change replaces).
   */
  readonly backendOptions?: Readonly<Record<string, unknown>>;
  /** The environment's disk image, for backends that boot one (the full VM). */
  readonly image?: DiskImageRef;
}

/** A bootable disk image an environment names; like a layer version, treated as immutable: change the path to roll out. */
export interface DiskImageRef {
  /** Absolute path on the node. */
  readonly path: string;
  readonly format: 'qcow2' | 'raw';
}

/** A fleet's placement options, read by the placement plugin on the `place` hook. */
export interface PlacementSettings {
  /** `spread` (default): the least loaded of k sampled nodes; `pack`: the most loaded node it still fits on. */
  readonly strategy: 'spread' | 'pack';
  /** Only nodes whose labels include every one of these. */
  readonly nodeSelector: Readonly<Record<string, string>>;
}

export interface SandboxTtl {
  /** Reaped (and replaced, for a fleet's sandbox) this long after it was created. */
  readonly maxLifetimeSeconds?: number;
  /** Reaped (and replaced) after this long without an exec or file call. */
  readonly idleStopSeconds?: number;
}

/** Per-fleet switches the density plugins read from the spec. */
export interface DensitySettings {
  /** KSM merges the sandbox's identical pages (density-memory). @default false */
  readonly memorySharing: boolean;
  /** Pausing also pushes its memory out (to swap where there is some; page cache otherwise) (density-reclaim). @default true */
  readonly reclaimOnPause: boolean;
}

export const DEFAULT_DENSITY: DensitySettings = Object.freeze({ memorySharing: false, reclaimOnPause: true });

/** What `PATCH /v1/sandboxes/:id` may change on a live sandbox (each part optional). */
export interface SandboxUpdate {
  /** Applied by the backend's `update` tap. */
  readonly resources?: Resources;
  /** Recorded for the reaper; `{}` removes the limits. */
  readonly ttl?: SandboxTtl;
  /** Recorded; takes effect at the next pause (reclaimOnPause). memorySharing cannot change on a live sandbox (it forces a replace). */
  readonly density?: DensitySettings;
  /**
   * The sandbox's own labels (its fleet's `labels`), replacing the ones it
   * has; dsec's `dsec.io/` labels are kept as they are and cannot be set.
   */
  readonly labels?: Readonly<Record<string, string>>;
}

/** Which sandboxes a batch call (pause, resume) acts on: the ids, and/or every one whose labels match. */
export interface SandboxTarget {
  readonly ids?: readonly string[];
  readonly labels?: Readonly<Record<string, string>>;
}

/** One sandbox's outcome in a batch call: the call goes on past a failure and reports each. */
export type BatchOutcome =
  | { readonly id: string; readonly ok: true; readonly info: SandboxInfo }
  | { readonly id: string; readonly ok: false; readonly error: { readonly code: string; readonly message: string } };

/** A job holding a sandbox for a rollout: while active, the fleet's TTLs do not reap it. */
export interface SandboxClaim {
  readonly holder: string;
  readonly claimedAt: string;
  /** The claim's own lifetime: when it runs out the claim ends and the sandbox is reaped (and replaced). */
  readonly expiresAt?: string;
  /** The holder's labels for this claim (`acquire`'s): selectors match them beside the sandbox's own. */
  readonly labels?: Readonly<Record<string, string>>;
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
  /** The last exec or file call (the idle reaper's clock); absent until the first. */
  readonly lastActivityAt?: string;
  /** When it was last paused, while it is paused. */
  readonly pausedAt?: string;
  readonly claim?: SandboxClaim;
  /** Released with `keep`: used by that holder, never handed out by acquire again. */
  readonly kept?: KeptMark;
  readonly ttl?: SandboxTtl;
  /**
   * The density plugins' own records of it, by plugin name, for display
   * (e.g. `density-reclaim`: what its last pause pushed out, its last
   * prefetch). Each plugin documents its record; absent when none kept one.
   */
  readonly density?: Readonly<Record<string, unknown>>;
}

export interface NodeInfo {
  readonly name: string;
  /** Backend kinds some plugin on this node can provision. */
  readonly backends: readonly string[];
  /** What each backend can do beyond create and destroy (derived from its taps). */
  readonly capabilities?: Readonly<Record<string, readonly BackendOperation[]>>;
  readonly capacity: { readonly cpu: number; readonly memoryMiB: number };
  readonly sandboxes: number;
  readonly agentVersion: string;
  readonly pid: number;
  /** The storage plugin's format, and why it fell back to trees if it did. */
  readonly storage?: { readonly plugin: string; readonly format: LayerFormat; readonly reason?: string };
  /**
   * What the node admits in total under its overcommit policy: capacity x
   * ratio - reserve. Absent when no admission plugin runs (anything goes).
   */
  readonly allocatable?: { readonly cpu: number; readonly memoryMiB: number };
  /** What its admitted sandboxes (creating, running, paused) request. */
  readonly requested?: { readonly cpu: number; readonly memoryMiB: number };
  /** The policy behind `allocatable`, for messages: "memory 2x, 1024 MiB reserved". */
  readonly policy?: OvercommitPolicy;
  /** Cluster provider: where its agent serves over TCP (`host:port`). */
  readonly address?: string;
  /** Cluster provider: the node's labels (for `placement.nodeSelector`). */
  readonly labels?: Readonly<Record<string, string>>;
  /**
   * Cluster provider: `healthy` (registered under a live lease and answering),
   * or `unhealthy` with the reason (lease lapsed, timeout, garbage answer).
   * Unhealthy nodes receive no new sandboxes. Absent on the local provider.
   */
  readonly health?: 'healthy' | 'unhealthy';
  readonly healthReason?: string;
}

export interface OvercommitPolicy {
  /** Ratios of requests to capacity, each >= 1: `{cpu: 20, memory: 2}`. */
  readonly overcommit: { readonly cpu: number; readonly memory: number };
  /** Kept for the host, never admitted: taken off capacity before the ratio applies. */
  readonly reserve: { readonly cpu: number; readonly memoryMiB: number };
}

/** What one sandbox uses now, read by its backend from its cgroup. */
export interface SandboxUsage {
  /** CPU time used since it started, in seconds (the rate comes from two readings). */
  readonly cpuSeconds: number;
  /** Resident memory charged to it (anonymous + page cache), MiB. */
  readonly memoryMiB: number;
  /** Of which page cache, MiB. */
  readonly cacheMiB: number;
  /** Its pages in swap, MiB. */
  readonly swapMiB: number;
  readonly processes: number;
}

/** One fleet's figures on one node, in `dsec nodes`. */
export interface FleetUsage {
  readonly fleet: string;
  readonly sandboxes: number;
  readonly requested: { readonly cpu: number; readonly memoryMiB: number };
  readonly used: { readonly cpu: number; readonly memoryMiB: number };
  /** Memory saved by KSM merging in its sandboxes (density-memory). */
  sharedMiB?: number;
  /** Memory pushed out of its paused sandboxes (density-reclaim). */
  reclaimedMiB?: number;
}

/** `GET /v1/node/usage`, what `dsec nodes` shows per node. */
export interface NodeUsage {
  readonly node: string;
  readonly capacity: { readonly cpu: number; readonly memoryMiB: number };
  readonly allocatable?: { readonly cpu: number; readonly memoryMiB: number };
  /** Sandbox counts: backend -> status -> count. */
  readonly sandboxes: Readonly<Record<string, Partial<Record<SandboxStatus, number>>>>;
  readonly requested: { readonly cpu: number; readonly memoryMiB: number };
  /** CPU in cores (averaged since the previous report, or since start), memory resident in MiB. */
  readonly used: { readonly cpu: number; readonly memoryMiB: number };
  /** The host's own figures (from /proc/meminfo): total, available. */
  readonly host: { readonly memoryMiB: number; readonly availableMiB: number };
  /** Memory saving, filled by the density plugins. */
  readonly memory: {
    /** Saved by KSM: pages_sharing x page size (node-wide). */
    sharedMiB?: number;
    /** Pushed out of paused sandboxes and not yet back. */
    reclaimedMiB?: number;
    /** The swap device, when a plugin set one up or the host has one. */
    swap?: { readonly device: string; readonly totalMiB: number; readonly usedMiB: number; readonly compressedMiB?: number };
    /** KSM's own state: running or not, and the scan rate. */
    ksm?: { readonly running: boolean; readonly pagesToScan: number; readonly sleepMillisecs: number; readonly mergeableSandboxes: number };
  };
  /** CPU QoS: what the node can do (filled by density-qos). */
  readonly qos: { coreScheduling?: string; idleCpu?: string };
  readonly fleets: FleetUsage[];
}

/**
 * The most output an exec may capture per stream. The agent holds both
 * streams in memory and answers with them in one JSON document (where a
 * control byte takes 6 characters), so this keeps an answer well under V8's
 * string limit and a burst of execs within the agent's memory.
 */
export const MAX_EXEC_OUTPUT_BYTES = 32 * 1024 * 1024;
/** The longest exec timeout: the most a Node timer holds (a longer one would fire at once). */
export const MAX_EXEC_TIMEOUT_MS = 2_147_483_647;

export interface ExecRequest {
  readonly cmd: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  readonly workdir?: string;
  /** Standard input, as text. */
  readonly stdin?: string;
  /** Standard input as bytes (base64), instead of `stdin`. */
  readonly stdinBase64?: string;
  /** Keep stdin open after `stdin`: the caller writes to it with the process input call, by the handle the stream's start gives. */
  readonly openStdin?: boolean;
  /** Run on a pseudo-terminal of this size: stdout and stderr are then one stream (stdout), as in a terminal. */
  readonly tty?: { readonly rows: number; readonly cols: number };
  /**
   * Start it and answer at once with its handle: it runs on past the call
   * (and its caller), its output kept up to `maxOutputBytes` per stream,
   * until it exits or is killed; it dies with its sandbox.
   */
  readonly background?: boolean;
  /** At most MAX_EXEC_TIMEOUT_MS. @default 60000 for a command in the foreground, none in the background */
  readonly timeoutMs?: number;
  /** Per stream (streamed bytes count), at most MAX_EXEC_OUTPUT_BYTES; output past it is dropped and `truncated` set. @default 1 MiB */
  readonly maxOutputBytes?: number;
  /** How stdout and stderr come back. @default 'utf8' */
  readonly encoding?: OutputEncoding;
}

export interface ExecResult {
  readonly exitCode: number | null;
  /** Set when the process was killed by a signal (including on timeout). */
  readonly signal: string | null;
  /** In the request's encoding (utf8 text, or base64 bytes). */
  readonly stdout: string;
  readonly stderr: string;
  /** True when either stream went over `maxOutputBytes` and was cut. */
  readonly truncated: boolean;
  readonly timedOut: boolean;
  readonly durationMs: number;
}

/** How a caller wants command output back: text (bytes that are not UTF-8 become U+FFFD) or base64 (the bytes unchanged). */
export type OutputEncoding = 'utf8' | 'base64';

/** A sandbox released with `keep`: unclaimed but used, never handed out by acquire again. */
export interface KeptMark {
  readonly holder: string;
  readonly releasedAt: string;
}

/** A sandbox's labels as selectors see them: its own (the fleet's and dsec's) over its claim's. */
export function selectorLabels(sandbox: { readonly labels: Readonly<Record<string, string>>; readonly claim?: SandboxClaim }): Record<string, string> {
  return { ...sandbox.claim?.labels, ...sandbox.labels };
}
