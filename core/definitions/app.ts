import { RootConstruct } from 'constructs';
import { DsecError, type Diagnostic, type SourceLocation } from '../errors.js';
import type { DsecDocument, PluginEntry, ProviderDocument, StateDocument } from '../config/document.generated.js';
import { DsecConstruct, type Section } from './dsec-construct.js';
import { captureLocation, type CapturedLocation } from './source-location.js';

export interface AppProps {
  /** How dsec reaches the machines. @default { local: {} } (this machine, state in .dsec) */
  readonly provider?: ProviderDocument;
  /**
   * Where the state and its lock live: `{ backend: 'etcd', key?, etcd? }` shares them
   * through etcd (endpoints default to the cluster provider's, key to the config folder's name).
   * @default { backend: 'local' } (state.json in the provider's stateDir)
   */
  readonly state?: StateDocument;
  /** Plugins to load, in order: package names, ./relative/paths.js, or { name, options }. @default [] */
  readonly plugins?: readonly PluginEntry[];
}

/** Where a construct sits in the synthesised document and in the program. */
export interface ConstructSource {
  /** Document path of what it synthesises, e.g. `/fleets/workers` (`` for the App). */
  readonly path: string;
  /** The construct path, e.g. `infra/workers`. */
  readonly constructPath: string;
  /** The construct class, e.g. `Fleet`. */
  readonly kind: string;
  readonly id: string;
  readonly location?: SourceLocation;
  /** False when only the file is known (see CapturedLocation). */
  readonly exact: boolean;
}

export interface SynthOptions {
  /** Return the document even when validate() finds problems (the config loader reports them itself). @default false */
  readonly skipValidation?: boolean;
}

/** The root of a dsec.ts program: `export default app`. */
export class App extends RootConstruct {
  readonly props: AppProps;
  readonly location: CapturedLocation | undefined;

  constructor(props: AppProps = {}) {
    super('');
    this.props = props;
    this.location = captureLocation(this, new.target.name, '');
  }

  /**
   * The plain document, the same shape as dsec.yaml. Throws a DsecError
   * (DSEC_CONFIG_INVALID) carrying every problem of the tree unless
   * `skipValidation`; the schema and reference checks belong to the config
   * loader, which runs them on YAML and TypeScript alike.
   */
  synth(options: SynthOptions = {}): DsecDocument {
    if (!options.skipValidation) throwIfInvalid(this.validate());
    const document: DsecDocument = { version: 1 };
    if (this.props.provider !== undefined) document.provider = this.props.provider;
    if (this.props.state !== undefined) document.state = this.props.state;
    if (this.props.plugins !== undefined) document.plugins = [...this.props.plugins];
    const sections: Record<Section, Record<string, unknown>> = { layers: {}, environments: {}, fleets: {} };
    for (const construct of this.dsecConstructs()) {
      sections[construct.section][construct.name] ??= construct.toDocument();
    }
    return { ...document, ...sections } as DsecDocument;
  }

  /** Every problem across the tree, each prefixed with its construct path, located at its `new` call. */
  validate(): Diagnostic[] {
    const diagnostics: Diagnostic[] = [];
    const firstByName = new Map<string, DsecConstruct>();
    for (const construct of this.dsecConstructs()) {
      const path = documentPath(construct);
      const report = (code: Diagnostic['code'], message: string, subPath?: string) =>
        diagnostics.push({
          code,
          severity: 'error',
          message: `[${construct.node.path}] ${message}`,
          path: subPath ? `${path}/${subPath}` : path,
          ...(construct.location ? { location: construct.location.location } : {}),
        });
      const first = firstByName.get(path);
      if (first) {
        const noun = construct.section.replace(/s$/, '');
        report('DSEC_CONFIG_DUPLICATE', `duplicate ${noun} '${construct.name}': also declared at ${first.node.path}`);
      } else {
        firstByName.set(path, construct);
      }
      for (const problem of construct.problems()) report(problem.code, problem.message, problem.subPath);
      for (const message of construct.node.validate()) report('DSEC_CONFIG_INVALID_VALUE', message);
    }
    return diagnostics;
  }

  /** Where each construct sits in the document and the program, for locating diagnostics. */
  constructSources(): ConstructSource[] {
    const root: ConstructSource = {
      path: '',
      constructPath: '',
      kind: 'App',
      id: '',
      ...(this.location ? { location: this.location.location } : {}),
      exact: this.location?.exact ?? false,
    };
    return [
      root,
      ...this.dsecConstructs().map((construct) => ({
        path: documentPath(construct),
        constructPath: construct.node.path,
        kind: construct.constructor.name,
        id: construct.name,
        ...(construct.location ? { location: construct.location.location } : {}),
        exact: construct.location?.exact ?? false,
      })),
    ];
  }

  private dsecConstructs(): DsecConstruct[] {
    return this.node
      .findAll()
      .filter((construct): construct is DsecConstruct => construct instanceof DsecConstruct)
      .sort((a, b) => a.order - b.order);
  }
}

function documentPath(construct: DsecConstruct): string {
  return `/${construct.section}/${construct.name.replace(/~/g, '~0').replace(/\//g, '~1')}`;
}

function throwIfInvalid(diagnostics: Diagnostic[]): void {
  if (diagnostics.length === 0) return;
  throw new DsecError('DSEC_CONFIG_INVALID', { count: diagnostics.length }, { diagnostics });
}
