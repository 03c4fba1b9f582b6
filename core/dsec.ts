/**
 * The `Dsec` object plugins receive: the hook table and a logger. One is made
 * per process (the CLI's engine, each node agent) and every plugin, built-in or
 * third-party, is applied to it the same way.
 */
import { createHooks, type Hooks, type Logger } from './hooks.js';

/** A plugin: a name and an `apply` that only registers taps. */
export interface DsecPlugin {
  readonly name: string;
  apply(dsec: Dsec): void;
}

/** What a plugin module may export as default: the plugin, or a factory taking its options. */
export type DsecPluginModule = DsecPlugin | ((options: Record<string, unknown>) => DsecPlugin);

export const silentLogger: Logger = Object.freeze({
  info() {},
  warn() {},
  debug() {},
});

export class Dsec {
  readonly hooks: Hooks = createHooks();
  readonly log: Logger;
  private readonly applied: string[] = [];

  constructor(options: { log?: Logger } = {}) {
    this.log = options.log ?? silentLogger;
  }

  /** Apply plugins in order; a plugin applied twice (same name) is applied once. */
  use(...plugins: DsecPlugin[]): this {
    for (const plugin of plugins) {
      if (this.applied.includes(plugin.name)) continue;
      plugin.apply(this);
      this.applied.push(plugin.name);
    }
    return this;
  }

  /** Names of the plugins applied so far, in order. */
  get plugins(): readonly string[] {
    return this.applied;
  }

  /** Backend kinds some applied plugin provisions. */
  get backends(): string[] {
    const kinds: string[] = [];
    // HookMap keeps its hooks in a private Map; `get` is the public way, so
    // backends announce themselves by tapping `provision.for(kind)`.
    const map = (this.hooks.provision as unknown as { _map: Map<string, { taps: unknown[] }> })._map;
    for (const [kind, hook] of map) if (hook.taps.length > 0) kinds.push(kind);
    return kinds.sort();
  }
}
