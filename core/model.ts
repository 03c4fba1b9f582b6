/**
 * The desired-state model: what a `dsec.yaml` or `dsec.ts` declares, after
 * validation, with every default filled in and every reference resolved by
 * name. Plain data only: the graph, the planner and `dsec synth` all read it,
 * nothing here touches a machine.
 *
 * Layer digests are not part of the model: computing one means reading the
 * layer's content, which is the storage plugin's job at plan time
 * (see core/engine/layers.ts).
 */

/** Where a layer's content comes from. Paths are absolute once in the model. */
export type LayerSource =
  /** A directory tree on this machine, copied into the store as it is. */
  | { readonly type: 'dir'; readonly path: string }
  /** A tar or tar.gz archive; absolute paths, `..`, devices and escaping links are refused. */
  | { readonly type: 'tar'; readonly path: string }
  /**
   * A minimal root filesystem made from a static busybox binary on this
   * machine (Debian's busybox-static): /bin/busybox, its applet links, and
   * the usual empty top-level directories. It lets a project carry a base
   * layer without shipping a root filesystem.
   */
  | { readonly type: 'busybox'; readonly path: string }
  /**
   * An OCI image: an OCI image layout directory or a docker-archive tarball
   * (told apart by looking). Its layers are applied in order, whiteouts
   * honoured, into one tree. `image` picks one when there are several.
   */
  | { readonly type: 'oci'; readonly path: string; readonly image?: string }
  /**
   * Shell commands the node agent runs in a throwaway container sandbox on
   * the parent layers; the sandbox's writable layer becomes this layer.
   */
  | BuildSource
  /** Already in the node's store as `name@version` (a snapshot): nothing to build, never unpublished by dsec. */
  | { readonly type: 'published' };

export interface BuildSource {
  readonly type: 'build';
  /** Parent layer refs (`name@version`), bottom to top. */
  readonly from: readonly string[];
  readonly steps: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  /** @default "/" */
  readonly workdir: string;
  /**
   * The parents resolved to digests, filled in by the engine before it asks
   * for a digest or a publish (never in a config): a digest may be pending
   * (see `isPendingDigest`) when a parent is itself not built yet.
   */
  readonly parents?: readonly { readonly name: string; readonly version: string; readonly digest: string }[];
}

export type LayerKind = 'base' | 'workspace' | 'toolkit';

export interface LayerModel {
  /** `name@version`, the layer's address in the config and the store. */
  readonly ref: string;
  readonly name: string;
  /** A semantic version: `1.2.3`, optionally `-pre.1` / `+build`. */
  readonly version: string;
  readonly kind: LayerKind;
  readonly source: LayerSource;
}

export interface EnvironmentModel {
  readonly name: string;
  /** Layer refs (`name@version`) bottom to top: the base, then the workspace if any, then toolkits. */
  readonly layers: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  /** @default "/" */
  readonly workdir: string;
  /** @default "root" */
  readonly user: string;
  /** A bootable disk image (path resolved against the config's folder), for the full-VM backend. */
  readonly image?: { readonly path: string; readonly format: 'qcow2' | 'raw' };
}

export interface Resources {
  /** CPU cores, fractional allowed (0.5 = half a core). @default 1 */
  readonly cpu: number;
  /** Memory limit in MiB. @default 256 */
  readonly memoryMiB: number;
  /** Maximum number of processes. @default 256 */
  readonly pids: number;
}

export interface FleetModel {
  readonly name: string;
  readonly environment: string;
  /** Backend kind, e.g. `container`. The engine never interprets it: a backend plugin does. */
  readonly backend: string;
  /** Ready, unclaimed sandboxes kept warm; claimed ones come on top. */
  readonly replicas: number;
  readonly resources: Resources;
  /** `none`: only a loopback interface. Allow-lists come with the network work. */
  readonly network: 'none';
  readonly qos: 'best-effort' | 'latency-sensitive';
  readonly ttl: { readonly maxLifetimeSeconds?: number; readonly idleStopSeconds?: number };
  /** Density switches, read by the density plugins on the node. @default { memorySharing: false, reclaimOnPause: true } */
  readonly density: { readonly memorySharing: boolean; readonly reclaimOnPause: boolean };
  readonly labels: Readonly<Record<string, string>>;
  /** Where the cluster provider may put the sandboxes; absent: spread over any healthy node. Never part of the spec hash. */
  readonly placement?: { readonly strategy: 'spread' | 'pack'; readonly nodeSelector: Readonly<Record<string, string>> };
  /** Options for the backend plugin alone (validated by its `validate` tap); absent: none. */
  readonly backendOptions?: Readonly<Record<string, unknown>>;
  /** How the warm pool hands sandboxes out (acquire); absent: no bound on claims, claims never lapse. */
  readonly pool?: FleetPoolModel;
  readonly update: {
    /** How many sandboxes of the fleet may be down at once during a replace. @default 1 */
    readonly maxUnavailable: number;
  };
}

export interface FleetPoolModel {
  /** At most this many claimed at once (on a cluster: shared out over the nodes). @default no bound */
  readonly maxClaimed?: number;
  /** A claim without a ttl of its own lapses after this long. @default none */
  readonly claimTtlSeconds?: number;
}

export type ProviderModel =
  | { readonly type: 'local'; readonly stateDir: string }
  | {
      readonly type: 'cluster';
      readonly etcd: readonly string[];
      /** The file holding the agents' shared token, absolute. */
      readonly tokenFile: string;
      /** The etcd key prefix. @default "/dsec" */
      readonly prefix: string;
    };

/** Where the state and its lock live. */
export type StateModel =
  | { readonly backend: 'local' }
  | {
      readonly backend: 'etcd';
      /** `<prefix>/state/<key>`. @default the config folder's name */
      readonly key: string;
      /** @default the cluster provider's endpoints */
      readonly etcd: readonly string[];
      /** @default the cluster provider's prefix, else "/dsec" */
      readonly prefix: string;
    };

export interface PluginRef {
  /** An npm package name, or a path resolved against the config file's folder. */
  readonly name: string;
  readonly options: Readonly<Record<string, unknown>>;
}

/**
 * The whole desired state. Maps are keyed by name (layers by layer name: a
 * config declares one version of each layer, and environments pick it up by
 * name, so bumping a toolkit's version is a one-line change) and iterate in
 * sorted order.
 */
export interface ConfigModel {
  readonly version: 1;
  /** The file the model came from (dsec.yaml or dsec.ts), absolute. */
  readonly file: string;
  /** The folder holding `file`; relative paths in the config resolve against it. */
  readonly dir: string;
  readonly provider: ProviderModel;
  /** Absent when the config has no `state:` section: a local state file. @default { backend: 'local' } */
  readonly state?: StateModel;
  readonly plugins: readonly PluginRef[];
  readonly layers: Readonly<Record<string, LayerModel>>;
  readonly environments: Readonly<Record<string, EnvironmentModel>>;
  readonly fleets: Readonly<Record<string, FleetModel>>;
}
