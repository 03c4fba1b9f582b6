import type { Construct } from 'constructs';
import type { FleetDocument, QosClass, ResourcesDocument, TtlDocument, UpdateDocument } from '../config/document.generated.js';
import { defined, DsecConstruct, type ConstructProblem } from './dsec-construct.js';
import { Environment } from './environment.js';

export interface FleetProps {
  /** The environment the sandboxes run: an Environment of this App, or its name. */
  readonly environment: Environment | string;
  /** The backend kind that isolates the sandboxes; a plugin provides it. @default "container" */
  readonly backend?: string;
  /** How many sandboxes the fleet keeps, 0 to 100000. */
  readonly replicas: number;
  /**
   * Per-sandbox limits: cpu in cores or `"500m"`, memory in MiB or `"512Mi"`/`"2Gi"`, pids.
   * @default { cpu: 1, memory: "256Mi", pids: 256 }
   */
  readonly resources?: ResourcesDocument;
  /** `none`: only a loopback interface. @default "none" */
  readonly network?: 'none';
  /** @default "best-effort" */
  readonly qos?: QosClass;
  /** Lifetime limits: `"90s"`, `"30m"`, `"2h"`, `"1d"` or seconds. @default no limits */
  readonly ttl?: TtlDocument;
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
    const { environment, labels, ...rest } = this.props;
    return defined({
      ...rest,
      environment: typeof environment === 'string' ? environment : environment.name,
      labels: labels === undefined ? undefined : { ...labels },
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
