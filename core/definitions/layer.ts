import type { Construct } from 'constructs';
import type {
  BuildSourceDocument,
  BusyboxSourceDocument,
  DirSourceDocument,
  LayerDocument,
  LayerKind,
  LayerSourceDocument,
  OciSourceDocument,
  PublishedSourceDocument,
  TarSourceDocument,
} from '../config/document.generated.js';
import { defined, DsecConstruct, type ConstructProblem } from './dsec-construct.js';

/** What `Layer.build()` takes. */
export interface LayerBuildProps {
  /** The parent layers, bottom to top: Layers of this App, or layer names (`name` / `name@version`). */
  readonly from: readonly (Layer | string)[];
  /** Shell commands, each run with `/bin/sh -c`, in order. */
  readonly steps: readonly string[];
  /** Environment variables of the steps. @default {} */
  readonly env?: Readonly<Record<string, string>>;
  /** The absolute directory the steps run in. @default "/" */
  readonly workdir?: string;
}

/** A build source as the construct keeps it: parents may still be Layer objects. */
interface PendingBuild {
  readonly props: LayerBuildProps;
}

const pendingBuilds = new WeakMap<object, PendingBuild>();

export interface LayerProps {
  /** `base` (OS and runtimes), `workspace` (a task's repository and dependencies) or `toolkit` (harness, tools). */
  readonly kind: LayerKind;
  /** A semantic version, `MAJOR.MINOR.PATCH` with optional `-prerelease` and `+build`. */
  readonly version: string;
  /**
   * Where the content comes from: `Layer.busybox()`, `Layer.dir(path)`,
   * `Layer.tar(path)`, `Layer.oci(path, image?)`, `Layer.build({from, steps})`
   * or `Layer.published()`.
   */
  readonly source: LayerSourceDocument;
}

/** An immutable, read-only filesystem tree with a name (the construct id) and a version. */
export class Layer extends DsecConstruct {
  /**
   * A minimal root filesystem made from a static busybox binary on this machine.
   * @param path the binary. @default "/bin/busybox"
   */
  static busybox(path?: string): BusyboxSourceDocument {
    return { busybox: path === undefined ? {} : { path } };
  }

  /** A directory tree; a relative path is relative to the dsec.ts file's folder. */
  static dir(path: string): DirSourceDocument {
    return { dir: path };
  }

  /** A .tar or .tar.gz archive; a relative path is relative to the dsec.ts file's folder. */
  static tar(path: string): TarSourceDocument {
    return { tar: path };
  }

  /**
   * An OCI image layout directory or a docker-archive tarball (`docker save`),
   * its layers flattened into one; a relative path is relative to the dsec.ts
   * file's folder.
   * @param image which image when there are several (`name:tag`). @default the only one
   */
  static oci(path: string, image?: string): OciSourceDocument {
    return { oci: image === undefined ? { path } : { path, image } };
  }

  /**
   * Shell commands run in a throwaway container sandbox on `from`; what they
   * write (and delete) becomes the layer. Cached: an unchanged build does nothing.
   */
  static build(props: LayerBuildProps): BuildSourceDocument {
    const source: BuildSourceDocument = {
      build: defined({
        from: props.from.map((parent) => (typeof parent === 'string' ? parent : parent.name)) as BuildSourceDocument['build']['from'],
        steps: [...props.steps] as BuildSourceDocument['build']['steps'],
        env: props.env === undefined ? undefined : { ...props.env },
        workdir: props.workdir,
      }),
    };
    // Kept so the Layer can check its parents belong to the same App.
    pendingBuilds.set(source, { props });
    return source;
  }

  /** A layer already in the store as `name@version` (made by `dsec sandbox snapshot`): never built or unpublished by dsec. */
  static published(): PublishedSourceDocument {
    return { published: {} };
  }

  readonly section = 'layers' as const;
  readonly kind: LayerKind;
  readonly version: string;
  readonly source: LayerSourceDocument;

  constructor(scope: Construct, id: string, props: LayerProps) {
    super(scope, id);
    this.kind = props.kind;
    this.version = props.version;
    this.source = props.source;
  }

  /** `name@version`, the layer's address in the store. */
  get ref(): string {
    return `${this.name}@${this.version}`;
  }

  toDocument(): LayerDocument {
    return { kind: this.kind, version: this.version, source: this.source };
  }

  override problems(): ConstructProblem[] {
    const build = pendingBuilds.get(this.source);
    if (!build) return [];
    return build.props.from.flatMap((parent, index) =>
      parent instanceof Layer && parent.node.root !== this.node.root
        ? [{
            code: 'DSEC_CONFIG_UNKNOWN_LAYER' as const,
            subPath: `source/build/from/${index}`,
            message: `parent layer '${parent.name}' belongs to another App (${parent.node.path}); create it in this App or pass its name`,
          }]
        : [],
    );
  }
}
