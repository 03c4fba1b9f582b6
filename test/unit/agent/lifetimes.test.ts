/**
 * The pure parts of sandbox lifetimes: when the reaper reaps, how claims
 * are taken and refused, and how updates, claims, batch targets and TTLs
 * in a spec are checked.
 */
import { describe, expect, it } from 'vitest';
import { claimSandbox, releaseClaim } from '../../../core/agent/claims.js';
import { reapDecision, type ReapView } from '../../../core/agent/reaper.js';
import type { SandboxEntry } from '../../../core/agent/store.js';
import { checkClaimRequest, checkSandboxUpdate, checkSpec, checkTarget } from '../../../core/agent/validate.js';
import type { SandboxSpec } from '../../../core/live.js';

const T0 = Date.parse('2030-01-01T00:00:00.000Z');
const at = (seconds: number) => new Date(T0 + seconds * 1000).toISOString();

function view(extra: Partial<ReapView> = {}): ReapView {
  return { id: 's-1', status: 'running', createdAt: at(0), ...extra };
}

const SPEC: SandboxSpec = checkSpec({ id: 's-1', backend: 'container', layers: [] });

describe('reap decisions', () => {
  it('reaps an unclaimed sandbox past its max lifetime, running or paused, and nothing in another state', () => {
    const ttl = { maxLifetimeSeconds: 60 };
    expect(reapDecision(view({ ttl }), T0 + 59_999)).toBeUndefined();
    expect(reapDecision(view({ ttl }), T0 + 60_000)?.reason).toBe(`it reached its max lifetime of 60 s (created ${at(0)})`);
    expect(reapDecision(view({ ttl, status: 'paused' }), T0 + 60_000)).toBeDefined();
    for (const status of ['creating', 'failed', 'stopped'] as const) expect(reapDecision(view({ ttl, status }), T0 + 999_000)).toBeUndefined();
  });

  it('measures idleness from the last call, or from the creation when there was none, and never while a call runs', () => {
    const ttl = { idleStopSeconds: 30 };
    expect(reapDecision(view({ ttl }), T0 + 30_000)?.reason).toMatch(/^it was idle for 30 s \(last call none/);
    expect(reapDecision(view({ ttl, lastActivityAt: at(20) }), T0 + 49_000)).toBeUndefined();
    expect(reapDecision(view({ ttl, lastActivityAt: at(20) }), T0 + 50_000)).toBeDefined();
    expect(reapDecision(view({ ttl, calls: 1 }), T0 + 999_000)).toBeUndefined();
    expect(reapDecision(view(), T0 + 999_999_000)).toBeUndefined();
  });

  it('spares a claimed sandbox from its TTLs until the claim runs out, then reaps it and ends the claim', () => {
    const ttl = { maxLifetimeSeconds: 1, idleStopSeconds: 1 };
    expect(reapDecision(view({ ttl, claim: { holder: 'job', claimedAt: at(0) } }), T0 + 999_000)).toBeUndefined();
    const claim = { holder: 'job', claimedAt: at(0), expiresAt: at(100) };
    expect(reapDecision(view({ ttl, claim }), T0 + 99_000)).toBeUndefined();
    expect(reapDecision(view({ claim }), T0 + 100_000)).toEqual({ reason: `the claim of job expired at ${at(100)}`, claimExpired: true });
  });
});

describe('claims', () => {
  const entry = () => ({ ctx: { spec: SPEC } }) as unknown as SandboxEntry;

  it('gives a free sandbox to its first holder, refreshes it for the same holder and refuses another', () => {
    const sandbox = entry();
    expect(claimSandbox(sandbox, { holder: 'a', ttlSeconds: 10 }, T0)).toEqual({ holder: 'a', claimedAt: at(0), expiresAt: at(10) });
    expect(claimSandbox(sandbox, { holder: 'a', ttlSeconds: 10 }, T0 + 5_000)).toEqual({ holder: 'a', claimedAt: at(0), expiresAt: at(15) });
    expect(() => claimSandbox(sandbox, { holder: 'b' }, T0 + 6_000)).toThrow(expect.objectContaining({ code: 'DSEC_SANDBOX_CLAIMED', message: 'sandbox s-1 is claimed by a' }));
    // Expired is not free: the reaper replaces the sandbox first.
    expect(() => claimSandbox(sandbox, { holder: 'b' }, T0 + 20_000)).toThrow(/claimed by a \(expired at .*; the reaper replaces it\)/);
    expect(releaseClaim(sandbox)?.holder).toBe('a');
    expect(releaseClaim(sandbox)).toBeUndefined();
    expect(claimSandbox(sandbox, { holder: 'b' }, T0)).toEqual({ holder: 'b', claimedAt: at(0) });
  });

  it('checks a claim request: holder 1 to 128 characters, a positive ttl, no other field', () => {
    expect(checkClaimRequest({ holder: 'job-1', ttlSeconds: 30 })).toEqual({ holder: 'job-1', ttlSeconds: 30 });
    expect(() => checkClaimRequest({ holder: '' })).toThrow(/holder must be a string of 1 to 128 characters/);
    expect(() => checkClaimRequest({ holder: 'x'.repeat(129) })).toThrow(/holder must be/);
    expect(() => checkClaimRequest({ holder: 'x', ttlSeconds: 0 })).toThrow(/ttlSeconds must be a number of seconds > 0/);
    expect(() => checkClaimRequest({ holder: 'x', extra: 1 })).toThrow(/unknown field\(s\) extra/);
  });
});

describe('update, target and spec checks', () => {
  it('merges resources onto the current ones and takes ttl and density, reporting every problem at once', () => {
    expect(checkSandboxUpdate({ resources: { memoryMiB: 512 } }, SPEC)).toEqual({ resources: { cpu: 1, memoryMiB: 512, pids: 256 } });
    expect(checkSandboxUpdate({ ttl: {} }, SPEC)).toEqual({ ttl: {} });
    expect(checkSandboxUpdate({ density: { reclaimOnPause: false } }, SPEC)).toEqual({ density: { memorySharing: false, reclaimOnPause: false } });
    expect(() => checkSandboxUpdate({ ttl: { maxLifetimeSeconds: 'soon' }, density: { memorySharing: true }, color: 'red' }, SPEC)).toThrow(
      expect.objectContaining({
        code: 'DSEC_AGENT_REQUEST',
        message: expect.stringMatching(/unknown field\(s\) color.*ttl.maxLifetimeSeconds must be .*density.memorySharing cannot change on a live sandbox/),
      }),
    );
    expect(() => checkSandboxUpdate({ density: { reclaimOnPause: 'yes' } }, SPEC)).toThrow(/density.reclaimOnPause must be true or false/);
  });

  it('takes ids and/or labels as a batch target, and refuses one naming no sandbox', () => {
    expect(checkTarget({ ids: ['a', 'b'] })).toEqual({ ids: ['a', 'b'] });
    expect(checkTarget({ labels: { job: 'j' } })).toEqual({ labels: { job: 'j' } });
    for (const target of [{}, { ids: [] }, { labels: {} }, { ids: [], labels: {} }]) {
      expect(() => checkTarget(target), JSON.stringify(target)).toThrow(/never means every sandbox/);
    }
    expect(() => checkTarget({ ids: ['Not An Id'] })).toThrow(expect.objectContaining({ code: 'DSEC_AGENT_REQUEST' }));
    expect(() => checkTarget({ all: true })).toThrow(/unknown field\(s\) all/);
  });

  it('keeps a spec\'s ttl and density, and refuses bad ones', () => {
    const base = { id: 's-2', backend: 'container', layers: [] };
    expect(checkSpec({ ...base, ttl: { idleStopSeconds: 90 }, density: { memorySharing: true } })).toMatchObject({
      ttl: { idleStopSeconds: 90 },
      density: { memorySharing: true, reclaimOnPause: true },
    });
    expect(checkSpec({ ...base, ttl: {} })).not.toHaveProperty('ttl');
    expect(() => checkSpec({ ...base, ttl: { maxLifetimeSeconds: -5 } })).toThrow(/ttl.maxLifetimeSeconds must be a number of seconds > 0/);
    expect(() => checkSpec({ ...base, ttl: 60 })).toThrow(/ttl must be an object/);
    expect(() => checkSpec({ ...base, density: { sharing: true } })).toThrow(/density: unknown field\(s\) sharing/);
  });
});
