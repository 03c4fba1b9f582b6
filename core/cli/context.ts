/**
 * What every command needs, built once from the global options: where the
 * config is, the loaded model, the engine's `Dsec` with the config's plugins,
 * the provider and the state store. Commands ask for the parts they use, so
 * `dsec synth` never starts an agent and `dsec state list` never loads plugins.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { findConfigFile, loadConfig, type LoadedConfig } from '../config/index.js';
import { invalid as invalidConfig } from '../config/load.js';
import { Dsec, type DsecPlugin } from '../dsec.js';
import { DsecError, isDsecError, type Diagnostic, type SourceLocation } from '../errors.js';
import type { Logger } from '../hooks.js';
import type { ConfigModel } from '../model.js';
import { DEFAULT_AGENT_PLUGINS, loadPlugin, mergePluginRefs } from '../plugins.js';
import type { Provider } from '../provider.js';
import { LocalStateStore } from '../state/index.js';
import type { AgentClient } from '../agent/client.js';
import { createLocalProvider, type LocalProvider } from '../../providers/local/index.js';

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
  private provider?: LocalProvider;

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

  /** Where this project keeps its state and its agent: the config's `stateDir`, else `.dsec` beside the config. */
  async stateDir(): Promise<string> {
    const { config } = await this.load();
    if (config.provider.type !== 'local') {
      throw new DsecError('DSEC_USAGE', { message: `provider ${config.provider.type} is not available yet` });
    }
    return path.resolve(config.dir, config.provider.stateDir);
  }

  async stateStore(): Promise<LocalStateStore> {
    return new LocalStateStore(await this.stateDir());
  }

  async connect(options: { autoStart?: boolean } = {}): Promise<Provider> {
    if (this.provider) return this.provider;
    const { config } = await this.load();
    this.provider = createLocalProvider({
      stateDir: await this.stateDir(),
      baseDir: config.dir,
      plugins: config.plugins,
      autoStart: options.autoStart ?? true,
      notice: (message) => process.stderr.write(`note: ${message}\n`),
    });
    return this.provider;
  }

  /**
   * The project's node agent client, for what the Provider interface has no
   * word for (snapshots, layer listings, gc, squash). Starts the agent unless
   * `autoStart: false`, then an agent that is not running is DSEC_AGENT_UNREACHABLE.
   */
  async agent(options: { autoStart?: boolean } = {}): Promise<AgentClient> {
    const provider = (await this.connect(options)) as LocalProvider;
    await provider.ensureAgent();
    return provider.client;
  }

  async close(): Promise<void> {
    await this.provider?.close();
  }
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
  for (const ref of mergePluginRefs(DEFAULT_AGENT_PLUGINS, model.plugins)) {
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
