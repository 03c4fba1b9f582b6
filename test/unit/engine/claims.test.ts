/**
 * Claimed sandboxes through the engine: `replicas` is the pool of fresh,
 * unclaimed sandboxes; claimed ones come on top and are never replaced,
 * scaled away or destroyed under a rollout unless `--replace-claimed` says
 * so; a sandbox acquired between plan and apply is spared by apply itself.
 * And the nodes' pool records: set around a fleet's operations, with the
 * shares the plan keeps before and what exists after, and planned again when
 * a node's record is missing or of an earlier declaration.
 */
import { describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { applyPlan } from '../../../core/engine/apply.js';
import { planToJson, renderPlan } from '../../../core/engine/render.js';
import { isDsecError } from '../../../core/errors.js';
import type { SandboxInfo } from '../../../core/live.js';
import type { ResourceChange, SandboxOperation } from '../../../core/plan.js';
import { FakeProvider } from './fake-provider.js';
import { converge, memorySession, planWith, project } from './fixtures.js';

const web = (changes: readonly ResourceChange[]): ResourceChange => {
  const found = changes.find((item) => item.address === 'fleet.web');
  if (!found) throw new Error('no change for fleet.web');
  return found;
};
const ops = (item: ResourceChange, op: SandboxOperation['op']) => item.fleet!.operations.filter((operation) => operation.op === op);
const idsOf = (operations: readonly SandboxOperation[]) => operations.map((operation) => ('id' in operation ? operation.id : '')).sort();

/** Claim the first `count` sandboxes (by id) for `holder`, as an acquire would. */
function claimSome(provider: FakeProvider, count: number, holder = 'rollout-1'): string[] {
  const ids = [...provider.sandboxes.keys()].sort().slice(0, count);
  for (const id of ids) {
    const sandbox = provider.sandboxes.get(id)!;
    const claimed: SandboxInfo = { ...sandbox, claim: { holder, claimedAt: new Date().toISOString() } };
    provider.sandboxes.set(id, claimed);
  }
  return ids;
}

describe('planning a fleet with claimed sandboxes', () => {
  it('counts replicas over the unclaimed pool: claimed ones come on top, and the pool is filled beside them', async () => {
    const { provider, state } = await converge(project({ replicas: 3 }));
    claimSome(provider, 2);
    const change = web((await planWith(project({ replicas: 3 }), provider, state)).resource_changes);
    expect(change.fleet!.summary).toMatchObject({ desired: 3, live: 3, ready: 1, claimed: 2, create: 2, delete: 0 });
    expect(ops(change, 'create')).toHaveLength(2);
  });

  it('marks claimed sandboxes outdated on an environment change instead of replacing them: ~N replace when released', async () => {
    const { provider, state } = await converge(project({ replicas: 4 }));
    const held = claimSome(provider, 2);
    const plan = await planWith(project({ replicas: 2, toolkit: '1.1.0' }), provider, state);
    const change = web(plan.resource_changes);
    expect(change.action).toBe('replace');
    expect(change.fleet!.summary).toMatchObject({ claimed: 2, ready: 2, replace: 2, replaceWhenReleased: 2 });
    // Neither replaced nor deleted: no operation names a claimed sandbox.
    expect(change.fleet!.operations.some((operation) => 'id' in operation && held.includes(operation.id))).toBe(false);
    const text = renderPlan(plan, { color: false });
    expect(text).toContain('pool: 2 ready, 2 claimed ~2 replace when released');
    const json = planToJson(plan) as { resource_changes: { address: string; fleet_summary?: Record<string, number> }[] };
    expect(json.resource_changes.find((item) => item.address === 'fleet.web')?.fleet_summary).toMatchObject({ claimed: 2, replace_when_released: 2 });
  });

  it('replaces claimed outdated sandboxes with --replace-claimed, taking them from their holders on purpose', async () => {
    const { provider, state } = await converge(project({ replicas: 2 }));
    const held = claimSome(provider, 1);
    const change = web((await planWith(project({ replicas: 2, toolkit: '1.1.0' }), provider, state, { replaceClaimed: true })).resource_changes);
    const deletes = ops(change, 'delete');
    expect(idsOf(deletes)).toEqual(held);
    expect(deletes[0]).toMatchObject({ claimed: true, because: expect.stringContaining('taken by --replace-claimed') });
    expect(change.fleet!.summary).toMatchObject({ replaceClaimed: 1, replaceWhenReleased: 0 });
  });

  it('never scales a claimed sandbox away: a lower replicas deletes only unclaimed ones', async () => {
    const { provider, state } = await converge(project({ replicas: 4 }));
    const held = claimSome(provider, 2);
    const change = web((await planWith(project({ replicas: 1 }), provider, state)).resource_changes);
    const deleted = idsOf(ops(change, 'delete'));
    expect(deleted).toHaveLength(1);
    expect(deleted.some((id) => held.includes(id))).toBe(false);
  });

  it('refuses to destroy a fleet with claims (naming the holders) unless --replace-claimed, and then deletes them too', async () => {
    const { provider, state } = await converge(project({ replicas: 3 }));
    claimSome(provider, 1, 'trainer-9');
    const refused = await planWith(project({ replicas: 3 }), provider, state, { destroy: true }).catch((error: unknown) => error);
    expect(isDsecError(refused, 'DSEC_PLAN_CLAIMED')).toBe(true);
    expect((refused as Error).message).toContain('trainer-9');
    expect((refused as Error).message).toContain('--replace-claimed');
    const forced = web((await planWith(project({ replicas: 3 }), provider, state, { destroy: true, replaceClaimed: true })).resource_changes);
    expect(ops(forced, 'delete')).toHaveLength(3);
    expect(ops(forced, 'delete').filter((operation) => operation.op === 'delete' && operation.claimed)).toHaveLength(1);
  });
});

describe('applying while rollouts acquire', () => {
  it('spares a sandbox acquired between plan and apply: its delete is skipped with a note, not a failure', async () => {
    const { provider, state } = await converge(project({ replicas: 3 }));
    const session = memorySession(state);
    const plan = await planWith(project({ replicas: 1 }), provider, session.state);
    const doomed = idsOf(ops(web(plan.resource_changes), 'delete'));
    expect(doomed).toHaveLength(2);
    // A rollout acquires one of them after the plan was made.
    const sandbox = provider.sandboxes.get(doomed[0])!;
    provider.sandboxes.set(doomed[0], { ...sandbox, claim: { holder: 'late-rollout', claimedAt: new Date().toISOString() } });
    const result = await applyPlan(plan, { provider, state: session, dsec: new Dsec() });
    expect(result.failed).toEqual([]);
    expect(result.sandboxes).toMatchObject({ done: 1, skipped: 1 });
    expect(result.notes.join('\n')).toContain(`sandbox ${doomed[0]} was acquired since the plan was made`);
    expect(provider.sandboxes.has(doomed[0])).toBe(true);
    expect(provider.sandboxes.has(doomed[1])).toBe(false);
  });
});

describe("the nodes' pool records", () => {
  it('sets a new fleet\'s pool after its creates with the whole share, and plans nothing more once it is set', async () => {
    const provider = new FakeProvider();
    provider.keepsPools = true;
    const { state } = await converge(project({ replicas: 3, fleet: { pool: { maxClaimed: 5 } } }), provider);
    const last = provider.poolCalls.at(-1)!;
    expect(last).toMatchObject({ fleet: 'web', lineage: state.lineage, maxClaimed: 5, shares: { 'node-1': 3 } });
    expect(last.template.labels['dsec.io/fleet']).toBe('web');
    expect('id' in last.template).toBe(false);
    const again = web((await planWith(project({ replicas: 3, fleet: { pool: { maxClaimed: 5 } } }), provider, state)).resource_changes);
    expect(again.action).toBe('no-op');
  });

  it('lowers the pool to what the plan keeps before the operations, and raises it to what exists after them', async () => {
    const provider = new FakeProvider();
    provider.keepsPools = true;
    const { state } = await converge(project({ replicas: 2 }), provider);
    provider.poolCalls.length = 0;
    await converge(project({ replicas: 5 }), provider, state);
    expect(provider.poolCalls.map((call) => call.shares['node-1'])).toEqual([2, 5]);
  });

  it('plans update_pool, touching no sandbox, when a node\'s record is missing or of an earlier declaration', async () => {
    const provider = new FakeProvider();
    provider.keepsPools = true;
    const { state } = await converge(project({ replicas: 2 }), provider);
    provider.pools.clear();
    const missing = web((await planWith(project({ replicas: 2 }), provider, state)).resource_changes);
    expect(missing).toMatchObject({ action: 'update', reason: 'update_pool' });
    expect(missing.fleet!.operations).toEqual([]);
    const { state: after } = await converge(project({ replicas: 2 }), provider, state);
    const changed = web((await planWith(project({ replicas: 2, fleet: { pool: { claimTtlSeconds: 600 } } }), provider, after)).resource_changes);
    expect(changed.action).toBe('update');
  });
});
