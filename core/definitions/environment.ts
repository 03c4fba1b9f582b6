import type { Construct } from 'constructs';
import type { DiskImageDocument, EnvironmentDocument } from '../config/document.generated.js';
import { defined, DsecConstruct, type ConstructProblem } from './dsec-construct.js';
import { Layer } from './layer.js';

export interface EnvironmentProps {
  /**
   * The stack, bottom to top: one base, at most one workspace, then toolkits.
   * Layers of this App, or layer names (`name` / `name@version`).
   */
  readonly layers: readonly (Layer | string)[];
  /** Environment variables of every sandbox. @default {} */
  readonly env?: Readonly<Record<string, string>>;
  /** The absolute working directory of commands. @default "/" */
  readonly workdir?: string;
  /** The user commands run as, a name or uid[:gid]. @default "root" */
  readonly user?: string;
  /**
   * A bootable disk image, for backends that boot one (`backend: 'vm'`): a path ending in
   * `.qcow2`, `.raw` or `.img` (the format follows), or `{ path, format: 'qcow2' | 'raw' }`.
   * A relative path resolves against the folder of dsec.ts. @default none
   */
  readonly image?: DiskImageDocument;
}

/** An ordered stack of layers plus env vars, workdir and user. */
export class Environment extends DsecConstruct {
  readonly section = 'environments' as const;
  readonly layers: readonly (Layer | string)[];
  readonly env?: Readonly<Record<string, string>>;
  readonly workdir?: string;
  readonly user?: string;
  readonly image?: DiskImageDocument;

  constructor(scope: Construct, id: string, props: EnvironmentProps) {
    super(scope, id);
    this.layers = [...(props.layers ?? [])];
    this.env = props.env === undefined ? undefined : { ...props.env };
    this.workdir = props.workdir;
    this.user = props.user;
    this.image = typeof props.image === 'object' && props.image !== null ? { ...props.image } : props.image;
  }

  toDocument(): EnvironmentDocument {
    const layers = this.layers.map((layer) => (typeof layer === 'string' ? layer : layer.name));
    return defined({
      layers: layers as EnvironmentDocument['layers'],
      env: this.env,
      workdir: this.workdir,
      user: this.user,
      image: this.image,
    });
  }

  override problems(): ConstructProblem[] {
    return this.layers.flatMap((layer, index) =>
      layer instanceof Layer && layer.node.root !== this.node.root
        ? [{
            code: 'DSEC_CONFIG_UNKNOWN_LAYER' as const,
            subPath: `layers/${index}`,
            message: `layer '${layer.name}' belongs to another App (${layer.node.path}); create it in this App or pass its name`,
          }]
        : [],
    );
  }
}
