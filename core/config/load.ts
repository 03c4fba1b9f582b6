/**
 * Loading a config: source -> raw document -> schema check -> semantic
 * checks -> model -> plugins' configLoaded and validate hooks. YAML and
 * dsec.ts differ only in the first step (and in how a path is located);
 * every check after it is the same code.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Dsec } from '../dsec.js';
import { DsecError, type Diagnostic, type SourceLocation } from '../errors.js';
import type { ConfigModel } from '../model.js';
import { buildModel } from './build-model.js';
import type { DsecDocument } from './document.generated.js';
import { locateProblems, sortDiagnostics, type Locator, type Problem } from './problems.js';
import { validateDocumentSchema } from './schema.js';
import { checkSemantics } from './semantic.js';
import { loadTsDocument } from './ts-loader.js';
import { parseYamlSource } from './yaml-source.js';

export interface LoadOptions {
  /** Run the plugins' `configLoaded` (may refine the model) and `validate` (may add diagnostics) hooks. */
  readonly dsec?: Dsec;
}

export interface LoadedConfig {
  readonly model: ConfigModel;
  /** Problems that do not stop the load (an unused layer, an empty fleet). */
  readonly warnings: Diagnostic[];
  /** Where a document path (`/environments/shell/layers/1`) is in the source, for diagnostics made later. */
  readonly locate: (path: string) => SourceLocation;
}

/** Raw document + how to locate a path in its source, whatever the file type. */
interface SourceDocument {
  readonly data: unknown;
  /** Problems found while reading (YAML syntax, duplicate keys, construct tree), located. */
  readonly diagnostics: Diagnostic[];
  /** The source cannot be checked further (not YAML at all). */
  readonly unreadable: boolean;
  readonly locate: Locator;
  readonly sourceText?: (path: string) => string | undefined;
  readonly prefix?: (path: string) => string;
}

/**
 * Load dsec.yaml / dsec.yml / dsec.ts. Every error found is collected and
 * thrown together as DSEC_CONFIG_INVALID (its `diagnostics` hold each one,
 * located at file:line:col); warnings are returned.
 */
export async function loadConfig(file: string, options: LoadOptions = {}): Promise<LoadedConfig> {
  const absolute = path.resolve(file);
  const source = await readSource(absolute);
  if (source.unreadable) throw invalid(source.diagnostics);

  const problems: Problem[] = [
    ...validateDocumentSchema(source.data, source.sourceText),
    ...checkSemantics(source.data),
  ].map((problem) => (source.prefix ? { ...problem, message: source.prefix(problem.path) + problem.message } : problem));
  const diagnostics = [...source.diagnostics, ...locateProblems(problems, source.locate)];
  throwIfErrors(diagnostics);

  let model = buildModel(source.data as DsecDocument, absolute);
  const warnings = diagnostics.filter((diagnostic) => diagnostic.severity === 'warning');
  if (options.dsec) {
    model = options.dsec.hooks.configLoaded.call(model);
    const pushed: Diagnostic[] = [];
    options.dsec.hooks.validate.call(model, pushed);
    const located = pushed.map((d) => (d.location ? d : { ...d, location: source.locate(d.path, 'value') }));
    throwIfErrors(located);
    warnings.push(...located);
  }
  return { model, warnings: sortDiagnostics(warnings), locate: (at) => source.locate(at, 'value') };
}

async function readSource(file: string): Promise<SourceDocument> {
  if (!existsSync(file)) throw new DsecError('DSEC_CONFIG_NOT_FOUND', { dir: path.dirname(file) });
  if (/\.[cm]?ts$/.test(file)) {
    const document = await loadTsDocument(file);
    return {
      data: document.data,
      diagnostics: document.constructDiagnostics,
      unreadable: false,
      locate: document.locate,
      prefix: document.prefix,
    };
  }
  const yaml = parseYamlSource(file, await readFile(file, 'utf8'));
  return {
    data: yaml.data,
    diagnostics: locateProblems(yaml.problems, yaml.locate),
    unreadable: yaml.unreadable,
    locate: yaml.locate,
    sourceText: yaml.sourceText,
  };
}

function throwIfErrors(diagnostics: readonly Diagnostic[]): void {
  if (diagnostics.some((diagnostic) => diagnostic.severity === 'error')) throw invalid(diagnostics);
}

/** Errors only: warnings are not why a load failed, and `count` must match what is listed. */
export function invalid(diagnostics: readonly Diagnostic[]): DsecError {
  const errors = sortDiagnostics(diagnostics.filter((diagnostic) => diagnostic.severity === 'error'));
  return new DsecError('DSEC_CONFIG_INVALID', { count: errors.length }, { diagnostics: errors });
}
