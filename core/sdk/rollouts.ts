/**
 * What the SDK's rollout calls take (acquire, list by holder, renew),
 * turned into what the providers take. Plain functions, tested without a
 * connection.
 */
import { durationSeconds } from '../config/units.js';
import { DsecError } from '../errors.js';
import type { AcquireRequest } from '../live.js';

export interface AcquireOptions {
  /** Who holds it (a rollout, a trainer): `list({ holder })` finds its sandboxes again. */
  readonly holder: string;
  /** The claim lapses after this long unless renewed (seconds, or "90s", "30m", "2h", "1d"). @default the fleet's pool.claimTtl */
  readonly ttl?: number | string;
  /** Labels of this claim: label selectors (`pause({ labels })`, `list({ labels })`) match them. */
  readonly labels?: Readonly<Record<string, string>>;
  /** Wait this long for a sandbox when none is ready. @default 0: fail at once */
  readonly waitMs?: number;
  /** Which project's fleet, when several projects have a fleet of this name on a cluster. */
  readonly lineage?: string;
}

/** `list`'s query: labels (a sandbox's own and its claim's) and/or the holder. */
export interface SandboxQuery {
  readonly labels?: Readonly<Record<string, string>>;
  readonly holder?: string;
}

/** Seconds from a number of seconds or a duration string; anything else is DSEC_USAGE naming the option. */
export function seconds(value: number | string, option: string): number {
  const parsed = durationSeconds(value);
  if (parsed === undefined || !Number.isFinite(parsed) || parsed <= 0) {
    throw new DsecError('DSEC_USAGE', { message: `${option}: expected seconds or a duration like "90s", "30m", "2h", "1d", not ${JSON.stringify(value)}` });
  }
  return parsed;
}

export function acquireRequest(options: AcquireOptions): AcquireRequest {
  return {
    holder: options.holder,
    ...(options.ttl !== undefined ? { ttlSeconds: seconds(options.ttl, 'ttl') } : {}),
    ...(options.labels ? { labels: { ...options.labels } } : {}),
    ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}),
    ...(options.lineage !== undefined ? { lineage: options.lineage } : {}),
  };
}

/** `{ labels?, holder? }`, or (the older form) a plain object of labels. */
export function sandboxQuery(query: SandboxQuery | Readonly<Record<string, string>>): { labels?: Readonly<Record<string, string>>; holder?: string } {
  const keys = Object.keys(query);
  const isQuery = keys.every((key) => key === 'labels' || key === 'holder') && (typeof (query as SandboxQuery).labels === 'object' || keys.length === 0 || typeof (query as SandboxQuery).holder === 'string');
  if (!isQuery) return { labels: query as Readonly<Record<string, string>> };
  const { labels, holder } = query as SandboxQuery;
  return { ...(labels && Object.keys(labels).length > 0 ? { labels } : {}), ...(holder !== undefined ? { holder } : {}) };
}
