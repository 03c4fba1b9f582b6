/**
 * A cluster agent's membership in etcd: its NodeRegistration under
 * clusterKeys(prefix).node(name), held by a lease the etcd3 client keeps
 * alive. The value is put again every `refreshMs` so load figures stay fresh.
 *
 * Lifecycle:
 * - join: grant a lease, claim the key in a transaction (created only if
 *   absent), then refresh. A key held by another agent (another address) is a
 *   refusal: two agents must never answer for one node name. A key left by a
 *   previous run of this same agent (same address, killed before it could
 *   revoke) is taken over at once instead of waiting for its lease to lapse.
 * - lease lost (etcd restarted past the TTL, a partition, the key deleted):
 *   logged, then registered again with a new lease, retrying with backoff for
 *   as long as etcd is unreachable. Nothing here ever throws into the agent.
 * - leave: revoke the lease, so the node disappears at once.
 */
import { Etcd3, EtcdLeaseInvalidError, type Lease } from 'etcd3';
import { clusterKeys, placementOf, type NodeRegistration } from '../cluster/keys.js';
import { DsecError, isDsecError } from '../errors.js';
import type { Logger } from '../hooks.js';
import type { NodeInfo, SandboxSpec } from '../live.js';
import { RateLimitedLog } from './tcp-auth.js';

export const DEFAULT_REFRESH_MS = 2_000;
const CALL_TIMEOUT_MS = 3_000;
const FIRST_RETRY_MS = 250;

export interface ClusterMemberOptions {
  /** etcd endpoints (`http://host:port`). */
  readonly endpoints: readonly string[];
  /** @default "/dsec" */
  readonly prefix?: string;
  readonly name: string;
  /** `host:port` where this agent serves its TCP API. */
  readonly address: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly leaseTtlSeconds: number;
  /** The node as `GET /v1/node` describes it. */
  readonly nodeInfo: () => Promise<NodeInfo>;
  readonly log: Logger;
  /** How often the registration is put again with fresh figures. @default 2000 */
  readonly refreshMs?: number;
}

export class ClusterMember {
  private readonly client: Etcd3;
  private readonly key: string;
  private readonly warnings: RateLimitedLog;
  private lease: Lease | undefined;
  private leaseId: string | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private refreshing = false;
  private registering = false;
  private stopped = false;
  private retryDelayMs = FIRST_RETRY_MS;

  constructor(private readonly options: ClusterMemberOptions) {
    this.key = clusterKeys(options.prefix).node(options.name);
    this.warnings = new RateLimitedLog(options.log, { perWindow: 10 });
    this.client = new Etcd3({
      hosts: [...options.endpoints],
      dialTimeout: CALL_TIMEOUT_MS,
      // Streams (the lease keepalive) live on; every other call gets a deadline, so a dead etcd is an error, not a hang.
      defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + CALL_TIMEOUT_MS }),
      // gRPC's default reconnect backoff grows to minutes: come back within a second of etcd returning.
      grpcOptions: { 'grpc.initial_reconnect_backoff_ms': 100, 'grpc.max_reconnect_backoff_ms': 1_000 },
    });
  }

  private get log(): Logger {
    return this.options.log;
  }

  private get maxRetryMs(): number {
    return Math.min(5_000, this.options.leaseTtlSeconds * 1000);
  }

  /**
   * Register, retrying while etcd does not answer, for up to `waitMs`; then
   * resolve false and keep trying in the background. Rejects
   * DSEC_AGENT_START when another agent holds this node name.
   */
  async join(waitMs: number): Promise<boolean> {
    const deadline = Date.now() + waitMs;
    this.refreshTimer = setInterval(() => void this.refresh(), this.options.refreshMs ?? DEFAULT_REFRESH_MS);
    for (;;) {
      try {
        await this.register();
        return true;
      } catch (error) {
        if (isDsecError(error, 'DSEC_AGENT_START') || this.stopped) {
          await this.leave();
          throw error;
        }
        this.warnings.warn(`registering in etcd (${this.options.endpoints.join(',')}) failed: ${(error as Error).message}; retrying`);
        if (Date.now() + this.retryDelayMs > deadline) {
          this.log.warn(`not registered in etcd after ${waitMs} ms; serving anyway and retrying in the background`);
          this.scheduleRegister();
          return false;
        }
        await sleep(this.retryDelayMs);
        this.retryDelayMs = Math.min(this.retryDelayMs * 2, this.maxRetryMs);
      }
    }
  }

  /**
   * Record where a sandbox this node's pool makes is, before it is created
   * (as the engine records its own): the cluster's view routes calls by it
   * and takes a placed sandbox for the truth. Rejects when etcd does not
   * answer, so the refill waits (and retries) rather than make a sandbox
   * the cluster would take for a stray.
   */
  async recordPlacement(spec: SandboxSpec): Promise<void> {
    await this.client.put(clusterKeys(this.options.prefix).placement(spec.id)).value(JSON.stringify(placementOf(spec, this.options.name)));
  }

  /** Drop the placement of a sandbox this node destroyed on its own (a recycle, a discarded refill). */
  async dropPlacement(id: string): Promise<void> {
    await this.client.delete().key(clusterKeys(this.options.prefix).placement(id));
  }

  /** Revoke the lease (the node disappears at once) and close the client; bounded, never throws. */
  async leave(timeoutMs = CALL_TIMEOUT_MS): Promise<void> {
    this.stopped = true;
    clearInterval(this.refreshTimer);
    clearTimeout(this.retryTimer);
    const lease = this.lease;
    this.lease = undefined;
    if (lease) {
      const revoked = lease.revoke().then(
        () => this.log.info(`left the cluster: lease of ${this.key} revoked`),
        (error: Error) => this.log.warn(`revoking the lease of ${this.key} failed (it lapses within ${this.options.leaseTtlSeconds} s): ${error.message}`),
      );
      await Promise.race([revoked, sleep(timeoutMs)]);
    }
    this.client.close();
  }

  /** One attempt: a new lease, the key claimed under it. */
  private async register(): Promise<void> {
    const lease = this.client.lease(this.options.leaseTtlSeconds);
    lease.on('lost', (error) => this.onLost(lease, error));
    try {
      const leaseId = await lease.grant();
      await this.claimKey(leaseId);
      this.lease = lease;
      this.leaseId = leaseId;
      this.retryDelayMs = FIRST_RETRY_MS;
      this.log.info(`registered in etcd as ${this.key} (address ${this.options.address}, lease ${leaseId}, ttl ${this.options.leaseTtlSeconds} s)`);
    } catch (error) {
      lease.release();
      await lease.revoke().catch(() => undefined);
      throw error;
    }
  }

  /** Create the key under `leaseId` unless someone holds it; take it over from a dead run of this same agent. */
  private async claimKey(leaseId: string): Promise<void> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const value = JSON.stringify(await this.registration());
      const created = await this.client
        .if(this.key, 'Create', '==', 0)
        .then(this.client.put(this.key).value(value).lease(leaseId))
        .else(this.client.get(this.key))
        .commit();
      if (created.succeeded) return;
      const existing = created.responses[0]?.response_range?.kvs[0];
      if (!existing) continue; // lapsed in between: try again
      const holder = parseRegistration(existing.value);
      if (holder?.address !== this.options.address) {
        throw new DsecError('DSEC_AGENT_START', {
          message:
            `node name ${JSON.stringify(this.options.name)} is already registered in etcd (${this.key}) by the agent at ${holder?.address ?? 'an unknown address'}, ` +
            `under a live lease; give this agent another --name, or stop that one`,
        });
      }
      const replaced = await this.client
        .if(this.key, 'Mod', '==', existing.mod_revision)
        .then(this.client.put(this.key).value(value).lease(leaseId))
        .commit();
      if (replaced.succeeded) {
        this.log.info(`took over ${this.key} from a previous run of this agent (lease ${existing.lease} not yet lapsed)`);
        return;
      }
    }
    throw new Error(`${this.key} kept changing while it was being claimed`);
  }

  private async registration(): Promise<NodeRegistration> {
    return { info: await this.options.nodeInfo(), address: this.options.address, labels: this.options.labels, updatedAt: new Date().toISOString() };
  }

  /** Put the registration again with fresh figures; a put refused for the lease means it is gone. */
  private async refresh(): Promise<void> {
    if (this.refreshing || this.stopped || !this.lease || !this.leaseId) return;
    const lease = this.lease;
    this.refreshing = true;
    try {
      const value = JSON.stringify(await this.registration());
      if (this.lease !== lease || this.stopped) return;
      await this.client.put(this.key).value(value).lease(this.leaseId);
    } catch (error) {
      if (error instanceof EtcdLeaseInvalidError) this.onLost(lease, error);
      else this.warnings.warn(`refreshing ${this.key} failed: ${(error as Error).message}`);
    } finally {
      this.refreshing = false;
    }
  }

  private onLost(lease: Lease, error: Error): void {
    if (this.stopped || this.lease !== lease) return;
    this.lease = undefined;
    this.leaseId = undefined;
    lease.release();
    this.log.warn(`the lease of ${this.key} was lost (${error.message}); registering again`);
    this.scheduleRegister(0);
  }

  private scheduleRegister(delayMs = this.retryDelayMs): void {
    if (this.stopped || this.registering) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.registerInBackground(), delayMs);
  }

  private async registerInBackground(): Promise<void> {
    if (this.stopped || this.lease || this.registering) return;
    this.registering = true;
    try {
      await this.register();
      if (this.stopped) await this.leave();
    } catch (error) {
      const conflict = isDsecError(error, 'DSEC_AGENT_START');
      this.warnings.warn(`registering ${this.key} again failed: ${(error as Error).message}; retrying in ${this.retryDelayMs} ms`);
      this.retryDelayMs = conflict ? this.maxRetryMs : Math.min(this.retryDelayMs * 2, this.maxRetryMs);
    } finally {
      this.registering = false;
    }
    if (!this.lease) this.scheduleRegister();
  }
}

function parseRegistration(value: Buffer): NodeRegistration | undefined {
  try {
    return JSON.parse(value.toString('utf8')) as NodeRegistration;
  } catch {
    return undefined;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
