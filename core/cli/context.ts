/**
 * What every command needs, built once from the global options: where the
 * config is, the loaded model, the engine's `Dsec` with the config's plugins,
 * the provider and the state store. Commands ask for the parts they use, so
 * `dsec synth` never starts an agent and `dsec state list` never loads plugins.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { findConfigFile } from '../config/index.js';
import { DsecError } from '../errors.js';
import type { Logger } from '../hooks.js';
import { createProjectProvider, isLocalProvider, loadProject, projectStateDir, type LoadedProject } from '../project.js';
import type { Provider } from '../provider.js';
import { LocalStateStore, type StateStore } from '../state/index.js';
import type { AgentClient } from '../agent/client.js';

// Shared with the SDK (core/project.ts); re-exported for callers that know them from here.
export { readClusterToken, type LoadedProject } from '../project.js';

export interface GlobalOptions {
  /** `-C DIR`: run as if started in DIR. */
  chdir?: string;
  /** `-f FILE`: the config file, instead of looking for dsec.ts / dsec.yaml. */
  file?: string;
  color: boolean;
  verbose?: boolean;
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
    this.project ??= loadProject(this.configFile(), { log: this.log });
    return this.project;
  }

  /**
   * Where this project keeps its local state and its agent: the local
   * provider's `stateDir`, else `.dsec` beside the config (the cluster
   * provider's local state file, when the state is not in etcd).
   */
  async stateDir(): Promise<string> {
    return projectStateDir((await this.load()).config);
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
    const project = await this.load();
    const notice = (message: string) => process.stderr.write(`note: ${message}\n`);
    this.provider = createProjectProvider(project, { autoStart: options.autoStart ?? true, notice });
    return this.provider;
  }

  /**
   * The project's node agent client, for what the Provider interface has no
   * word for (snapshots, layer listings, gc, squash). Starts the agent unless
   * `autoStart: false`, then an agent that is not running is DSEC_AGENT_UNREACHABLE.
   */
  async agent(options: { autoStart?: boolean } = {}): Promise<AgentClient> {
    const provider = await this.connect(options);
    if (!isLocalProvider(provider)) {
      throw new DsecError('DSEC_USAGE', { message: `this command talks to the project's local node agent; the config uses the ${provider.name} provider` });
    }
    await provider.ensureAgent();
    return provider.client;
  }

  async close(): Promise<void> {
    await this.provider?.close();
    for (const close of this.closers.splice(0)) close();
  }
}
