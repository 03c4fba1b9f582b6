/**
 * The plugin loader: turns `plugins:` entries of a config (and the agent's
 * built-in list) into DsecPlugin objects. A built-in is found by name in this
 * package's plugins/ folder and then loaded exactly like a third-party
 * plugin: import the module, take its default export, call it with the
 * options if it is a factory, check the shape.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { DsecPlugin } from './dsec.js';
import { DsecError } from './errors.js';
import type { PluginRef } from './model.js';
import { canonicalJson } from './util/canonical-json.js';

/** Plugins that ship with dsec, loadable by bare name. */
export const BUILTIN_PLUGINS: readonly string[] = Object.freeze([
  'storage-local',
  'storage-3fs',
  'backend-container',
  'backend-fncall',
  'backend-microvm',
  'backend-vm',
  'density-admission',
  'density-memory',
  'density-reclaim',
  'density-qos',
  'density-placement',
]);

/**
 * The built-in storage plugins. A node has one layer store, so a config
 * naming one of them replaces whichever the defaults bring (storage-3fs in
 * place of storage-local), rather than loading both.
 */
export const BUILTIN_STORAGE_PLUGINS: readonly string[] = Object.freeze(['storage-local', 'storage-3fs']);

/**
 * What a node agent loads when told nothing else: the local layer store, the
 * container backend, the FnCall backend built on it (after it: it checks for
 * the container backend's file taps when applied), the microVM and full-VM
 * backends (which look at nothing until a VM is created) and the density plugins
 * (each switchable with its `enabled` option in a config's `plugins:`).
 */
export const DEFAULT_AGENT_PLUGINS: readonly PluginRef[] = Object.freeze([
  Object.freeze({ name: 'storage-local', options: Object.freeze({}) }),
  Object.freeze({ name: 'backend-container', options: Object.freeze({}) }),
  Object.freeze({ name: 'backend-fncall', options: Object.freeze({}) }),
  Object.freeze({ name: 'backend-microvm', options: Object.freeze({}) }),
  Object.freeze({ name: 'backend-vm', options: Object.freeze({}) }),
  Object.freeze({ name: 'density-admission', options: Object.freeze({}) }),
  Object.freeze({ name: 'density-memory', options: Object.freeze({}) }),
  Object.freeze({ name: 'density-reclaim', options: Object.freeze({}) }),
  Object.freeze({ name: 'density-qos', options: Object.freeze({}) }),
]);

/**
 * What the engine's process (the CLI, an SDK program) loads beside the
 * agent's defaults: the placement plugin answers the cluster provider's
 * `place` hook, which only fires there. Node agents do not load it unless a
 * config names it (where it taps a hook that never fires).
 */
export const DEFAULT_ENGINE_PLUGINS: readonly PluginRef[] = Object.freeze([
  Object.freeze({ name: 'density-placement', options: Object.freeze({}) }),
]);

/**
 * `base` with `extra` on top: an extra ref with a built-in's name replaces it
 * (so a config can pass options to a built-in), an extra built-in storage
 * plugin replaces the base's storage plugin (one store per node); others are
 * appended in order.
 */
export function mergePluginRefs(base: readonly PluginRef[], extra: readonly PluginRef[]): PluginRef[] {
  const merged = [...base];
  const isStorage = (ref: PluginRef) => BUILTIN_STORAGE_PLUGINS.includes(ref.name);
  for (const ref of extra) {
    const at = merged.findIndex((existing) => existing.name === ref.name || (isStorage(existing) && isStorage(ref)));
    if (at >= 0) merged[at] = ref;
    else merged.push(ref);
  }
  return merged;
}

/** The plugins a node agent loads: the defaults with `plugins` on top, or `plugins` alone without the built-ins. */
export function agentPluginRefs(plugins: readonly PluginRef[], builtins = true): PluginRef[] {
  return builtins ? mergePluginRefs(DEFAULT_AGENT_PLUGINS, plugins) : [...plugins];
}

/**
 * A short digest of the plugins an agent runs with (refs, options, and the
 * folder relative names resolve against). The agent reports it in
 * `GET /v1/health`; the local provider compares it with what the config asks
 * for, and restarts an agent whose plugins or options changed.
 */
export function pluginsFingerprint(refs: readonly PluginRef[], baseDir: string): string {
  return createHash('sha256').update(canonicalJson({ refs, baseDir: path.resolve(baseDir) })).digest('hex').slice(0, 16);
}

/** Load every plugin, in order. Fails on the first that cannot be loaded, naming it. */
export async function loadPlugins(refs: readonly PluginRef[], baseDir: string): Promise<DsecPlugin[]> {
  const plugins: DsecPlugin[] = [];
  for (const ref of refs) plugins.push(await loadPlugin(ref, baseDir));
  return plugins;
}

export async function loadPlugin(ref: PluginRef, baseDir: string): Promise<DsecPlugin> {
  let moduleUrl: string;
  let imported: Record<string, unknown>;
  try {
    moduleUrl = resolvePlugin(ref.name, baseDir);
    imported = await importModule(moduleUrl);
  } catch (error) {
    if (error instanceof DsecError) throw error;
    throw new DsecError('DSEC_PLUGIN_LOAD', { name: ref.name, message: (error as Error).message }, { cause: error });
  }
  return instantiate(ref, imported);
}

/** A module URL for a plugin name: built-in, path, or npm package. */
export function resolvePlugin(name: string, baseDir: string): string {
  if (BUILTIN_PLUGINS.includes(name)) return builtinUrl(name);
  if (name.startsWith('.') || path.isAbsolute(name)) {
    const file = path.resolve(baseDir, name);
    if (!existsSync(file)) throw new Error(`no file ${file}`);
    return pathToFileURL(file).href;
  }
  return pathToFileURL(resolvePackage(name, baseDir)).href;
}

/**
 * plugins/<name>/index.js beside the compiled core (dist/); when dsec runs
 * from its TypeScript sources (tests, tsx) the .ts file is there instead.
 */
function builtinUrl(name: string): string {
  for (const file of ['index.js', 'index.ts']) {
    const url = new URL(`../plugins/${name}/${file}`, import.meta.url);
    if (existsSync(fileURLToPath(url))) return url.href;
  }
  throw new Error(`built-in plugin ${name} is missing from ${fileURLToPath(new URL('../plugins/', import.meta.url))} (run npm run build)`);
}

/**
 * Node's resolution from baseDir. require.resolve handles packages with a
 * `require` or `default` export; an ESM-only package (only an `import`
 * condition) is found through its package.json by hand.
 */
function resolvePackage(name: string, baseDir: string): string {
  const require = createRequire(path.join(path.resolve(baseDir), 'noop.js'));
  try {
    return require.resolve(name);
  } catch (error) {
    const [scopeOrName, maybeName] = name.split('/');
    const packageName = scopeOrName.startsWith('@') ? `${scopeOrName}/${maybeName}` : scopeOrName;
    const subpath = name.slice(packageName.length);
    for (let dir = path.resolve(baseDir); ; dir = path.dirname(dir)) {
      const packageDir = path.join(dir, 'node_modules', packageName);
      const manifest = path.join(packageDir, 'package.json');
      if (existsSync(manifest)) {
        const entry = importEntry(JSON.parse(readFileSync(manifest, 'utf8')) as PackageManifest, subpath ? `.${subpath}` : '.');
        if (entry) return path.join(packageDir, entry);
      }
      if (path.dirname(dir) === dir) break;
    }
    throw new Error(`cannot find package ${name} from ${baseDir}: ${(error as Error).message.split('\n')[0]}`);
  }
}

interface PackageManifest {
  exports?: unknown;
  module?: string;
  main?: string;
}

function importEntry(manifest: PackageManifest, subpath: string): string | undefined {
  const pick = (target: unknown): string | undefined => {
    if (typeof target === 'string') return target;
    if (target && typeof target === 'object') {
      const conditions = target as Record<string, unknown>;
      for (const key of ['import', 'node', 'default']) {
        const found = pick(conditions[key]);
        if (found) return found;
      }
    }
    return undefined;
  };
  const { exports } = manifest;
  if (exports !== undefined) {
    const isMap = typeof exports === 'object' && exports !== null && Object.keys(exports).some((key) => key.startsWith('.'));
    return pick(isMap ? (exports as Record<string, unknown>)[subpath] : subpath === '.' ? exports : undefined);
  }
  if (subpath !== '.') return subpath;
  return manifest.module ?? manifest.main ?? 'index.js';
}

/**
 * Import a module. TypeScript is imported directly where the running loader
 * understands it (vitest, tsx), else through tsx's API, so a project's
 * `./plugins/my-policy.ts` works from the compiled CLI too.
 */
async function importModule(url: string): Promise<Record<string, unknown>> {
  if (!/\.(c|m)?tsx?$/.test(url)) return (await import(url)) as Record<string, unknown>;
  try {
    return (await import(url)) as Record<string, unknown>;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ERR_UNKNOWN_FILE_EXTENSION') throw error;
    const { tsImport } = await import('tsx/esm/api');
    return (await tsImport(url, import.meta.url)) as Record<string, unknown>;
  }
}

function instantiate(ref: PluginRef, imported: Record<string, unknown>): DsecPlugin {
  const invalid = (message: string) => new DsecError('DSEC_PLUGIN_INVALID', { name: ref.name, message });
  // A CommonJS module imported from ESM puts module.exports on `default`, and
  // tsx may wrap an ESM default once more.
  let exported = imported.default;
  if (exported && typeof exported === 'object' && !isPlugin(exported) && 'default' in exported) {
    exported = (exported as { default: unknown }).default;
  }
  if (exported === undefined) throw invalid('the module has no default export');

  const options = ref.options ?? {};
  let plugin: unknown = exported;
  if (typeof exported === 'function') {
    try {
      plugin = (exported as (options: Record<string, unknown>) => unknown)({ ...options });
    } catch (error) {
      if (error instanceof DsecError) throw error;
      throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: ref.name, message: (error as Error).message }, { cause: error });
    }
  } else if (Object.keys(options).length > 0) {
    throw invalid('it exports a plugin object, which takes no options; export a factory `(options) => plugin` to accept them');
  }
  if (!isPlugin(plugin)) {
    throw invalid('expected the default export to be `{ name: string, apply(dsec) }` or a factory returning one');
  }
  return plugin;
}

function isPlugin(value: unknown): value is DsecPlugin {
  if (!value || typeof value !== 'object') return false;
  const candidate = value as Partial<DsecPlugin>;
  return typeof candidate.name === 'string' && candidate.name.length > 0 && typeof candidate.apply === 'function';
}
