/**
 * A project as the CLI and the SDK both open it: the config loaded with its
 * plugins applied to a `Dsec`, and the provider its `provider:` section names
 * (`local`: the project's own node agent; `cluster`: the agents registered
 * in etcd, reached over TCP with the shared token). One place, so `dsec
 * apply` and `connect()` never disagree on where a project's sandboxes are.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { loadConfig, type LoadedConfig } from './config/index.js';
import { invalid as invalidConfig } from './config/load.js';
import { Dsec, type DsecPlugin } from './dsec.js';
import { isDsecError, type Diagnostic, type SourceLocation } from './errors.js';
import type { Logger } from './hooks.js';
import type { ConfigModel, PluginRef } from './model.js';
import type { Provider } from './provider.js';
import { DEFAULT_AGENT_PLUGINS, DEFAULT_ENGINE_PLUGINS, loadPlugin, mergePluginRefs } from './plugins.js';
import { createLocalProvider, type LocalProvider } from '../providers/local/index.js';
import { createClusterProvider, type ClusterProvider } from '../providers/cluster/index.js';

export interface LoadedProject {
  readonly config: ConfigModel;
  readonly warnings: readonly Diagnostic[];
  readonly dsec: Dsec;
  /** Where a document path is in the config file. */
  readonly locate: (path: string) => SourceLocation;
}

/**
 * Load and validate the config at `file`, with its plugins applied to the
 * engine's hooks. Plugins must be applied before validation, since they may
 * add rules; so the config is loaded once plain (to read `plugins:`), then
 * again through the hooks. Loading is cheap next to what a plan does. The
 * engine loads what the node agent will (the built-ins and the config's), so
 * a backend's validate rules and a plugin's bad options are reported before
 * any agent starts.
 */
export async function loadProject(file: string, options: { log?: Logger } = {}): Promise<LoadedProject> {
  const first = await loadConfig(file);
  const dsec = new Dsec(options.log ? { log: options.log } : {});
  dsec.use(...(await loadProjectPlugins(first)));
  const { model, warnings, locate } = await loadConfig(file, { dsec });
  return { config: model, warnings, dsec, locate };
}

/**
 * Where a project keeps its local state and its agent: the local provider's
 * `stateDir`, else `.dsec` beside the config (the cluster provider's local
 * state file, when the state is not in etcd).
 */
export function projectStateDir(config: ConfigModel): string {
  if (config.provider.type !== 'local') return path.resolve(config.dir, '.dsec');
  return path.resolve(config.dir, config.provider.stateDir);
}

export interface ProjectProviderOptions {
  /** Local provider: its state folder. @default projectStateDir(config) */
  readonly stateDir?: string;
  /** Local provider: start the agent when it is not running. @default true */
  readonly autoStart?: boolean;
  /** Local provider: the plugins its agent loads on top of the built-ins. @default the config's */
  readonly plugins?: readonly PluginRef[];
  /** Told what the provider does that the user did not ask for. */
  readonly notice?: (message: string) => void;
}

export type ProjectProvider = LocalProvider | ClusterProvider;

export function isLocalProvider(provider: Provider): provider is LocalProvider {
  return provider.name === 'local';
}

/** The provider the project's `provider:` section names. Connects lazily: nothing is reached until the first call. */
export function createProjectProvider(project: LoadedProject, options: ProjectProviderOptions = {}): ProjectProvider {
  const { config, dsec, locate } = project;
  const provider = config.provider;
  if (provider.type === 'cluster') {
    return createClusterProvider({
      etcd: provider.etcd,
      token: readClusterToken(provider.tokenFile, locate),
      prefix: provider.prefix,
      dsec,
      notice: options.notice,
    });
  }
  return createLocalProvider({
    stateDir: options.stateDir ?? projectStateDir(config),
    baseDir: config.dir,
    plugins: options.plugins ?? config.plugins,
    autoStart: options.autoStart ?? true,
    notice: options.notice,
  });
}

/** Node agents want at least this many characters of token (as `dsec agent start --token-file` checks). */
const MIN_TOKEN_LENGTH = 16;

/**
 * The cluster's shared agent token, from `provider.cluster.tokenFile`. A file
 * that cannot be read or holds too short a token is a config error located
 * at that field.
 */
export function readClusterToken(file: string, locate: (path: string) => SourceLocation): string {
  let problem: string | undefined;
  let token = '';
  try {
    token = readFileSync(file, 'utf8').trim();
    if (token.length < MIN_TOKEN_LENGTH) {
      problem = `the token in ${file} has ${token.length} character(s); the agents need at least ${MIN_TOKEN_LENGTH} (the same file as their --token-file)`;
    }
  } catch (error) {
    problem = `cannot read the token file ${file} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); it holds the token the node agents were started with (--token-file)`;
  }
  if (problem === undefined) return token;
  const at = '/provider/cluster/tokenFile';
  throw invalidConfig([{ code: 'DSEC_CONFIG_INVALID_VALUE', severity: 'error', message: problem, path: at, location: locate(at) }]);
}

/**
 * The agent's default plugins with the config's on top, loaded. A config
 * plugin that cannot be loaded, or refuses its options, is reported as a
 * config error located at its entry (`plugins[i].name` / `.options`), like
 * any other bad field.
 */
async function loadProjectPlugins(loaded: LoadedConfig): Promise<DsecPlugin[]> {
  const { model } = loaded;
  const plugins: DsecPlugin[] = [];
  // The engine's own defaults (placement) beside the agent's: the cluster provider asks them.
  for (const ref of mergePluginRefs([...DEFAULT_AGENT_PLUGINS, ...DEFAULT_ENGINE_PLUGINS], model.plugins)) {
    try {
      plugins.push(await loadPlugin(ref, model.dir));
    } catch (error) {
      const index = model.plugins.indexOf(ref);
      if (index < 0 || !(isDsecError(error, 'DSEC_PLUGIN_OPTIONS') || isDsecError(error, 'DSEC_PLUGIN_LOAD'))) throw error;
      const at = `/plugins/${index}/${error.code === 'DSEC_PLUGIN_OPTIONS' ? 'options' : 'name'}`;
      throw invalidConfig([{ code: error.code, severity: 'error', message: error.message, path: at, location: loaded.locate(at) }]);
    }
  }
  return plugins;
}
