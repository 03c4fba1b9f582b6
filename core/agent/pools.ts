/**
 * Warm pools on one node: for each fleet the engine applied here, a record
 * (PoolSpec: the template a new sandbox is made from, how many ready ones
 * this node keeps, the claim bound) and the acquires waiting on it.
 *
 * The rules, and why:
 * - `acquire` hands out a ready sandbox (running or paused, fresh: never
 *   claimed, never released with keep) synchronously, in the event loop's
 *   one thread: two acquires can never get one sandbox, and waiters are
 *   served first come, first served.
 * - The pool tops itself up to `ready` fresh sandboxes (plus one per waiter,
 *   within `maxClaimed`) whenever something changes: a hand-out, a create
 *   that finished or failed, a release, a record put, the agent starting. It
 *   only ever creates: removing surplus is the engine's (the plan shows it),
 *   so an apply running at the same time never fights the pool. The engine
 *   sets `ready` to what the plan keeps before its operations and to the
 *   final count after them, so the two never create the same sandbox twice.
 * - A refill that fails is destroyed at once (no failed records pile up);
 *   its error is kept on the pool (GET /v1/pools, the exhausted message) and
 *   refills back off, 1 s doubling to 60 s.
 * - Nothing here is persisted but the records: counts are read from the
 *   sandboxes themselves, so a restarted agent tops up what a crash left
 *   missing (a refill that never started, a create cleaned up half-made).
 */
import { DsecError } from '../errors.js';
import type { Logger, NodeContext } from '../hooks.js';
import {
  LABEL_FLEET,
  LABEL_LINEAGE,
  LABEL_SPEC,
  poolTemplateDigest,
  type AcquireRequest,
  type PoolCounts,
  type PoolInfo,
  type PoolSpec,
  type SandboxSpec,
} from '../live.js';
import { newSandboxId } from '../util/sandbox-id.js';
import { PoolRecords } from './pool-records.js';
import type { SandboxEntry, SandboxStore } from './store.js';

/** Refills of one pool being created at once: a burst of hand-outs must not start hundreds of creates on a node. */
const MAX_REFILLS_IN_FLIGHT = 16;
const FIRST_BACKOFF_MS = 1_000;
const MAX_BACKOFF_MS = 60_000;

/**
 * Where a cluster node records the sandboxes its pool makes (etcd
 * placements, as the engine records its own before a create), so the
 * cluster's view routes to them and never takes them for strays.
 */
export interface PlacementRecorder {
  record(spec: SandboxSpec): Promise<void>;
  drop(id: string): Promise<void>;
}

export interface PoolHost {
  readonly node: NodeContext;
  readonly store: SandboxStore;
  readonly log: Logger;
  /** A cluster node's placements; absent on a node of the local provider. */
  readonly placements?: PlacementRecorder;
  /** The agent's create (admission, layers, backend); rejects when it failed. */
  create(spec: SandboxSpec): Promise<unknown>;
  /** The agent's destroy of a sandbox the pool made and does not want (a failed refill, one made for a pool since deleted). */
  destroy(id: string): Promise<unknown>;
  persist(entry: SandboxEntry): Promise<void>;
}

interface Waiter {
  readonly request: AcquireRequest;
  readonly since: number;
  resolve(entry: SandboxEntry): void;
  reject(error: Error): void;
  /** Stop its timer and abort listener. */
  settle(): void;
  /** Leave the queue with DSEC_POOL_EXHAUSTED (its wait ran out). */
  giveUp(): void;
}

interface Pool {
  spec: PoolSpec;
  digest: string;
  readonly waiters: Waiter[];
  /** Refills started whose sandbox may not be in the store yet. */
  readonly pending: Set<string>;
  backoffMs: number;
  retryAt: number;
  retryTimer?: NodeJS.Timeout;
  lastError?: { at: string; message: string };
  /** A pass (serve, top up) is due at the end of this turn of the event loop. */
  passDue?: boolean;
}

export const poolKey = (lineage: string, fleet: string): string => `${lineage}/${fleet}`;

export class PoolManager {
  private readonly pools = new Map<string, Pool>();
  private readonly records: PoolRecords;
  private stopped = false;

  constructor(
    private readonly host: PoolHost,
    dir: string,
  ) {
    this.records = new PoolRecords(dir, host.log);
  }

  /** Read the records a previous agent kept. */
  async load(): Promise<void> {
    for (const spec of await this.records.load()) this.pools.set(poolKey(spec.lineage, spec.fleet), newPool(spec));
  }

  /** Top every pool up (after a restart: refills a crash never started). */
  start(): void {
    for (const pool of this.pools.values()) this.topUp(pool);
  }

  /** Stop refilling and turn waiting acquires away (the agent is stopping). */
  stop(): void {
    this.stopped = true;
    for (const pool of this.pools.values()) {
      clearTimeout(pool.retryTimer);
      for (const waiter of pool.waiters.splice(0)) {
        waiter.settle();
        waiter.reject(new DsecError('DSEC_AGENT_UNREACHABLE', { address: this.host.node.name, message: 'the node agent is stopping; acquire again' }));
      }
    }
  }

  /** Create or replace a pool record; waiting acquires and refills carry on under the new one. */
  async put(spec: PoolSpec): Promise<PoolInfo> {
    const key = poolKey(spec.lineage, spec.fleet);
    await this.records.write(spec);
    let pool = this.pools.get(key);
    if (pool) {
      pool.spec = spec;
      pool.digest = poolTemplateDigest(spec.template);
    } else this.pools.set(key, (pool = newPool(spec)));
    this.host.log.info(`pool ${spec.fleet} (lineage ${spec.lineage}): ${spec.ready} ready${spec.maxClaimed !== undefined ? `, at most ${spec.maxClaimed} claimed` : ''}`);
    this.changed(pool);
    return this.info(pool);
  }

  /** Forget a pool (its fleet is being deleted): no more refills; waiting acquires are refused. Its sandboxes are the engine's to delete. */
  async remove(lineage: string, fleet: string): Promise<boolean> {
    const key = poolKey(lineage, fleet);
    const pool = this.pools.get(key);
    await this.records.remove(lineage, fleet);
    if (!pool) return false;
    this.pools.delete(key);
    clearTimeout(pool.retryTimer);
    for (const waiter of pool.waiters.splice(0)) {
      waiter.settle();
      waiter.reject(new DsecError('DSEC_POOL_NOT_FOUND', { fleet, node: this.host.node.name, why: 'its pool was removed while this acquire waited (the fleet is being deleted)' }));
    }
    return true;
  }

  list(): PoolInfo[] {
    return [...this.pools.values()].map((pool) => this.info(pool)).sort((a, b) => a.fleet.localeCompare(b.fleet) || a.lineage.localeCompare(b.lineage));
  }

  /** The pool a sandbox belongs to (by its lineage and fleet labels), if its fleet has one here. */
  poolOf(entry: SandboxEntry): PoolSpec | undefined {
    return this.poolFor(entry)?.spec;
  }

  /** Something changed for a sandbox (created, claimed, released, destroyed): serve its pool's waiters and top it up. */
  sandboxChanged(entry: SandboxEntry): void {
    const pool = this.poolFor(entry);
    if (pool) this.changed(pool);
  }

  /** How many of the pool's sandboxes are claimed now, and its bound. */
  claimRoom(entry: SandboxEntry): { claimed: number; maxClaimed?: number } {
    const pool = this.poolFor(entry);
    if (!pool) return { claimed: 0 };
    return { claimed: this.members(pool).filter((member) => member.claim).length, ...(pool.spec.maxClaimed !== undefined ? { maxClaimed: pool.spec.maxClaimed } : {}) };
  }

  /**
   * Take a ready sandbox of the fleet's pool for `request.holder`, waiting
   * up to `request.waitMs` (first come, first served); the claim is on disk
   * before this resolves. `signal`: the caller went away while waiting.
   */
  acquire(fleet: string, request: AcquireRequest, signal?: AbortSignal): Promise<SandboxEntry> {
    const pool = this.find(fleet, request.lineage);
    return new Promise<SandboxEntry>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = () => {
        this.dropWaiter(pool, waiter);
        reject(new DsecError('DSEC_AGENT_REQUEST', { message: 'the caller went away while the acquire waited' }));
      };
      const waiter: Waiter = {
        request,
        since: Date.now(),
        resolve,
        reject,
        settle: () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', onAbort);
        },
        giveUp: () => {
          this.dropWaiter(pool, waiter);
          reject(this.exhausted(pool, Date.now() - waiter.since));
        },
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      pool.waiters.push(waiter);
      if ((request.waitMs ?? 0) > 0) timer = setTimeout(waiter.giveUp, request.waitMs);
      this.changed(pool);
    });
  }

  // ------------------------------------------------------------------ inside

  /** The record of a fleet's pool here; DSEC_POOL_NOT_FOUND or DSEC_POOL_AMBIGUOUS as for an acquire. */
  specOf(fleet: string, lineage: string | undefined): PoolSpec {
    return this.find(fleet, lineage).spec;
  }

  private find(fleet: string, lineage: string | undefined): Pool {
    const candidates = [...this.pools.values()].filter((pool) => pool.spec.fleet === fleet && (lineage === undefined || pool.spec.lineage === lineage));
    if (candidates.length === 1) return candidates[0];
    if (candidates.length > 1) {
      throw new DsecError('DSEC_POOL_AMBIGUOUS', { fleet, node: this.host.node.name, count: candidates.length, lineages: candidates.map((pool) => pool.spec.lineage).join(', ') });
    }
    const why = lineage !== undefined ? `none of lineage ${lineage}` : 'the fleet is not applied to this node, or was applied before pools existed: run dsec apply';
    throw new DsecError('DSEC_POOL_NOT_FOUND', { fleet, node: this.host.node.name, why });
  }

  private poolFor(entry: SandboxEntry): Pool | undefined {
    const { labels } = entry.ctx.spec;
    const fleet = labels[LABEL_FLEET];
    const lineage = labels[LABEL_LINEAGE];
    return fleet === undefined || lineage === undefined ? undefined : this.pools.get(poolKey(lineage, fleet));
  }

  private members(pool: Pool): SandboxEntry[] {
    return this.host.store.ofFleet(pool.spec.fleet).filter((entry) => entry.ctx.spec.labels[LABEL_LINEAGE] === pool.spec.lineage);
  }

  /**
   * Something in the pool changed: serve its waiters and top it up, once at
   * the end of this turn of the event loop however many changes (a burst of
   * acquires read in one go) came in it, so a burst costs one pass over the
   * pool's sandboxes rather than one per acquire.
   */
  private changed(pool: Pool): void {
    if (pool.passDue) return;
    pool.passDue = true;
    setImmediate(() => {
      pool.passDue = false;
      this.serve(pool);
      // Refills for the waiters start now, even for those that give up at once: the next acquires find them.
      this.topUp(pool);
      for (const waiter of pool.waiters.filter((candidate) => (candidate.request.waitMs ?? 0) <= 0)) waiter.giveUp();
    });
  }

  /** Hand ready sandboxes to waiters, in order, within maxClaimed. */
  private serve(pool: Pool): void {
    if (pool.waiters.length === 0) return;
    const members = this.members(pool);
    let claimed = members.filter((entry) => entry.claim).length;
    const wanted = pool.spec.template.labels[LABEL_SPEC];
    const ready = members
      .filter((entry) => this.isReady(entry))
      // The current spec first (during a rollout), running before paused, then the longest-waiting.
      .sort(
        (a, b) =>
          Number(b.ctx.spec.labels[LABEL_SPEC] === wanted) - Number(a.ctx.spec.labels[LABEL_SPEC] === wanted) ||
          Number(b.ctx.status === 'running') - Number(a.ctx.status === 'running') ||
          a.ctx.createdAt.localeCompare(b.ctx.createdAt),
      );
    const max = pool.spec.maxClaimed;
    while (pool.waiters.length > 0 && ready.length > 0 && (max === undefined || claimed < max)) {
      this.hand(pool, ready.shift()!, pool.waiters.shift()!);
      claimed += 1;
    }
  }

  private isReady(entry: SandboxEntry): boolean {
    const { status, spec } = entry.ctx;
    return (status === 'running' || status === 'paused') && !entry.claim && !entry.kept && !entry.recycling && !this.host.store.isBusy(spec.id);
  }

  /** Claim `entry` for the waiter at once (nothing else can see it ready after this line), then make it durable. */
  private hand(pool: Pool, entry: SandboxEntry, waiter: Waiter): void {
    waiter.settle();
    const now = Date.now();
    const { holder, labels } = waiter.request;
    const ttlSeconds = waiter.request.ttlSeconds ?? pool.spec.claimTtlSeconds;
    entry.claim = {
      holder,
      claimedAt: new Date(now).toISOString(),
      ...(ttlSeconds !== undefined ? { expiresAt: new Date(now + ttlSeconds * 1000).toISOString() } : {}),
      ...(labels && Object.keys(labels).length > 0 ? { labels: { ...labels } } : {}),
    };
    this.host.persist(entry).then(
      () => {
        this.host.log.info(`sandbox ${entry.ctx.spec.id}: acquired from pool ${pool.spec.fleet} by ${holder}${entry.claim?.expiresAt ? ` until ${entry.claim.expiresAt}` : ''}`);
        waiter.resolve(entry);
      },
      (error: Error) => {
        // Not on disk: not handed out. The sandbox is ready again for the next one.
        entry.claim = undefined;
        waiter.reject(error);
        this.changed(pool);
      },
    );
  }

  private dropWaiter(pool: Pool, waiter: Waiter): void {
    waiter.settle();
    const at = pool.waiters.indexOf(waiter);
    if (at >= 0) pool.waiters.splice(at, 1);
  }

  /** Start refills while the pool has fewer fresh sandboxes than it keeps (plus one per waiter within maxClaimed). */
  private topUp(pool: Pool): void {
    if (this.stopped || this.pools.get(poolKey(pool.spec.lineage, pool.spec.fleet)) !== pool) return;
    const waitMs = pool.retryAt - Date.now();
    if (waitMs > 0) {
      pool.retryTimer ??= setTimeout(() => {
        pool.retryTimer = undefined;
        this.topUp(pool);
      }, waitMs).unref();
      return;
    }
    const members = this.members(pool);
    const fresh = members.filter((entry) => !entry.claim && !entry.kept && !entry.recycling && isUp(entry)).length;
    const unseen = [...pool.pending].filter((id) => !this.host.store.get(id)).length;
    const claimed = members.filter((entry) => entry.claim).length;
    const room = pool.spec.maxClaimed === undefined ? Infinity : Math.max(0, pool.spec.maxClaimed - claimed);
    let missing = pool.spec.ready + Math.min(pool.waiters.length, room) - fresh - unseen;
    while (missing > 0 && pool.pending.size < MAX_REFILLS_IN_FLIGHT) {
      this.refill(pool);
      missing -= 1;
    }
  }

  private refill(pool: Pool): void {
    let id = newSandboxId(pool.spec.fleet);
    while (this.host.store.get(id) || pool.pending.has(id)) id = newSandboxId(pool.spec.fleet);
    pool.pending.add(id);
    const spec: SandboxSpec = { ...structuredClone(pool.spec.template), id };
    const placed = this.host.placements ? this.host.placements.record(spec) : Promise.resolve();
    placed.then(() => this.host.create(spec)).then(
      async () => {
        pool.pending.delete(id);
        pool.backoffMs = 0;
        pool.lastError = undefined;
        // Its pool went away while it was made (the fleet is being deleted): it has nobody to serve.
        if (this.pools.get(poolKey(pool.spec.lineage, pool.spec.fleet)) !== pool) await this.discard(id);
      },
      async (error: Error) => {
        pool.pending.delete(id);
        pool.backoffMs = Math.min(MAX_BACKOFF_MS, Math.max(FIRST_BACKOFF_MS, pool.backoffMs * 2));
        pool.retryAt = Date.now() + pool.backoffMs;
        pool.lastError = { at: new Date().toISOString(), message: error.message };
        this.host.log.warn(`pool ${pool.spec.fleet}: a refill failed (retrying in ${pool.backoffMs / 1000} s): ${error.message}`);
        await this.discard(id);
      },
    ).finally(() => this.changed(pool));
  }

  private async discard(id: string): Promise<void> {
    await this.host.destroy(id).catch((error: Error) => this.host.log.warn(`sandbox ${id}: removing a refill nobody wants failed: ${error.message}`));
    await this.dropPlacement(id);
  }

  /** A sandbox of a pool this node destroyed on its own (recycled, discarded): its placement goes too. */
  async dropPlacement(id: string): Promise<void> {
    await this.host.placements?.drop(id).catch((error: Error) => this.host.log.warn(`sandbox ${id}: dropping its placement failed: ${error.message}`));
  }

  private exhausted(pool: Pool, waitedMs: number): DsecError {
    const counts = this.counts(pool);
    return new DsecError('DSEC_POOL_EXHAUSTED', {
      fleet: pool.spec.fleet,
      node: this.host.node.name,
      waitedMs,
      ready: counts.ready,
      claimed: counts.claimed,
      limit: pool.spec.maxClaimed !== undefined ? ` (at most ${pool.spec.maxClaimed})` : '',
      creating: counts.creating,
      waiting: counts.waiting,
      lastError: pool.lastError ? `; the last refill failed at ${pool.lastError.at}: ${pool.lastError.message}` : '',
      counts,
    });
  }

  private counts(pool: Pool): PoolCounts {
    const members = this.members(pool);
    const unclaimed = members.filter((entry) => !entry.claim && !entry.kept && !entry.recycling);
    return {
      ready: unclaimed.filter((entry) => entry.ctx.status === 'running' || entry.ctx.status === 'paused').length,
      creating: unclaimed.filter((entry) => entry.ctx.status === 'creating').length + [...pool.pending].filter((id) => !this.host.store.get(id)).length,
      claimed: members.filter((entry) => entry.claim).length,
      kept: members.filter((entry) => !entry.claim && entry.kept).length,
      waiting: pool.waiters.length,
    };
  }

  private info(pool: Pool): PoolInfo {
    return {
      ...pool.spec,
      node: this.host.node.name,
      digest: pool.digest,
      counts: this.counts(pool),
      ...(pool.lastError ? { lastError: { ...pool.lastError } } : {}),
    };
  }
}

function newPool(spec: PoolSpec): Pool {
  return { spec, digest: poolTemplateDigest(spec.template), waiters: [], pending: new Set(), backoffMs: 0, retryAt: 0 };
}

function isUp(entry: SandboxEntry): boolean {
  const { status } = entry.ctx;
  return status === 'creating' || status === 'running' || status === 'paused';
}
