/**
 * The hook table: every extension point of dsec, in one place.
 *
 * Two families share it. Engine hooks fire in the process running `dsec
 * plan/apply` (the CLI or an SDK program). Lifecycle hooks fire in the node
 * agent, around each sandbox. Plugins tap both through the same object, so a
 * reader finds every extension point here, with when it fires and what a tap
 * may do. The tapable class is the contract: a bail hook means "the first tap
 * that answers wins", a waterfall means "each tap refines the value", a
 * parallel hook means "tell everyone".
 *
 * Taps are named with the plugin's PLUGIN_NAME and ordered by `stage`
 * (backends at STAGE.BACKEND, storage at STAGE.STORAGE...), never by load order.
 */
import {
  AsyncParallelHook,
  AsyncSeriesBailHook,
  AsyncSeriesHook,
  AsyncSeriesWaterfallHook,
  HookMap,
  SyncHook,
  SyncWaterfallHook,
} from 'tapable';
import type { Diagnostic } from './errors.js';
import type {
  ExecIO,
  ExecOutput,
  ExecRequest,
  FileContent,
  FunctionResult,
  FunctionTask,
  LayerRecord,
  LayerRef,
  NodeInfo,
  NodeUsage,
  ProcessCall,
  SandboxSpec,
  SessionCall,
  SandboxStatus,
  SquashRecord,
  StorageStats,
  SandboxUsage,
  ReadFileRequest,
  WriteFileRequest,
} from './live.js';
import type { ConfigModel, LayerModel, Resources } from './model.js';
import type { Plan, ResourceChange, SandboxOperation } from './plan.js';

/** Conventional tap stages, so ordering never depends on which plugin loaded first. */
export const STAGE = Object.freeze({
  /** Admission and policy: runs before anything is mounted or started. */
  POLICY: -100,
  /** Storage resolves layers before a backend starts and unmounts after it stops. */
  STORAGE: -10,
  BACKEND: 0,
  /** Density work on a started sandbox (sharing, QoS) runs after the backend. */
  DENSITY: 10,
  /** In `destroy`: storage unmounts only after the backend stopped the processes. */
  CLEANUP: 20,
});

/** A logger handed to plugins; the agent writes it to its log, the CLI to stderr with --verbose. */
export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  debug(message: string): void;
}

/** The node a lifecycle hook runs on, as the agent describes it to plugins. */
export interface NodeContext {
  readonly name: string;
  /** The agent's root folder; plugins keep their files under `<root>/<plugin name>/`. */
  readonly root: string;
  readonly log: Logger;
  /** What the machine has: its CPUs and its memory, before any policy. */
  readonly capacity: { readonly cpu: number; readonly memoryMiB: number };
  /**
   * Every sandbox the agent holds on this node, in the order they were
   * created (including ones still `creating`, `failed` or `stopped`: look at
   * `status`). Read-only for plugins: admission sums requests over it, the
   * memory plugin counts mergeable sandboxes.
   */
  sandboxes(): readonly SandboxContext[];
  /**
   * Destroy one of the node's sandboxes and create it again from its spec
   * (same id, nothing of the old one kept), under the sandbox's lock, the way
   * the reaper renews a fleet's sandbox past its TTL. For backends that pool
   * sandboxes: FnCall replaces a worker a timed-out task may have left in
   * any state. Rejects when the create fails (the sandbox is then kept as
   * failed, for the next apply to replace); an id the node does not hold is
   * a no-op. Absent where no agent holds the sandboxes.
   */
  recreateSandbox?(id: string, reason: string): Promise<void>;
}

/** A sandbox's cgroup folders, absolute (e.g. /sys/fs/cgroup/memory/dsec/<id>). */
export interface SandboxCgroups {
  readonly memory?: string;
  readonly cpu?: string;
  readonly cpuacct?: string;
  readonly freezer?: string;
  readonly pids?: string;
  readonly unified?: string;
}

/**
 * Kernel attributes every process of a sandbox starts with. Density taps set
 * them on `prepare`, before the backend starts anything, because they are
 * inherited at fork and exec and cannot be given to a running process from
 * outside (PR_SET_MEMORY_MERGE cannot at all). A backend applies each one it
 * supports to the sandbox's first process and to every exec, and ignores
 * none silently: one it cannot apply is a provision error.
 */
export interface ProcessTraits {
  /** prctl(PR_SET_MEMORY_MERGE, 1): KSM may merge every anonymous page of every process, unchanged code included. */
  memoryMerge?: boolean;
  /**
   * Run only on CPU time nobody else wants: processes under SCHED_IDLE and
   * the sandbox's CPU cgroup marked idle (cpu.idle 1, the lowest weight).
   */
  idleCpu?: boolean;
  /**
   * The sandbox's processes share one core-scheduling cookie
   * (prctl(PR_SCHED_CORE)), so no task of another cookie ever runs on their
   * SMT sibling. Only set where the node supports it (see the QoS plugin).
   */
  coreScheduling?: boolean;
}

/** A read-only filesystem image of one layer, for backends that hand layers to a guest as block devices. */
export interface LayerImage {
  readonly format: 'erofs';
  /** The image file (for a split image: its metadata part). */
  readonly path: string;
  /** A split image's data blob, read through a second device (`mount -o device=`). */
  readonly blob?: string;
}

/**
 * What a backend built on the container backend asks of it for one sandbox
 * (the FnCall pool's workers run the guest agent as PID 1 on a read-only
 * stack). Set on `sandbox.container` before calling the container backend's
 * provision tap through the hook table; the container backend honours every
 * field or fails the create.
 */
export interface ContainerShape {
  /** PID 1, as argv inside the sandbox, instead of the container backend's idle init. */
  readonly init?: readonly string[];
  /** Host files or folders bind-mounted into the sandbox. */
  readonly binds?: readonly { readonly source: string; readonly target: string; readonly readonly: boolean }[];
  /** Writable scratch: a tmpfs at each path, capped in MiB. */
  readonly tmpfs?: readonly { readonly target: string; readonly sizeMiB: number }[];
  /** No writable upper layer: the layers are mounted read-only (writes go only to `tmpfs`). */
  readonly readonlyRoot?: boolean;
}

/** One FnCall invocation as the agent hands it to the backend's `invoke` tap. */
export interface FunctionCall {
  /** The fleet whose pool runs it (its sandboxes carry the fleet's ownership label). */
  readonly fleet: string;
  readonly node: NodeContext;
  readonly task: FunctionTask;
}

/**
 * One sandbox as it moves through the lifecycle on a node. The agent persists
 * it (as JSON) after every step, so plugins must keep only JSON-able data in
 * `storage` and `backend`.
 */
export interface SandboxContext {
  readonly spec: SandboxSpec;
  readonly node: NodeContext;
  /** The sandbox's private folder on the node; removed after `destroy`. */
  readonly dir: string;
  status: SandboxStatus;
  /** Read-only layer trees, bottom to top, set by the storage plugin in `resolveLayers`. */
  lowerDirs: string[];
  /**
   * The same layers as image files where the storage keeps them so (EROFS),
   * index for index with `lowerDirs` (undefined where a layer is a plain
   * tree). Set by the storage plugin in `resolveLayers`; VM backends hand
   * them to the guest as read-only block devices.
   */
  lowerImages?: (LayerImage | undefined)[];
  /** Set by a backend layered on the container backend (see ContainerShape). */
  container?: ContainerShape;
  /** Storage plugin's own record (e.g. which mounts it made). */
  storage: Record<string, unknown>;
  /** Backend plugin's own record (e.g. the runtime's container id, pid). */
  backend: Record<string, unknown>;
  /** Density plugins' own records, each under its plugin name (e.g. what a reclaim pushed out). */
  density: Record<string, unknown>;
  /** Set by density taps on `prepare`, applied by the backend; see ProcessTraits. */
  traits: ProcessTraits;
  /**
   * Where the sandbox's processes are accounted, set by a backend that uses
   * cgroups once it provisioned: the absolute cgroup folder per cgroup-v1
   * controller (`unified` on cgroup v2). Density plugins read and write
   * their files (memory limits for reclaim, cgroup.procs for KSM figures).
   */
  cgroups?: SandboxCgroups;
  readonly createdAt: string;
}

/** What a backend reports about a sandbox it was asked to look at. */
export type BackendProbe = Extract<SandboxStatus, 'running' | 'paused' | 'stopped'>;

/** A layer to publish on a node: its model plus the digest the engine computed. */
export interface PublishRequest {
  readonly layer: LayerModel;
  readonly node: NodeContext;
}

/** What the agent asks of a backend's `snapshot` tap. */
export interface SnapshotRequest {
  /**
   * An empty directory on the node for the tap to fill with a copy of the
   * sandbox's writable layer. The caller publishes it and then removes it.
   */
  readonly into: string;
  /** Absolute paths inside the sandbox to leave out of the copy (secrets, build residue), with everything under them. */
  readonly exclude: readonly string[];
}

/** A sandbox's writable layer, copied. */
export interface SnapshotResult {
  /**
   * The directory holding the copy (`request.into`), in overlayfs-native
   * form: deletions as whiteouts (char 0:0), replaced directories marked
   * opaque (`trusted.overlay.opaque=y`), `exclude` paths gone.
   */
  readonly dir: string;
  /** Paths (relative to the root) dropped because a layer cannot hold them: sockets, FIFOs, device nodes. */
  readonly skipped: readonly string[];
}

export function createHooks() {
  return Object.freeze({
    // ------------------------------------------------------------ engine
    /** After a config file is loaded and turned into a model, before the graph is built. Taps may return a changed model (e.g. add defaults). */
    configLoaded: new SyncWaterfallHook<[ConfigModel]>(['config']),
    /** After schema validation passed. Taps may push errors or warnings about the model (a policy's own rules). */
    validate: new SyncHook<[ConfigModel, Diagnostic[]]>(['config', 'diagnostics']),
    /** After the planner diffed desired against live. Each tap may return a refined plan (e.g. add warnings). */
    plan: new AsyncSeriesWaterfallHook<[Plan]>(['plan']),
    /** After the plan is final, before it is shown or saved. A tap vetoes it by throwing a DsecError (code DSEC_PLAN_VETOED). */
    reviewPlan: new AsyncSeriesHook<[Plan]>(['plan']),
    /** Before apply starts one resource change. Taps may throw to stop that change (it is then reported as failed). */
    beforeChange: new AsyncSeriesHook<[ResourceChange]>(['change']),
    /** After one resource change finished (and was recorded in the state), failed or not. */
    afterChange: new AsyncSeriesHook<[ResourceChange, Error | null]>(['change', 'error']),
    /** After each sandbox operation of a fleet change; the progress bar listens here. Taps must not throw. */
    sandboxOperation: new SyncHook<[string, SandboxOperation, Error | null]>(['fleet', 'operation', 'error']),
    /** After apply finished the whole plan, with the changes that failed (empty on success). */
    applied: new AsyncSeriesHook<[Plan, readonly ResourceChange[]]>(['plan', 'failed']),

    // --------------------------------------------------------- lifecycle
    /**
     * The agent started: it re-adopted its sandboxes and is about to serve.
     * Node-wide set-up taps here (a zram swap device, KSM's scan rate). A
     * failing tap is logged, never fatal: the agent serves without it.
     */
    agentStarted: new AsyncSeriesHook<[NodeContext]>(['node']),
    /**
     * What `GET /v1/node` (and so every refresh and the plan's capacity check)
     * says about the node. Each tap may return a refined copy: admission adds
     * `allocatable`, `requested` and its policy. Must be cheap: no per-sandbox I/O.
     */
    describeNode: new AsyncSeriesWaterfallHook<[NodeInfo, NodeContext]>(['info', 'node']),
    /**
     * `dsec nodes`: the node's full usage report. The agent fills the counts
     * and per-sandbox usage (from the `usage` backend hooks); density taps
     * fill their sections (`memory.sharedMiB`, `memory.reclaimedMiB`, `swap`,
     * `qos`, the per-fleet figures) in place.
     */
    nodeUsage: new AsyncSeriesHook<[NodeContext, NodeUsage]>(['node', 'usage']),
    /**
     * Cluster provider only, in the engine's process: choose a node for a new
     * sandbox among `nodes` (the healthy ones that did not refuse it yet).
     * The first tap that returns a node name wins; none answering is
     * DSEC_PLACEMENT_FAILED. The same `nodes` array is passed for every
     * sandbox of one apply (refreshed only on retries), so a tap may key its
     * own bookkeeping of the placements it made on it (a WeakMap): the
     * nodes' `requested` figures do not include them yet.
     */
    place: new AsyncSeriesBailHook<[SandboxSpec, readonly NodeInfo[]], string | undefined>(['spec', 'nodes']),
    /** On the node, before anything is created: the first tap that returns a reason refuses the sandbox. */
    admit: new AsyncSeriesBailHook<[SandboxContext], string | undefined>(['sandbox']),
    /** Compute a layer's digest without publishing it. The storage plugin answers. */
    digestLayer: new AsyncSeriesBailHook<[PublishRequest], string | undefined>(['request']),
    /** Publish a layer into the node's store. The storage plugin answers with the record. */
    publishLayer: new AsyncSeriesBailHook<[PublishRequest], LayerRecord | undefined>(['request']),
    /** List the published layers. The storage plugin answers. */
    listLayers: new AsyncSeriesBailHook<[NodeContext], LayerRecord[] | undefined>(['node']),
    /** Remove a published layer no sandbox uses. The storage plugin answers `true`. */
    unpublishLayer: new AsyncSeriesBailHook<[NodeContext, string, string], true | undefined>(['node', 'name', 'version']),
    /**
     * Merge a run of consecutive published layers (bottom to top) into one
     * image, offline (`dsec layers squash`); later sandboxes stacking exactly
     * that run get one lower dir for it. The storage plugin answers with the
     * record (the existing one when the run was squashed before).
     */
    squashLayers: new AsyncSeriesBailHook<[NodeContext, readonly LayerRef[]], SquashRecord | undefined>(['node', 'layers']),
    /** What the node's store is (format, why it fell back) and what it has mounted, with read counters. The storage plugin answers. */
    storageStats: new AsyncSeriesBailHook<[NodeContext], StorageStats | undefined>(['node']),
    /** After admission: turn `spec.layers` into read-only trees and set `sandbox.lowerDirs`. Storage taps here. */
    resolveLayers: new AsyncSeriesHook<[SandboxContext]>(['sandbox']),
    /**
     * After the layers resolved, before the backend starts anything: density
     * taps set `sandbox.traits` (see ProcessTraits). A throw fails the create.
     */
    prepare: new AsyncSeriesHook<[SandboxContext]>(['sandbox']),
    /** Create and start the sandbox on its backend, keyed by `spec.backend`. A tap returns `true` once it is running. */
    provision: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext], true | undefined>(['sandbox'])),
    /** The sandbox is running. Taps may tune it (memory sharing, CPU QoS) but must not fail it. */
    started: new AsyncParallelHook<[SandboxContext]>(['sandbox']),
    /**
     * Run a command in a running sandbox to its end, keyed by backend kind
     * (the agent resumes a paused one first). `io` says how the caller is
     * attached: output it streams as it comes (not repeated in the answer),
     * the handle and pid once it started (so input and resize can reach it
     * through `process`), an abort when the caller went away (the tap kills
     * the command). A request a backend cannot honour (a tty, an open stdin)
     * is DSEC_BACKEND_UNSUPPORTED; a throw is the call's failure.
     */
    exec: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext, ExecRequest, ExecIO], ExecOutput | undefined>(['sandbox', 'request', 'io'])),
    /**
     * A command that outlives its call, or is driven by handle: start a
     * background one; write its stdin, signal it, resize its terminal, wait
     * for it, read its output so far, list, forget. Keyed by backend kind;
     * the answer of each op is ProcessAnswers[op]. No tap: the backend has
     * no background commands (DSEC_BACKEND_UNSUPPORTED). An unknown handle
     * is DSEC_GUEST_UNKNOWN_HANDLE.
     */
    process: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext, ProcessCall], unknown>(['sandbox', 'call'])),
    /**
     * Persistent shells in a sandbox: open one, run a command in it (its
     * cwd, environment and variables carry to the next), interrupt the
     * command in flight, close it, list them. Keyed by backend kind; the
     * answer of each op is SessionAnswers[op]. No tap: DSEC_BACKEND_UNSUPPORTED.
     */
    session: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext, SessionCall], unknown>(['sandbox', 'call'])),
    /**
     * Read one file inside a running sandbox, keyed by backend kind (the
     * agent resumes a paused one first). Paths resolve inside the sandbox's
     * own root: a symlink planted by code inside never reaches the host.
     * Missing file: DSEC_FILE_NOT_FOUND; bigger than maxBytes: DSEC_FILE_TOO_LARGE.
     */
    readFile: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext, ReadFileRequest], FileContent | undefined>(['sandbox', 'request'])),
    /** Create or replace one file inside a running sandbox (parents created), keyed by backend kind; `true` when written. Same path rules as readFile. */
    writeFile: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext, WriteFileRequest], true | undefined>(['sandbox', 'request'])),
    /**
     * Run one stateless task on a fleet's pool, keyed by backend kind (the
     * FnCall backend). The tap queues it until a worker is free, runs it,
     * resets the worker, and answers with the result; a timed-out task is a
     * result (`timedOut`), not a throw.
     */
    invoke: new HookMap((_backend: string) => new AsyncSeriesBailHook<[FunctionCall], FunctionResult | undefined>(['call'])),
    /** Change a running sandbox's limits in place, keyed by backend kind. A tap returns `true` when done. */
    update: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext, Resources], true | undefined>(['sandbox', 'resources'])),
    /** Ask the backend what became of a sandbox (agent restart, refresh). Keyed by backend kind. */
    probe: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext], BackendProbe | undefined>(['sandbox'])),
    /** Freeze every process of a running sandbox, keyed by backend kind. A tap returns `true` once nothing in it runs. */
    pause: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext], true | undefined>(['sandbox'])),
    /**
     * The sandbox is frozen (the backend's pause tap returned). Density taps
     * reclaim its memory here (push pages to swap, drop page cache) and keep
     * what they did in `sandbox.density`. A failing tap is logged; the
     * sandbox stays paused.
     */
    paused: new AsyncSeriesHook<[SandboxContext]>(['sandbox']),
    /**
     * Before the backend thaws a paused sandbox: density taps undo their
     * reclaim (restore limits) and prefetch what they pushed out, so the
     * first request after a resume does not fault page by page.
     */
    resuming: new AsyncSeriesHook<[SandboxContext]>(['sandbox']),
    /** Thaw a paused sandbox, keyed by backend kind. A tap returns `true` once it runs again. */
    resume: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext], true | undefined>(['sandbox'])),
    /** What a running or paused sandbox uses now (its cgroup's counters), keyed by backend kind. */
    usage: new HookMap((_backend: string) => new AsyncSeriesBailHook<[SandboxContext], SandboxUsage | undefined>(['sandbox'])),
    /**
     * Copy a running or paused sandbox's writable layer, keyed by backend
     * kind, when `dsec sandbox snapshot` or a layer build asks for a new
     * layer. The tap freezes the sandbox while it copies (a consistent copy),
     * drops `request.exclude`, and leaves the sandbox as it found it. The
     * agent publishes the copy through the storage hooks. No tap: the backend
     * cannot snapshot (DSEC_BACKEND_UNSUPPORTED).
     */
    snapshot: new HookMap(
      (_backend: string) =>
        new AsyncSeriesBailHook<[SandboxContext, SnapshotRequest], SnapshotResult | undefined>(['sandbox', 'request']),
    ),
    /**
     * Stop and remove a sandbox. Every plugin that left something behind taps
     * it: backends at STAGE.BACKEND stop processes, storage at STAGE.CLEANUP
     * unmounts. Taps must be idempotent: destroy runs again after a crash.
     */
    destroy: new AsyncSeriesHook<[SandboxContext]>(['sandbox']),
  });
}

export type Hooks = ReturnType<typeof createHooks>;
