/**
 * Starting a cluster agent: a node agent daemon that serves its API on TCP
 * behind the shared token and registers the node in etcd (main.ts --listen
 * --token-file --join ...). Stopping it is the usual stopAgent(root): the
 * daemon revokes its lease on the way out, so the node leaves at once.
 */
import path from 'node:path';
import { DEFAULT_CLUSTER_PREFIX } from '../cluster/keys.js';
import { DsecError } from '../errors.js';
import type { PluginRef } from '../model.js';
import { formatHostPort, parseEndpoints, parseHostPort, parseLabel, parseLeaseTtl, readTokenFile } from './cluster-flags.js';
import { startAgentDaemon } from './daemon.js';

export interface ClusterAgentOptions {
  /** The agent's own folder (records, socket, log); no project config is needed. */
  readonly root: string;
  /** The node's name in the cluster; unique among live agents. @default os.hostname() */
  readonly name?: string;
  /** etcd endpoints (`http://host:port`, or bare `host:port`). */
  readonly etcd: readonly string[];
  /** `host:port` to serve the TCP API on. */
  readonly listen: string;
  /** `host:port` the engine reaches the TCP API at. @default listen */
  readonly advertise?: string;
  /** A file holding the shared token (16+ characters after trimming). */
  readonly tokenFile: string;
  /** The node's labels, for fleets' `placement.nodeSelector`. */
  readonly labels?: Readonly<Record<string, string>>;
  /** @default 5 */
  readonly leaseTtlSeconds?: number;
  /** @default "/dsec" */
  readonly prefix?: string;
  /** Plugins on top of the built-ins (a built-in's name replaces it). */
  readonly plugins?: readonly PluginRef[];
  /** Where relative plugin paths and package names resolve from. @default root */
  readonly baseDir?: string;
  /** Load the built-in plugins (storage-local, backend-container). @default true */
  readonly builtins?: boolean;
  /** @default 5000 */
  readonly reapIntervalMs?: number;
  /** Log each request at debug level. @default false */
  readonly debug?: boolean;
  /** How long to wait until it serves (it first waits up to 10 s for etcd). @default 30000 */
  readonly timeoutMs?: number;
}

/**
 * Start the cluster agent of `root` in the background; resolves once its API
 * answers, by which time it is registered in etcd (or, etcd being down, keeps
 * trying in the background). Flags are checked here first, so a bad token
 * file or address is a DSEC_USAGE error before anything is spawned; a node
 * name another live agent holds is DSEC_AGENT_START with the log's reason.
 * An agent already running on `root` is left as it is.
 */
export async function startClusterAgent(options: ClusterAgentOptions): Promise<{ pid: number; address: string }> {
  const { args, address } = clusterDaemonArgs(options);
  const { pid } = await startAgentDaemon({
    root: options.root,
    ...(options.name !== undefined ? { name: options.name } : {}),
    ...(options.plugins ? { plugins: options.plugins } : {}),
    ...(options.baseDir !== undefined ? { baseDir: options.baseDir } : {}),
    ...(options.builtins !== undefined ? { builtins: options.builtins } : {}),
    ...(options.reapIntervalMs !== undefined ? { reapIntervalMs: options.reapIntervalMs } : {}),
    ...(options.debug ? { debug: true } : {}),
    timeoutMs: options.timeoutMs ?? 30_000,
    extraArgs: args,
  });
  return { pid, address };
}

/** The daemon's cluster flags for `options`, every value checked; `address` is what the node advertises. */
export function clusterDaemonArgs(options: ClusterAgentOptions): { args: string[]; address: string } {
  readTokenFile(options.tokenFile);
  const listen = formatHostPort(parseHostPort('--listen', options.listen));
  const address = options.advertise !== undefined ? formatHostPort(parseHostPort('--advertise', options.advertise)) : listen;
  const endpoints = parseEndpoints(options.etcd.join(','));
  const args = ['--listen', listen, '--token-file', path.resolve(options.tokenFile), '--join', endpoints.join(','), '--advertise', address];
  for (const [key, value] of Object.entries(options.labels ?? {})) {
    const [checkedKey, checkedValue] = parseLabel(`${key}=${value}`);
    args.push('--node-label', `${checkedKey}=${checkedValue}`);
  }
  if (options.leaseTtlSeconds !== undefined) args.push('--lease-ttl', String(parseLeaseTtl(String(options.leaseTtlSeconds))));
  const prefix = options.prefix ?? DEFAULT_CLUSTER_PREFIX;
  if (!prefix.startsWith('/')) throw new DsecError('DSEC_USAGE', { message: `--prefix ${JSON.stringify(prefix)}: must start with /` });
  args.push('--prefix', prefix);
  return { args, address };
}
