/**
 * The `local` provider: one node agent on this machine, rooted at
 * `<stateDir>/agent`, reached over its Unix socket. The agent is started on
 * first use when it is not running, and never stopped by the provider:
 * sandboxes outlive the CLI.
 */
import path from 'node:path';
import { AgentClient, isUnreachable, neverDelivered } from '../../core/agent/client.js';
import { startAgentDaemon, stopAgent } from '../../core/agent/daemon.js';
import { agentPaths } from '../../core/agent/layout.js';
import { agentPluginRefs, pluginsFingerprint } from '../../core/plugins.js';
import type {
  AcquireRequest,
  BatchOutcome,
  ExecRequest,
  ExecResult,
  FileContent,
  FunctionResult,
  FunctionTask,
  LayerRecord,
  LiveView,
  NodeInfo,
  NodeUsage,
  SandboxInfo,
  SandboxSpec,
  SandboxTarget,
  SandboxUpdate,
  ReadFileRequest,
  ReleaseRequest,
  ReleaseResult,
  RenewRequest,
  WriteFileRequest,
} from '../../core/live.js';
import type { LayerModel, PluginRef } from '../../core/model.js';
import type { FleetPoolRequest, Provider } from '../../core/provider.js';

export interface LocalProviderOptions {
  /** The project's state folder; the agent lives in `<stateDir>/agent`. */
  readonly stateDir: string;
  /** Where the config's plugin paths and package names resolve from (the config's folder). */
  readonly baseDir: string;
  /** The config's plugins, loaded by the agent on top of its built-ins. */
  readonly plugins?: readonly PluginRef[];
  /** Start the agent when it is not running. @default true */
  readonly autoStart?: boolean;
  /** Talk to the agent on this socket instead of `<stateDir>/agent`'s; such an agent is never started or restarted. */
  readonly socket?: string;
  /** Load the built-in plugins in an agent this provider starts. @default true */
  readonly builtins?: boolean;
  /** Told when the provider does something the user did not ask for (restarting the agent). */
  readonly notice?: (message: string) => void;
}

export function agentRootOf(stateDir: string): string {
  return path.join(path.resolve(stateDir), 'agent');
}

export interface LocalProvider extends Provider {
  /** The agent client the provider uses (for calls the Provider interface has no word for). */
  readonly client: AgentClient;
  /** The agent's root folder. */
  readonly root: string;
  /** Make sure the agent answers, starting it if allowed. Cheap once it did. */
  ensureAgent(): Promise<void>;
}

export function createLocalProvider(options: LocalProviderOptions): LocalProvider {
  const root = agentRootOf(options.stateDir);
  const client = new AgentClient(options.socket ?? agentPaths(root).socket);
  const autoStart = options.socket === undefined && options.autoStart !== false;
  let ready: Promise<void> | undefined;

  /** Make sure an agent answers; start one (once, however many calls race here) if allowed. */
  const ensureAgent = (): Promise<void> => {
    ready ??= (async () => {
      const start = () => startAgentDaemon({ root, plugins: options.plugins, baseDir: options.baseDir, builtins: options.builtins });
      let health: Awaited<ReturnType<AgentClient['health']>>;
      try {
        health = await client.health({ timeoutMs: 5_000 });
      } catch (error) {
        if (!isUnreachable(error) || !autoStart) throw error;
        await start();
        return;
      }
      // The agent must run the plugins (and options) the config names now, not
      // the ones it was started with: restart it (its sandboxes keep running
      // and are re-adopted) when they changed.
      const wanted = pluginsFingerprint(agentPluginRefs(options.plugins ?? [], options.builtins ?? true), options.baseDir);
      if (autoStart && health.plugins !== wanted) {
        options.notice?.(`restarting the node agent (pid ${health.pid}): the config's plugins or their options changed; sandboxes keep running`);
        client.close();
        await stopAgent(root);
        await start();
      }
    })();
    // A failed start may be retried by the next call.
    ready.catch(() => (ready = undefined));
    return ready;
  };

  /**
   * Run a call against the agent; if it went away since (stopped, crashed)
   * and the request never reached it, start it again and send once more.
   */
  const call = async <T>(work: () => Promise<T>): Promise<T> => {
    await ensureAgent();
    try {
      return await work();
    } catch (error) {
      if (!neverDelivered(error) || !autoStart) throw error;
      ready = undefined;
      await ensureAgent();
      return work();
    }
  };

  return {
    name: 'local',
    client,
    root,
    ensureAgent,
    async refresh(): Promise<LiveView> {
      return call(async () => {
        const [node, layers, sandboxes, pools] = await Promise.all([client.node(), client.listLayers(), client.listSandboxes(), client.listPools()]);
        return { nodes: [node], layers, sandboxes, pools };
      });
    },
    digestLayer: (layer: LayerModel): Promise<string> => call(() => client.digestLayer(layer)),
    publishLayer: (layer: LayerModel): Promise<LayerRecord> => call(() => client.publishLayer(layer)),
    unpublishLayer: (name: string, version: string): Promise<void> => call(() => client.unpublishLayer(name, version)),
    createSandbox: (spec: SandboxSpec): Promise<SandboxInfo> => call(() => client.createSandbox(spec)),
    updateSandbox: (id: string, change: SandboxUpdate): Promise<SandboxInfo> => call(() => client.updateSandbox(id, change)),
    pauseSandboxes: (target: SandboxTarget): Promise<BatchOutcome[]> => call(() => client.pauseSandboxes(target)),
    resumeSandboxes: (target: SandboxTarget): Promise<BatchOutcome[]> => call(() => client.resumeSandboxes(target)),
    // One node: its report alone.
    claimSandbox: (id: string, holder: string, ttlSeconds?: number): Promise<SandboxInfo> => call(() => client.claimSandbox(id, holder, ttlSeconds)),
    acquireSandbox: (fleet: string, request: AcquireRequest): Promise<SandboxInfo> => call(() => client.acquire(fleet, request)),
    releaseSandbox: (id: string, request: ReleaseRequest = {}): Promise<ReleaseResult> => call(() => client.release(id, request)),
    renewClaim: (id: string, request: RenewRequest): Promise<SandboxInfo> => call(() => client.renew(id, request)),
    // One node: it keeps the fleet's whole pool, whatever node names the shares carry.
    async setPool(pool: FleetPoolRequest): Promise<void> {
      const { shares, ...spec } = pool;
      const ready = Object.values(shares).reduce((sum, count) => sum + count, 0);
      await call(() => client.setPool({ ...spec, ready }));
    },
    deletePool: (fleet: string, lineage: string): Promise<void> => call(() => client.deletePool(fleet, lineage)),
    nodeUsage: async (): Promise<NodeUsage[]> => [await call(() => client.nodeUsage())],
    destroySandbox: async (id: string, options: { unlessClaimed?: boolean } = {}): Promise<void> => {
      await call(() => client.destroySandbox(id, options));
    },
    exec: (id: string, request: ExecRequest): Promise<ExecResult> => call(() => client.exec(id, request)),
    readFile: (id: string, request: ReadFileRequest): Promise<FileContent> => call(() => client.readFile(id, request)),
    writeFile: (id: string, request: WriteFileRequest): Promise<void> => call(() => client.writeFile(id, request)),
    invokeFunction: (fleet: string, task: FunctionTask): Promise<FunctionResult> => call(() => client.invokeFunction(fleet, task)),
    listSandboxes: (labels?: Readonly<Record<string, string>>, options: { holder?: string } = {}): Promise<SandboxInfo[]> =>
      call(() => client.listSandboxes(labels, options)),
    nodes: async (): Promise<NodeInfo[]> => [await call(() => client.node())],
    // One node: its agent holds every sandbox.
    sandboxAgent: async (): Promise<AgentClient> => {
      await ensureAgent();
      return client;
    },
    async close(): Promise<void> {
      client.close();
    },
  };
}
