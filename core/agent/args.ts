/**
 * The agent daemon's command line (see main.ts for the synopsis). Cluster
 * flags are checked together: TCP needs a token, registration needs TCP.
 */
import path from 'node:path';
import { DEFAULT_CLUSTER_PREFIX } from '../cluster/keys.js';
import type { PluginRef } from '../model.js';
import { DEFAULT_LEASE_TTL_SECONDS, formatHostPort, parseEndpoints, parseHostPort, parseLabel, parseLeaseTtl, type HostPort } from './cluster-flags.js';

export interface AgentClusterArgs {
  /** Where to serve the TCP API. */
  readonly listen: HostPort;
  readonly tokenFile: string;
  /** Registration in etcd, when `--join` is given. */
  readonly join?: {
    readonly endpoints: readonly string[];
    /** `host:port` others reach the TCP API at. */
    readonly advertise: string;
    readonly labels: Readonly<Record<string, string>>;
    readonly leaseTtlSeconds: number;
    readonly prefix: string;
  };
}

export interface AgentArgs {
  readonly root: string;
  readonly name?: string;
  readonly plugins: PluginRef[];
  readonly baseDir: string;
  readonly builtins: boolean;
  readonly debug: boolean;
  readonly reapIntervalMs?: number;
  readonly cluster?: AgentClusterArgs;
}

export function parseAgentArgs(argv: readonly string[]): AgentArgs {
  let root: string | undefined;
  let name: string | undefined;
  let plugins: PluginRef[] = [];
  let baseDir: string | undefined;
  let builtins = true;
  let debug = false;
  let reapIntervalMs: number | undefined;
  let listen: HostPort | undefined;
  let tokenFile: string | undefined;
  let endpoints: string[] | undefined;
  let advertise: string | undefined;
  let leaseTtlSeconds: number | undefined;
  let prefix: string | undefined;
  const labels: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = () => {
      const next = argv[++i];
      if (next === undefined) throw new Error(`${flag} needs a value`);
      return next;
    };
    if (flag === '--root') root = path.resolve(value());
    else if (flag === '--name') name = value();
    else if (flag === '--plugins') plugins = parsePluginRefs(value());
    else if (flag === '--base-dir') baseDir = path.resolve(value());
    else if (flag === '--no-builtins') builtins = false;
    else if (flag === '--debug') debug = true;
    else if (flag === '--reap-interval-ms') {
      const ms = Number(value());
      if (!Number.isInteger(ms) || ms < 0) throw new Error('--reap-interval-ms must be a whole number >= 0 (0: no reaper)');
      reapIntervalMs = ms;
    } else if (flag === '--listen') listen = parseHostPort('--listen', value());
    else if (flag === '--token-file') tokenFile = path.resolve(value());
    else if (flag === '--join') endpoints = parseEndpoints(value());
    else if (flag === '--advertise') advertise = formatHostPort(parseHostPort('--advertise', value()));
    else if (flag === '--node-label') {
      const [key, text] = parseLabel(value());
      labels[key] = text;
    } else if (flag === '--lease-ttl') leaseTtlSeconds = parseLeaseTtl(value());
    else if (flag === '--prefix') {
      prefix = value();
      if (!prefix.startsWith('/')) throw new Error(`--prefix ${JSON.stringify(prefix)}: must start with /`);
    }
    else throw new Error(`unknown argument ${flag}`);
  }
  if (!root) throw new Error('--root DIR is required');
  if ((listen === undefined) !== (tokenFile === undefined)) throw new Error('--listen and --token-file go together: the TCP API is never served without a token');
  const joinOnly = advertise !== undefined || leaseTtlSeconds !== undefined || prefix !== undefined || Object.keys(labels).length > 0;
  if (!endpoints && joinOnly) throw new Error('--advertise, --node-label, --lease-ttl and --prefix need --join');
  if (endpoints && !listen) throw new Error('--join needs --listen and --token-file: cluster agents serve the engine over TCP');
  let cluster: AgentClusterArgs | undefined;
  if (listen && tokenFile) {
    const advertised = advertise ?? formatHostPort(listen);
    if (endpoints && /^(0\.0\.0\.0|\[?::\]?)(:|$)/.test(advertised)) {
      throw new Error(`--listen ${formatHostPort(listen)} binds every address: give --advertise HOST:PORT, the one other machines reach`);
    }
    cluster = {
      listen,
      tokenFile,
      ...(endpoints
        ? {
            join: {
              endpoints,
              advertise: advertised,
              labels,
              leaseTtlSeconds: leaseTtlSeconds ?? DEFAULT_LEASE_TTL_SECONDS,
              prefix: prefix ?? DEFAULT_CLUSTER_PREFIX,
            },
          }
        : {}),
    };
  }
  return { root, name, plugins, baseDir: baseDir ?? root, builtins, debug, reapIntervalMs, cluster };
}

function parsePluginRefs(text: string): PluginRef[] {
  const parsed: unknown = JSON.parse(text);
  if (!Array.isArray(parsed)) throw new Error('--plugins must be a JSON array');
  return parsed.map((entry) => {
    if (typeof entry === 'string') return { name: entry, options: {} };
    if (entry && typeof entry === 'object' && typeof (entry as PluginRef).name === 'string') {
      return { name: (entry as PluginRef).name, options: (entry as PluginRef).options ?? {} };
    }
    throw new Error(`--plugins: ${JSON.stringify(entry)} is not {name, options}`);
  });
}
