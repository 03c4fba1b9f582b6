/**
 * Claims on a node: a rollout acquiring a sandbox from its fleet's pool,
 * claiming one by id, renewing its claim, and releasing it (recycled by
 * default, or kept). Each step runs under the sandbox's lock and is on disk
 * before it is answered; the pool (pools.ts) is told of every change, so it
 * serves its waiters and tops itself up.
 *
 * Recycling is a destroy: the pool already made a fresh sandbox in place of
 * this one when it was handed out, so nothing a holder wrote ever reaches
 * the next holder. A recycle is marked on disk first, so an agent killed
 * half-way finishes it when it starts again.
 */
import type { Dsec } from '../dsec.js';
import { DsecError } from '../errors.js';
import type { PoolInfo, ReleaseResult, SandboxInfo } from '../live.js';
import { claimSandbox, releaseClaim } from './claims.js';
import type { PoolManager } from './pools.js';
import { toInfo, type SandboxEntry, type SandboxStore } from './store.js';
import { checkClaimRequest, checkSandboxId } from './validate.js';
import { checkAcquireRequest, checkPoolSpec, checkReleaseRequest, checkRenewRequest } from './validate-pools.js';

export interface ClaimHost {
  readonly dsec: Dsec;
  readonly store: SandboxStore;
  readonly pools: PoolManager;
  /** Destroy hooks, then the folder and the record; the caller holds the sandbox's lock. */
  teardown(entry: SandboxEntry): Promise<void>;
}

export class ClaimService {
  constructor(private readonly host: ClaimHost) {}

  private get log() {
    return this.host.dsec.log;
  }

  /** Take a ready sandbox of the fleet's pool (`{holder, ttlSeconds?, labels?, waitMs?, lineage?}`), waiting up to waitMs. */
  async acquire(fleet: string, input: unknown, signal?: AbortSignal): Promise<SandboxInfo> {
    const request = checkAcquireRequest(input);
    // A backend that runs tasks (invoke) keeps its sandboxes as workers any task may use: one cannot be held.
    const { backend } = this.host.pools.specOf(fleet, request.lineage).template;
    if (this.host.dsec.hooks.invoke.get(backend)?.isUsed()) {
      throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend, operation: `acquire: fleet ${fleet}'s sandboxes are workers for invoke (dsec fn invoke), shared by its tasks` });
    }
    const entry = await this.host.pools.acquire(fleet, request, signal);
    this.host.pools.sandboxChanged(entry);
    return toInfo(entry);
  }

  /** Set a fleet's pool record on this node (the engine does, at apply). */
  setPool(fleet: string, input: unknown): Promise<PoolInfo> {
    return this.host.pools.put(checkPoolSpec(fleet, input));
  }

  /** Forget a fleet's pool (`?lineage=`): no more refills; its sandboxes stay for the engine to delete. */
  async deletePool(fleet: string, lineage: string | null): Promise<{ existed: boolean }> {
    if (!lineage) throw new DsecError('DSEC_AGENT_REQUEST', { message: "name the pool's lineage: ?lineage=..." });
    return { existed: await this.host.pools.remove(lineage, fleet) };
  }

  listPools(): PoolInfo[] {
    return this.host.pools.list();
  }

  /** Claim a running or paused sandbox by id (`{holder, ttlSeconds?}`); a pool's sandbox counts against the pool's maxClaimed. */
  claim(idInput: unknown, input: unknown): Promise<SandboxInfo> {
    const id = checkSandboxId(idInput);
    const request = checkClaimRequest(input);
    return this.host.store.withLock(id, async () => {
      const entry = this.live(id);
      if (!entry.claim || entry.claim.holder !== request.holder) {
        const { claimed, maxClaimed } = this.host.pools.claimRoom(entry);
        if (maxClaimed !== undefined && claimed >= maxClaimed) {
          throw new DsecError('DSEC_SANDBOX_BUSY', { id, operation: 'be claimed', reason: `its pool has ${claimed} claimed, its maxClaimed` });
        }
      }
      const claim = claimSandbox(entry, request, Date.now());
      entry.kept = undefined;
      await this.host.store.persist(entry);
      this.host.pools.sandboxChanged(entry);
      this.log.info(`sandbox ${id}: claimed by ${claim.holder}${claim.expiresAt ? ` until ${claim.expiresAt}` : ''}`);
      return toInfo(entry);
    });
  }

  /** `{holder, ttlSeconds}`: extend the holder's claim to ttlSeconds from now. Refused for another holder, and on an unclaimed sandbox (it lapsed). */
  renew(idInput: unknown, input: unknown): Promise<SandboxInfo> {
    const id = checkSandboxId(idInput);
    const request = checkRenewRequest(input);
    return this.host.store.withLock(id, async () => {
      const entry = this.live(id);
      this.checkHolder(entry, request.holder);
      entry.claim = { ...entry.claim!, expiresAt: new Date(Date.now() + request.ttlSeconds * 1000).toISOString() };
      await this.host.store.persist(entry);
      return toInfo(entry);
    });
  }

  /**
   * End a claim (`{keep?, holder?}`). By default a pool's sandbox is
   * recycled (destroyed); with `keep` it stays, unclaimed, marked kept
   * (never handed out again). A sandbox outside any pool just loses its claim.
   */
  release(idInput: unknown, input: unknown): Promise<ReleaseResult> {
    const id = checkSandboxId(idInput);
    const request = checkReleaseRequest(input);
    return this.host.store.withLock(id, async () => {
      const entry = this.host.store.get(id);
      if (!entry) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
      if (request.holder !== undefined && entry.claim && entry.claim.holder !== request.holder) {
        throw new DsecError('DSEC_SANDBOX_CLAIMED', { id, holder: entry.claim.holder });
      }
      const pool = this.host.pools.poolOf(entry);
      const holder = entry.claim?.holder ?? entry.kept?.holder;
      if (request.keep || !pool) {
        const released = releaseClaim(entry);
        if (released && pool) entry.kept = { holder: released.holder, releasedAt: new Date().toISOString() };
        if (released) {
          await this.host.store.persist(entry);
          this.log.info(`sandbox ${id}: released by ${released.holder}${pool ? ', kept' : ''}`);
        }
        this.host.pools.sandboxChanged(entry);
        return { id, recycled: false, sandbox: toInfo(entry) };
      }
      entry.recycling = true;
      await this.host.store.persist(entry);
      this.log.info(`sandbox ${id}: released${holder ? ` by ${holder}` : ''}; recycling it`);
      await this.host.teardown(entry);
      await this.host.pools.dropPlacement(id);
      this.host.pools.sandboxChanged(entry);
      return { id, recycled: true };
    });
  }

  /** The old `DELETE /v1/sandboxes/:id/claim`: end the claim and keep the sandbox. */
  async unclaim(id: unknown): Promise<SandboxInfo> {
    const result = await this.release(id, { keep: true });
    return result.sandbox!;
  }

  /** A call that names a holder is refused unless that holder has the sandbox now. */
  checkHolder(entry: SandboxEntry, holder: string | undefined): void {
    if (holder === undefined) return;
    const id = entry.ctx.spec.id;
    const claim = entry.claim;
    if (!claim) {
      const why = entry.kept ? `it was released (kept) by ${entry.kept.holder} at ${entry.kept.releasedAt}` : 'it is not claimed (its claim lapsed or was released)';
      throw new DsecError('DSEC_SANDBOX_NOT_CLAIMED', { id, holder, why });
    }
    if (claim.holder !== holder) throw new DsecError('DSEC_SANDBOX_CLAIMED', { id, holder: claim.holder });
    if (claim.expiresAt !== undefined && Date.parse(claim.expiresAt) <= Date.now()) {
      throw new DsecError('DSEC_SANDBOX_NOT_CLAIMED', { id, holder, why: `the claim expired at ${claim.expiresAt}; the reaper recycles it` });
    }
  }

  /** A sandbox that is up (running or paused), or why not. */
  private live(id: string): SandboxEntry {
    const entry = this.host.store.get(id);
    if (!entry) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
    if (entry.ctx.status !== 'running' && entry.ctx.status !== 'paused') {
      throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: entry.ctx.status });
    }
    return entry;
  }
}
