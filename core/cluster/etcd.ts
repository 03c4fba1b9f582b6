/**
 * Connecting to etcd. `connectEtcd` proves the cluster answers (a
 * linearizable read, so a cluster without quorum counts as unreachable)
 * before anyone uses the client: an etcd that is down must be a clear error
 * naming the endpoints, never an empty answer that looks like an empty
 * cluster and plans to recreate everything.
 */
import { Etcd3, GRPCGenericError, isRecoverableError } from 'etcd3';
import { DsecError } from '../errors.js';
import { DEFAULT_CLUSTER_PREFIX } from './keys.js';

export interface ConnectEtcdOptions {
  /**
   * How long the first read (and the dial) may take before etcd counts as
   * unreachable; also the deadline of every later unary call. @default 5000
   */
  readonly timeoutMs?: number;
}

/** The endpoints each client was made for, so later failures can name them. */
const endpointsOf = new WeakMap<Etcd3, readonly string[]>();

/** `127.0.0.1:2379` -> `http://127.0.0.1:2379`; URLs stay as they are. */
export function etcdUrl(endpoint: string): string {
  return /^https?:\/\//.test(endpoint) ? endpoint : `http://${endpoint}`;
}

/** The endpoints `client` was connected to, joined for messages ("the configured endpoints" if unknown). */
export function describeEndpoints(client: Etcd3): string {
  return endpointsOf.get(client)?.join(', ') ?? 'the configured endpoints';
}

/** A connection-level failure (down, no leader, deadline, open circuit), as opposed to a refused request. */
export function isEtcdConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  // cockatiel's BrokenCircuitError: a host failed repeatedly and is skipped for a while.
  if (error.name === 'BrokenCircuitError' || error.constructor.name === 'BrokenCircuitError') return true;
  return isRecoverableError(error) || error instanceof GRPCGenericError;
}

/** DSEC_ETCD_UNREACHABLE naming the client's endpoints, for a connection failure; other errors unchanged. */
export function etcdFailure(client: Etcd3, error: unknown): unknown {
  if (error instanceof DsecError || !isEtcdConnectionError(error)) return error;
  return new DsecError(
    'DSEC_ETCD_UNREACHABLE',
    { endpoints: describeEndpoints(client), message: (error as Error).message },
    { cause: error },
  );
}

const withTimeout = <T>(work: Promise<T>, ms: number, what: string): Promise<T> => {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
};

/**
 * An etcd3 client for `endpoints` (failover across them), checked with one
 * quick read. Throws DSEC_ETCD_UNREACHABLE naming the endpoints when no
 * member answers within `timeoutMs`; the caller owns (and closes) the client.
 */
export async function connectEtcd(endpoints: readonly string[], options: ConnectEtcdOptions = {}): Promise<Etcd3> {
  const timeoutMs = options.timeoutMs ?? 5000;
  const joined = endpoints.join(', ');
  if (endpoints.length === 0) {
    throw new DsecError('DSEC_ETCD_UNREACHABLE', { endpoints: '(none)', message: 'no etcd endpoints were given' });
  }
  const client = new Etcd3({
    hosts: endpoints.map(etcdUrl),
    dialTimeout: timeoutMs,
    // Streams (watches, lease keepalives) live on; every unary call gets a deadline.
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + timeoutMs }),
  });
  endpointsOf.set(client, [...endpoints]);
  try {
    await withTimeout(client.get(DEFAULT_CLUSTER_PREFIX).exec(), timeoutMs, 'etcd');
  } catch (error) {
    client.close();
    throw new DsecError('DSEC_ETCD_UNREACHABLE', { endpoints: joined, message: (error as Error).message }, { cause: error });
  }
  return client;
}
