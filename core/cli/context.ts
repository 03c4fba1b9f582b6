/**
 * What every command needs, built once from the global options: where the
 * config is, the loaded model, the engine's `Dsec` with the config's plugins,
 * the provider and the state store. Commands ask for the parts they use, so
 * `dsec synth` never starts an agent and `dsec state list` never loads plugins.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { findConfigFile, loadConfig, type LoadedConfig } from '../config/index.js';
import { invalid as invalidConfig } from '../config/load.js';
import { Dsec, type DsecPlugin } from '../dsec.js';
import { DsecError, isDsecError, type Diagnostic, type SourceLocation } from '../errors.js';
import type { Logger } from '../hooks.js';
import type { ConfigModel } from '../model.js';
import { DEFAULT_AGENT_PLUGINS, DEFAULT_ENGINE_PLUGINS, loadPlugin, mergePluginRefs } from '../plugins.js';
import type { Provider } from '../provider.js';
import { LocalStateStore, type StateStore } from '../state/index.js';
import type { AgentClient } from '../agent/client.js';
import { createLocalProvider, type LocalProvider } from '../../providers/local/index.js';
import { createClusterProvider } from '../../providers/cluster/index.js';

export interface GlobalOptions {
  /** `-C DIR`: run as if started in DIR. */
  chdir?: string;
  /** `-f FILE`: the config file, instead of looking for dsec.ts / dsec.yaml. */
  file?: string;
  color: boolean;
  verbose?: boolean;
}

export interface LoadedProject {
  readonly config: ConfigModel;
  readonly warnings: readonly Diagnostic[];
  readonly dsec: Dsec;
  /** Where a document path is in the config file. */
  readonly locate: (path: string) => SourceLocation;
}

export class CliContext {
  readonly cwd: string;
  readonly log: Logger;
  private project?: Promise<LoadedProject>;
  private provider?: Provider;
  /** Clients to close with the context (the etcd state store's). */
  private readonly closers: (() => void)[] = [];

  constructor(readonly options: GlobalOptions) {
    this.cwd = path.resolve(options.chdir ?? process.cwd());
    if (!existsSync(this.cwd)) {
      throw new DsecError('DSEC_USAGE', { message: `-C: no such directory ${this.cwd}` });
    }
    this.log = {
      info: (m) => options.verbose && process.stderr.write(`${m}\n`),
      warn: (m) => process.stderr.write(`warning: ${m}\n`),
      debug: (m) => options.verbose && process.stderr.write(`${m}\n`),
    };
  }

  /** The config file: `-f FILE`, else dsec.ts / dsec.yaml in the working folder. */
  configFile(): string {
    return this.options.file ? path.resolve(this.cwd, this.options.file) : findConfigFile(this.cwd);
  }

  /** Load and validate the config, with its plugins applied to the engine's hooks. */
  load(): Promise<LoadedProject> {
    this.project ??= (async () => {
      const file = this.configFile();
      // Plugins must be applied before validation, since they may add rules;
      // so the config is loaded once plain (to read `plugins:`), then again
      // through the hooks. Loading is cheap next to what a plan does. The
      // engine loads what the node agent will (the built-ins and the
      // config's), so a backend's validate rules (the container's memory
      // minimum) and a plugin's bad options are reported by `dsec validate`,
      // before any agent starts.
      const first = await loadConfig(file);
      const dsec = new Dsec({ log: this.log });
      dsec.use(...(await loadProjectPlugins(first)));
      const { model, warnings, locate } = await loadConfig(file, { dsec });
      return { config: model, warnings, dsec, locate };
    })();
    return this.project;
  }

  /**
   * Where this project keeps its local state and its agent: the local
   * provider's `stateDir`, else `.dsec` beside the config (the cluster
   * provider's local state file, when the state is not in etcd).
   */
  async stateDir(): Promise<string> {
    const { config } = await this.load();
    if (config.provider.type !== 'local') return path.resolve(config.dir, '.dsec');
    return path.resolve(config.dir, config.provider.stateDir);
  }

  /** The config's state store: the local file (default), or etcd (`state: { backend: etcd }`). */
  async stateStore(): Promise<StateStore> {
    const { config } = await this.load();
    const state = config.state;
    if (state?.backend !== 'etcd') return new LocalStateStore(await this.stateDir());
    // Imported here: the etcd client (gRPC) is not worth loading for a local state.
    const [{ connectEtcd }, { EtcdStateStore }] = await Promise.all([import('../cluster/etcd.js'), import('../state/etcd-store.js')]);
    const client = await connectEtcd(state.etcd);
    this.closers.push(() => client.close());
    return new EtcdStateStore(client, state.key, { prefix: state.prefix });
  }

  async connect(options: { autoStart?: boolean } = {}): Promise<Provider> {
    if (this.provider) return this.provider;
    const { config, dsec, locate } = await this.load();
    const notice = (message: string) => process.stderr.write(`note: ${message}\n`);
    const provider = config.provider;
    if (provider.type === 'cluster') {
      this.provider = createClusterProvider({
        etcd: provider.etcd,
        token: readClusterToken(provider.tokenFile, locate),
        prefix: provider.prefix,
        dsec,
        notice,
      });
      return this.provider;
    }
    this.provider = createLocalProvider({
      stateDir: await this.stateDir(),
      baseDir: config.dir,
      plugins: config.plugins,
      autoStart: options.autoStart ?? true,
      notice,
    });
    return this.provider;
  }

  /**
   * The project's node agent client, for what the Provider interface has no
   * word for (snapshots, layer listings, gc, squash). Starts the agent unless
   * `autoStart: false`, then an agent that is not running is DSEC_AGENT_UNREACHABLE.
   */
  async agent(options: { autoStart?: boolean } = {}): Promise<AgentClient> {
    const connected = await this.connect(options);
    if (connected.name !== 'local') {
      throw new DsecError('DSEC_USAGE', { message: `this command talks to the project's local node agent; the config uses the ${connected.name} provider` });
    }
    const provider = connected as LocalProvider;
    await provider.ensureAgent();
    return provider.client;
  }

  async close(): Promise<void> {
    await this.provider?.close();
    for (const close of this.closers.splice(0)) close();
  }
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
