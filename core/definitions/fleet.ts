import type { Construct } from 'constructs';
import type {
  DensityDocument,
  FleetDocument,
  PlacementDocument,
  PoolDocument,
  QosClass,
  ResourcesDocument,
  TtlDocument,
  UpdateDocument,
} from '../config/document.generated.js';
import { defined, DsecConstruct, type ConstructProblem } from './dsec-construct.js';
import { Environment } from './environment.js';

export interface FleetProps {
  /** The environment the sandboxes run: an Environment of this App, or its name. */
  readonly environment: Environment | string;
  /** The backend kind that isolates the sandboxes; a plugin provides it. @default "container" */
  readonly backend?: string;
  /** How many ready, unclaimed sandboxes the fleet keeps warm, 0 to 100000 (claimed ones come on top). */
  readonly replicas: number;
  /**
   * Per-sandbox limits: cpu in cores or `"500m"`, memory in MiB or `"512Mi"`/`"2Gi"`, pids.
   * @default { cpu: 1, memory: "256Mi", pids: 256 }
   */
  readonly resources?: ResourcesDocument;
  /** `none`: only a loopback interface. @default "none" */
  readonly network?: 'none';
  /**
   * CPU QoS class: `best-effort` runs under SCHED_IDLE in an idle CPU cgroup;
   * `latency-sensitive` gets core scheduling where the node supports it.
   * @default "best-effort"
   */
  readonly qos?: QosClass;
  /**
   * Lifetime limits the node agent's reaper enforces: `"90s"`, `"30m"`, `"2h"`, `"1d"` or seconds.
   * A reaped sandbox is re-created with the same id, so the pool keeps its replicas.
   * @default no limits
   */
  readonly ttl?: TtlDocument;
  /**
   * Density switches: `memorySharing` lets the kernel merge identical pages (KSM; a change
   * replaces the sandboxes), `reclaimOnPause` pushes a paused sandbox's memory out (changed in place).
   * @default { memorySharing: false, reclaimOnPause: true }
   */
  readonly density?: DensityDocument;
  /**
   * Where the cluster provider puts the sandboxes: `strategy` `spread` (the least loaded of
   * k sampled nodes) or `pack` (the most loaded node it still fits on), and a `nodeSelector`
   * of labels a node must carry (`{ gpu: 'true' }`). Ignored by the local provider.
   * @default { strategy: 'spread', nodeSelector: {} }
   */
  readonly placement?: PlacementDocument;
  /**
   * Options for the backend alone, checked by its plugin (e.g. `{ vmm: 'qemu' }` for a microVM,
   * `{ display: 'vnc' }` for a VM); see the backend's documentation. A change replaces the sandboxes.
   * @default none
   */
  readonly backendOptions?: Readonly<Record<string, unknown>>;
  /**
   * How the warm pool hands sandboxes out: `maxClaimed` bounds how many are claimed at once
   * (acquires past it wait), `claimTtl` makes a claim without its own ttl lapse (`"1h"`).
   * @default no bound, claims never lapse
   */
  readonly pool?: PoolDocument;
  /** Labels on every sandbox; keys starting with `dsec.io/` are reserved. @default {} */
  readonly labels?: Readonly<Record<string, string>>;
  /** @default { maxUnavailable: 1 } */
  readonly update?: UpdateDocument;
}

/** A set of identical sandboxes of one environment on one backend. */
export class Fleet extends DsecConstruct {
  readonly section = 'fleets' as const;
  readonly props: FleetProps;

  constructor(scope: Construct, id: string, props: FleetProps) {
    super(scope, id);
    this.props = { ...props };
  }

  toDocument(): FleetDocument {
    const { environment, labels, density, placement, backendOptions, pool, ...rest } = this.props;
    return defined({
      ...rest,
      environment: typeof environment === 'string' ? environment : environment.name,
      density: density === undefined ? undefined : defined({ ...density }),
      placement:
        placement === undefined
          ? undefined
          : defined({ ...placement, nodeSelector: placement.nodeSelector === undefined ? undefined : { ...placement.nodeSelector } }),
      labels: labels === undefined ? undefined : { ...labels },
      backendOptions: backendOptions === undefined ? undefined : { ...backendOptions },
      pool: pool === undefined ? undefined : defined({ ...pool }),
    });
  }

  override problems(): ConstructProblem[] {
    const environment = this.props.environment;
    if (environment instanceof Environment && environment.node.root !== this.node.root) {
      return [{
        code: 'DSEC_CONFIG_UNKNOWN_ENVIRONMENT',
        subPath: 'environment',
        message: `environment '${environment.name}' belongs to another App (${environment.node.path}); create it in this App or pass its name`,
      }];
    }
    return [];
  }
}
