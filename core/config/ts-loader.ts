/**
 * dsec.ts: run the program with tsx, take its default export (an App from
 * dsec/definitions, or a plain object in the dsec.yaml shape) and hand back
 * the plain document plus a Locator built from where each construct was made.
 * The document then goes through exactly the checks a dsec.yaml does.
 *
 * The App is recognised by shape, not `instanceof`: the program may import
 * dsec/definitions from dist/ while this code runs from source, or the other
 * way round, and then the classes are not the same objects.
 */
import { pathToFileURL } from 'node:url';
import { tsImport } from 'tsx/esm/api';
import { DsecError, type Diagnostic, type SourceLocation } from '../errors.js';
import type { ConstructSource } from '../definitions/app.js';
import { siteLocation } from '../definitions/source-location.js';
import type { Locator } from './problems.js';

export interface TsDocument {
  readonly data: unknown;
  /** Problems the construct tree found itself (already located). */
  readonly constructDiagnostics: Diagnostic[];
  readonly locate: Locator;
  /** `[infra/workers] ` for a path under a construct, so messages name the construct as in the program. */
  readonly prefix: (path: string) => string;
}

interface AppLike {
  synth(options?: { skipValidation?: boolean }): unknown;
  validate?(): Diagnostic[];
  constructSources?(): ConstructSource[];
}

export async function loadTsDocument(file: string): Promise<TsDocument> {
  let exported: unknown;
  // Stack frames (construct locations, a throw's line) are only in dsec.ts
  // terms with source maps, which plain `node` does not apply by default.
  const sourceMaps = process.sourceMapsEnabled;
  process.setSourceMapsEnabled(true);
  try {
    const mod: unknown = await tsImport(pathToFileURL(file).href, { parentURL: import.meta.url });
    exported = defaultExport(mod);
  } catch (cause) {
    throw loadError(file, cause);
  } finally {
    process.setSourceMapsEnabled(sourceMaps);
  }
  if (exported === undefined || exported === null) {
    throw loadError(file, new Error('it has no default export (end it with `export default app`)'));
  }
  if (!isAppLike(exported)) {
    const fileStart = { file, line: 1, col: 1 };
    return { data: exported, constructDiagnostics: [], locate: () => fileStart, prefix: () => '' };
  }
  let data: unknown;
  let constructDiagnostics: Diagnostic[];
  let sources: ConstructSource[];
  try {
    constructDiagnostics = exported.validate?.() ?? [];
    data = exported.synth({ skipValidation: true });
    sources = exported.constructSources?.() ?? [];
  } catch (cause) {
    throw loadError(file, cause);
  }
  const owner = (path: string) => ownerOf(path, sources);
  return {
    data,
    constructDiagnostics: constructDiagnostics.map((d) => (d.location ? d : { ...d, location: { file, line: 1, col: 1 } })),
    locate: (path) => owner(path)?.location ?? { file, line: 1, col: 1 },
    prefix: (path) => {
      const source = owner(path);
      return source && source.constructPath ? `[${source.constructPath}] ` : '';
    },
  };
}

/**
 * The module's default export. tsx may hand back the namespace wrapped once
 * more (a CommonJS-compiled dsec.ts: `mod.default` is itself a namespace with
 * its own `default`), so unwrap while the value is only such a wrapper.
 */
function defaultExport(mod: unknown): unknown {
  let value = (mod as { default?: unknown } | undefined)?.default;
  for (let depth = 0; depth < 3 && isWrapper(value); depth++) value = value.default;
  return value;
}

/** A document always has `version` and never `default`; an App has `synth`. */
function isWrapper(value: unknown): value is { default: unknown } {
  return typeof value === 'object' && value !== null && 'default' in value && !('version' in value) && !isAppLike(value);
}

function isAppLike(value: unknown): value is AppLike {
  return typeof value === 'object' && value !== null && typeof (value as AppLike).synth === 'function';
}

function ownerOf(path: string, sources: readonly ConstructSource[]): ConstructSource | undefined {
  let best: ConstructSource | undefined;
  for (const source of sources) {
    const covers = source.path === '' || path === source.path || path.startsWith(`${source.path}/`);
    if (covers && (!best || source.path.length > best.path.length)) best = source;
  }
  return best;
}

/** A dsec.ts that does not compile or throws while running: DSEC_CONFIG_TS_LOAD, located where possible. */
function loadError(file: string, cause: unknown): DsecError {
  const message = cause instanceof Error ? cause.message.split('\n')[0] : String(cause);
  const location = causeLocation(file, cause) ?? { file, line: 1, col: 1 };
  const diagnostic: Diagnostic = { code: 'DSEC_CONFIG_TS_LOAD', severity: 'error', message, path: '', location };
  return new DsecError('DSEC_CONFIG_TS_LOAD', { file, message }, { diagnostics: [diagnostic], cause });
}

function causeLocation(file: string, cause: unknown): SourceLocation | undefined {
  // esbuild (inside tsx) reports syntax errors with a 0-based column.
  const esbuild = (cause as { errors?: { location?: { file?: string; line: number; column: number } }[] })?.errors?.[0]?.location;
  if (esbuild) return { file, line: esbuild.line, col: esbuild.column + 1 };
  const site = throwSites(cause).map((site) => siteLocation(site)).find((frame) => frame?.exact && frame.location.file === file);
  if (site) return site.location;
  const stack = cause instanceof Error ? String(cause.stack ?? '') : '';
  const escaped = file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const frame = new RegExp(`${escaped}(?:\\?[^:]*)?:(\\d+):(\\d+)`).exec(stack);
  return frame ? { file, line: Number(frame[1]), col: Number(frame[2]) } : undefined;
}

/**
 * The call sites of a thrown error, if its `stack` was not formatted yet (V8
 * formats it on first read, through Error.prepareStackTrace): read as
 * objects they can be mapped to dsec.ts lines whoever formats stacks.
 */
function throwSites(cause: unknown): NodeJS.CallSite[] {
  if (!(cause instanceof Error)) return [];
  const prepare = Error.prepareStackTrace;
  try {
    Error.prepareStackTrace = (_error, sites) => sites;
    const stack: unknown = cause.stack;
    if (!Array.isArray(stack)) return [];
    const sites = stack as NodeJS.CallSite[];
    // Put back the usual text, so whoever prints the cause later sees a stack.
    const text = [`${cause.name}: ${cause.message}`, ...sites.map((site) => `    at ${String(site)}`)].join('\n');
    Object.defineProperty(cause, 'stack', { value: text, writable: true, configurable: true });
    return sites;
  } finally {
    Error.prepareStackTrace = prepare;
  }
}
