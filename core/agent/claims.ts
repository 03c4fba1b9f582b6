/**
 * Claims: a job (a rollout) holding a sandbox. While a claim is active the
 * sandbox's own TTLs do not reap it; when the claim's lifetime runs out, the
 * reaper ends the claim and reaps the sandbox (and re-creates a fleet's),
 * since its holder may have left anything in it. One holder at a time; the
 * same holder claiming again refreshes the claim's lifetime.
 */
import { DsecError } from '../errors.js';
import type { SandboxClaim } from '../live.js';
import type { SandboxEntry } from './store.js';
import type { ClaimRequest } from './validate.js';

/** Set (or refresh) the claim on `entry`, at `nowMs`; refused when another holder has it. */
export function claimSandbox(entry: SandboxEntry, request: ClaimRequest, nowMs: number): SandboxClaim {
  const id = entry.ctx.spec.id;
  const current = entry.claim;
  if (current && current.holder !== request.holder) {
    const expired = current.expiresAt !== undefined && Date.parse(current.expiresAt) <= nowMs;
    // An expired claim is not free: the sandbox holds what its holder left, and the reaper replaces it.
    const holder = expired ? `${current.holder} (expired at ${current.expiresAt}; the reaper replaces it)` : current.holder;
    throw new DsecError('DSEC_SANDBOX_CLAIMED', { id, holder });
  }
  const claim: SandboxClaim = {
    holder: request.holder,
    claimedAt: current?.claimedAt ?? new Date(nowMs).toISOString(),
    ...(request.ttlSeconds !== undefined ? { expiresAt: new Date(nowMs + request.ttlSeconds * 1000).toISOString() } : {}),
  };
  entry.claim = claim;
  return claim;
}

/** Remove the claim; returns the one removed (undefined when there was none). */
export function releaseClaim(entry: SandboxEntry): SandboxClaim | undefined {
  const released = entry.claim;
  entry.claim = undefined;
  return released;
}
