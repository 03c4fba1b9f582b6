/**
 * The reaper: enforces each sandbox's TTLs (spec.ttl) and claims' lifetimes.
 *
 * Every `intervalMs` it looks at each running or paused sandbox (an
 * in-memory check, no I/O) and reaps the ones due, a few at a time, each
 * through the agent (under the sandbox's lock; a fleet's sandbox is
 * re-created with the same id and spec, so the pool keeps its replicas).
 * Every clock it reads (createdAt, lastActivityAt, the claim) is persisted,
 * so an agent that was down past a TTL reaps on its first round.
 */
import type { Logger } from '../hooks.js';
import type { SandboxClaim, SandboxStatus, SandboxTtl } from '../live.js';
import { forEachLimited } from './concurrency.js';
import type { SandboxEntry } from './store.js';

/** Reaps running at once: each is a destroy, and for a fleet's sandbox a create. */
const REAP_CONCURRENCY = 4;
export const DEFAULT_REAP_INTERVAL_MS = 5_000;

/** What the reaper looks at of one sandbox. */
export interface ReapView {
  readonly id: string;
  readonly status: SandboxStatus;
  readonly createdAt: string;
  readonly lastActivityAt?: string;
  readonly ttl?: SandboxTtl;
  readonly claim?: SandboxClaim;
  /** Calls in flight: a sandbox running an exec is not idle. */
  readonly calls?: number;
}

export interface ReapDecision {
  /** For the log: which limit ran out, and when. */
  readonly reason: string;
  /** The claim ran out: it ends with the reap. */
  readonly claimExpired: boolean;
}

/**
 * Whether a sandbox is due, at `nowMs`. A claimed sandbox is reaped only
 * when its claim runs out; an unclaimed one when it lived `maxLifetime` or
 * went `idleStop` without a call (idle since its last call, or since it was
 * created when there was none).
 */
export function reapDecision(view: ReapView, nowMs: number): ReapDecision | undefined {
  if (view.status !== 'running' && view.status !== 'paused') return undefined;
  if (view.claim) {
    const expires = view.claim.expiresAt === undefined ? undefined : Date.parse(view.claim.expiresAt);
    if (expires !== undefined && nowMs >= expires) {
      return { reason: `the claim of ${view.claim.holder} expired at ${view.claim.expiresAt}`, claimExpired: true };
    }
    return undefined;
  }
  const { maxLifetimeSeconds, idleStopSeconds } = view.ttl ?? {};
  const created = Date.parse(view.createdAt);
  if (maxLifetimeSeconds !== undefined && nowMs - created >= maxLifetimeSeconds * 1000) {
    return { reason: `it reached its max lifetime of ${maxLifetimeSeconds} s (created ${view.createdAt})`, claimExpired: false };
  }
  if (idleStopSeconds !== undefined && (view.calls ?? 0) === 0) {
    const since = view.lastActivityAt ?? view.createdAt;
    if (nowMs - Date.parse(since) >= idleStopSeconds * 1000) {
      return { reason: `it was idle for ${idleStopSeconds} s (last call ${view.lastActivityAt ?? 'none'}, created ${view.createdAt})`, claimExpired: false };
    }
  }
  return undefined;
}

export interface ReaperOptions {
  readonly intervalMs: number;
  readonly log: Logger;
  /** Every sandbox as the reaper sees it. */
  views(): readonly ReapView[];
  /** Reap one sandbox (the agent re-checks under its lock, with `decide`). */
  reap(id: string, decide: (view: ReapView) => ReapDecision | undefined): Promise<void>;
}

export class Reaper {
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private readonly reaping = new Set<string>();

  constructor(private readonly options: ReaperOptions) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.tick(), this.options.intervalMs);
    // Never what keeps the process alive.
    this.timer.unref();
  }

  /** Stop the rounds and wait (bounded by the caller) for the one in flight. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.round;
  }

  /** One round; a round still running (a slow reap) is not overlapped. Exposed for tests. */
  tick(): Promise<void> {
    if (this.round) return this.round;
    this.round = this.sweep().finally(() => {
      this.round = undefined;
    });
    return this.round;
  }

  private async sweep(): Promise<void> {
    const now = Date.now();
    const due = this.options.views().filter((view) => !this.reaping.has(view.id) && reapDecision(view, now) !== undefined);
    await forEachLimited(due, REAP_CONCURRENCY, async (view) => {
      this.reaping.add(view.id);
      try {
        await this.options.reap(view.id, (current) => reapDecision(current, Date.now()));
      } catch (error) {
        // One failing reap does not stop the others; the next round tries again.
        this.options.log.warn(`reaper: sandbox ${view.id}: ${(error as Error).message}`);
      } finally {
        this.reaping.delete(view.id);
      }
    });
  }
}

/** What the reaper sees of a sandbox entry. */
export function reapViewOf(entry: SandboxEntry): ReapView {
  const { ctx } = entry;
  return {
    id: ctx.spec.id,
    status: ctx.status,
    createdAt: ctx.createdAt,
    ...(entry.lastActivityAt !== undefined ? { lastActivityAt: entry.lastActivityAt } : {}),
    ...(ctx.spec.ttl !== undefined ? { ttl: ctx.spec.ttl } : {}),
    ...(entry.claim !== undefined ? { claim: entry.claim } : {}),
    calls: entry.calls ?? 0,
  };
}
