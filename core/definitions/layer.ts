import type { Construct } from 'constructs';
import type { BusyboxSourceDocument, DirSourceDocument, LayerDocument, LayerKind, LayerSourceDocument, TarSourceDocument } from '../config/document.generated.js';
import { DsecConstruct } from './dsec-construct.js';

export interface LayerProps {
  /** `base` (OS and runtimes), `workspace` (a task's repository and dependencies) or `toolkit` (harness, tools). */
  readonly kind: LayerKind;
  /** A semantic version, `MAJOR.MINOR.PATCH` with optional `-prerelease` and `+build`. */
  readonly version: string;
  /** Where the content comes from: `Layer.busybox()`, `Layer.dir(path)` or `Layer.tar(path)`. */
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
}
