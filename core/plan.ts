/**
 * The plan and state data shapes. A plan is a value: it can be printed, saved
 * with `plan -out`, loaded, compared and tested without touching a cluster.
 * The functions that make and consume these live in core/engine and core/state.
 *
 * Fields marked "display only" are for people and `--json` readers; apply never
 * reads them. Apply reads `operations` and `desired`.
 */
import type { DensitySettings, LayerRef, SandboxSpec, SandboxTtl } from './live.js';
import type { ConfigModel, FleetModel, LayerModel, Resources } from './model.js';

/** The small enum of plan actions, Terraform's, with their diff symbols. */
export type Action = 'no-op' | 'create' | 'update' | 'replace' | 'delete';

export const ACTION_SYMBOL: Readonly<Record<Action, string>> = Object.freeze({
  'no-op': ' ',
  create: '+',
  update: '~',
  replace: '-/+',
  delete: '-',
});

/** Terraform's JSON `actions` list for each action. */
export const ACTION_JSON: Readonly<Record<Action, readonly string[]>> = Object.freeze({
  'no-op': ['no-op'],
  create: ['create'],
  update: ['update'],
  replace: ['delete', 'create'],
  delete: ['delete'],
});

/** Why an action was chosen; Terraform's `action_reason` values where they fit. */
export type ActionReason =
  | 'replace_because_cannot_update'
  | 'replace_by_request'
  | 'delete_because_no_resource_config'
  | 'delete_because_destroy_mode'
  | 'create_because_missing'
  | 'update_replicas'
  | 'update_resources'
  /** The fleet's lifetime limits changed: recorded on each live sandbox for the reaper. */
  | 'update_ttl'
  /** A density switch that applies in place (reclaimOnPause) changed. */
  | 'update_density'
  /** The fleet's labels changed: each live sandbox gets them in place. */
  | 'update_labels'
  /** The nodes' pool records of the fleet (template, claim bound) are missing or out of date: set again, no sandbox touched. */
  | 'update_pool'
  | 'drift';

/** One step on one sandbox of a fleet. The unit apply executes and records. */
export type SandboxOperation =
  | { readonly op: 'create'; readonly spec: SandboxSpec }
  /**
   * Delete `id`. Never a sandbox a holder has at apply time (acquired since
   * the plan was made: skipped), unless `claimed`: the plan takes it from
   * its holder on purpose (`--replace-claimed`, a destroy with that flag).
   */
  | { readonly op: 'delete'; readonly id: string; readonly claimed?: boolean; readonly because?: string }
  /**
   * Delete `id`, then create `spec` in its place; batched by the fleet's
   * `maxUnavailable`. `node`: where `id` is (its pool makes the replacement
   * itself when `id` was acquired since the plan, and the replace is skipped).
   */
  | { readonly op: 'replace'; readonly id: string; readonly spec: SandboxSpec; readonly because: string; readonly node?: string }
  /**
   * Change a live sandbox in place: the whole SandboxUpdate the provider gets.
   * `ttl` and `density` are absent only in plans saved before they existed.
   */
  | {
      readonly op: 'update';
      readonly id: string;
      readonly resources: Resources;
      readonly ttl?: SandboxTtl;
      readonly density?: DensitySettings;
      /** The fleet's labels (absent in plans saved before labels were updated in place). */
      readonly labels?: Readonly<Record<string, string>>;
    };

/** Per-fleet sandbox counts, so a fleet of 32,000 is one line. Display only. */
export interface FleetSandboxSummary {
  /** Ready, unclaimed sandboxes the fleet keeps (replicas). */
  readonly desired: number;
  readonly live: number;
  readonly create: number;
  readonly delete: number;
  readonly replace: number;
  readonly update: number;
  readonly unchanged: number;
  /** The pool now: fresh, unclaimed sandboxes (of any spec). Absent in plans saved before pools. */
  readonly ready?: number;
  /** Held by a rollout; never counted in replicas, never replaced under it. */
  readonly claimed?: number;
  /** Released with keep: used, never handed out again. */
  readonly kept?: number;
  /** Claimed sandboxes of an older spec: their pool makes current ones, and they go when released. */
  readonly replaceWhenReleased?: number;
  /** Claimed sandboxes this plan takes from their holders (`--replace-claimed`). */
  readonly replaceClaimed?: number;
}

export interface ResourceChange {
  /** `layer.<name>@<version>` or `fleet.<name>`. */
  readonly address: string;
  readonly type: 'layer' | 'fleet';
  readonly name: string;
  readonly action: Action;
  readonly reason: ActionReason | null;
  /** Display only: the attributes before and after (sandboxes summarised, not listed). */
  readonly before: Readonly<Record<string, unknown>> | null;
  readonly after: Readonly<Record<string, unknown>> | null;
  /** Attribute paths that force a replace, e.g. [["environment"]]. */
  readonly replacePaths: readonly (readonly string[])[];
  /** Fleets only. */
  readonly fleet?: {
    readonly summary: FleetSandboxSummary;
    readonly maxUnavailable: number;
    /** What apply does to this fleet's sandboxes, in order. */
    readonly operations: readonly SandboxOperation[];
    /**
     * State bookkeeping apply does before the operations, with no provider
     * call: sandboxes live with this state's lineage but missing from it (a
     * crashed apply created them) are recorded...
     */
    readonly adopt?: readonly SandboxState[];
    /** ...and sandbox ids the state lists but that are gone are dropped. */
    readonly forget?: readonly string[];
    /**
     * The nodes' pool records: how many fresh sandboxes each node keeps that
     * the plan leaves in place (node -> count). Apply sets each node's pool
     * to this before the operations and adds what it made after them, so a
     * pool refilling meanwhile never doubles the engine's creates. Absent
     * for a fleet being deleted, and in plans saved before pools.
     */
    readonly pool?: { readonly keep: Readonly<Record<string, number>>; readonly revision: string };
  };
}

export interface Plan {
  readonly format_version: '1.0';
  readonly dsec_version: string;
  readonly created_at: string;
  readonly mode: 'normal' | 'destroy';
  readonly config_file: string;
  /** The state this plan was made against; apply refuses if it moved on. */
  readonly prior_state: { readonly lineage: string; readonly serial: number };
  readonly resource_changes: readonly ResourceChange[];
  readonly warnings: readonly string[];
  /** The desired resources apply needs, so a saved plan applies without the config. */
  readonly desired: {
    readonly layers: Readonly<Record<string, LayerModel & { readonly digest: string }>>;
    readonly fleets: Readonly<Record<string, FleetState['attributes']>>;
  };
}

// ---------------------------------------------------------------- state

export interface LayerState {
  readonly type: 'layer';
  readonly name: string;
  readonly version: string;
  readonly kind: LayerModel['kind'];
  readonly digest: string;
}

/** One sandbox dsec created and owns. */
export interface SandboxState {
  readonly id: string;
  readonly node: string;
  /** The fleet's spec hash when this sandbox was created (what forces a replace). */
  readonly specHash: string;
  readonly resources: Resources;
  readonly createdAt: string;
}

export interface FleetState {
  readonly type: 'fleet';
  readonly name: string;
  /** What was applied last: the fleet with its environment resolved to layer digests. */
  readonly attributes: Omit<FleetModel, 'environment'> & {
    readonly environment: string;
    readonly layers: readonly LayerRef[];
    readonly env: Readonly<Record<string, string>>;
    readonly workdir: string;
    readonly user: string;
    /** The environment's disk image, when it names one. */
    readonly image?: { readonly path: string; readonly format: 'qcow2' | 'raw' };
    /** Hash of backend + layers + env + workdir + user + network + qos (+ memory sharing when on, backend options and image when set): a change forces a replace. */
    readonly specHash: string;
  };
  readonly sandboxes: Readonly<Record<string, SandboxState>>;
}

export type ResourceState = LayerState | FleetState;

export interface StateFile {
  readonly format_version: 1;
  /** Random at creation; a plan made against another lineage never applies. */
  readonly lineage: string;
  /** Bumped on every write that changed content. */
  readonly serial: number;
  readonly dsec_version: string;
  readonly resources: Readonly<Record<string, ResourceState>>;
  /**
   * Sandbox ids `dsec state rm` told dsec to forget: they still carry this
   * lineage's label, so without this list refresh would adopt them back.
   * Refresh and the planner never touch them.
   */
  readonly forgotten?: readonly string[];
}

/** What the planner is given: desired, recorded and live. */
export interface PlanInput {
  readonly config: ConfigModel;
  readonly state: StateFile;
  readonly live: import('./live.js').LiveView;
  /** Digest of each declared layer (`name@version` -> digest), from the provider. */
  readonly layerDigests: Readonly<Record<string, string>>;
  readonly options: PlanOptions;
}

export interface PlanOptions {
  readonly destroy?: boolean;
  /** Only these addresses (and what they depend on). */
  readonly targets?: readonly string[];
  /** Force a replace of these addresses (`fleet.web`, or `fleet.web[sandbox-id]`). */
  readonly replace?: readonly string[];
  /**
   * Claimed sandboxes are replaced (their holders lose them) where the plan
   * would replace them (an environment change, `--replace`), and a fleet
   * with claims may be deleted. Without it they are marked outdated and go
   * when released, and deleting a fleet with claims is refused.
   */
  readonly replaceClaimed?: boolean;
}
