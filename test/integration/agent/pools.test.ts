/**
 * Warm pools on a real agent with real runc containers: acquire hands a
 * ready sandbox out atomically (a tight race of 100 never shares one), the
 * pool refills by itself, waiters are served first come first served within
 * maxClaimed, a release recycles (or keeps), a claim that lapses is recycled
 * by the reaper, calls naming a holder are refused on another's sandbox, and
 * an agent killed mid-way loses nothing and hands nothing out twice.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL_FLEET, LABEL_LINEAGE, LABEL_SPEC, type PoolInfo, type PoolSpec, type SandboxInfo } from '../../../core/live.js';
import { runcContainers, TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;
const LINEAGE = 'pool-test-lineage';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let value = await read();
  while (!done(value)) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: last ${JSON.stringify(value)}`);
    await sleep(100);
    value = await read();
  }
  return value;
}

/** A pool record as the engine would put it: a small container template labelled for the fleet. */
function pool(fleet: string, ready: number, extra: Partial<PoolSpec> = {}): PoolSpec {
  const { id: _id, ...template } = agent.spec('unused', {
    resources: { cpu: 0.1, memoryMiB: 40, pids: 32 },
    labels: { [LABEL_LINEAGE]: LINEAGE, [LABEL_FLEET]: fleet, [LABEL_SPEC]: 'spec-1' },
  });
  return { fleet, lineage: LINEAGE, template, ready, revision: `${fleet}-r1`, ...extra };
}

const poolInfo = async (fleet: string): Promise<PoolInfo> => (await agent.client.listPools()).find((item) => item.fleet === fleet)!;
const members = async (fleet: string): Promise<SandboxInfo[]> => agent.client.listSandboxes({ [LABEL_FLEET]: fleet });
const readyCount = async (fleet: string) => (await poolInfo(fleet)).counts.ready;

beforeAll(async () => {
  agent = await TestAgent.start({ reapIntervalMs: 200 });
});

afterAll(async () => {
  await agent?.dispose();
});

describe('a warm pool on one node', () => {
  it('fills itself to `ready` from its template when the record is put, with no apply', async () => {
    await agent.client.setPool(pool('fill', 3));
    await waitFor('3 ready', () => readyCount('fill'), (n) => n === 3);
    const live = await members('fill');
    expect(live).toHaveLength(3);
    expect(live.every((s) => s.status === 'running' && s.labels[LABEL_LINEAGE] === LINEAGE && /^fill-[a-z0-9]{8}$/.test(s.id))).toBe(true);
    await agent.client.deletePool('fill', LINEAGE);
  });

  it('never hands one sandbox to two holders: 100 acquires racing for a pool of 10 get 100 distinct sandboxes, and it refills to 10', async () => {
    await agent.client.setPool(pool('race', 10));
    await waitFor('10 ready', () => readyCount('race'), (n) => n === 10);
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => agent.client.acquire('race', { holder: `rollout-${i}`, waitMs: 120_000 })),
    );
    const ids = results.map((info) => info.id);
    expect(new Set(ids).size).toBe(100);
    results.forEach((info, i) => expect(info.claim?.holder).toBe(`rollout-${i}`));
    // Read back from the agent: each sandbox holds exactly the claim its caller was told.
    const byId = new Map((await members('race')).map((s) => [s.id, s]));
    results.forEach((info, i) => expect(byId.get(info.id)?.claim?.holder).toBe(`rollout-${i}`));
    const refilled = await waitFor('the pool back at 10 ready', () => poolInfo('race'), (info) => info.counts.ready === 10 && info.counts.creating === 0, 120_000);
    expect(refilled.counts.claimed).toBe(100);
    await Promise.all(ids.map((id) => agent.client.release(id)));
    expect(await members('race')).toHaveLength(10);
    expect((await members('race')).every((s) => !s.claim)).toBe(true);
    await agent.client.deletePool('race', LINEAGE);
  }, 240_000);

  it('serves waiters first come, first served within maxClaimed, and says what the pool holds when a wait runs out', async () => {
    await agent.client.setPool(pool('fifo', 1, { maxClaimed: 1 }));
    await waitFor('1 ready', () => readyCount('fifo'), (n) => n === 1);
    const first = await agent.client.acquire('fifo', { holder: 'a' });
    const order: string[] = [];
    const second = agent.client.acquire('fifo', { holder: 'b', waitMs: 60_000 }).then((info) => (order.push('b'), info));
    await sleep(50);
    const third = agent.client.acquire('fifo', { holder: 'c', waitMs: 60_000 }).then((info) => (order.push('c'), info));
    await sleep(50);
    const refused = await agent.client.acquire('fifo', { holder: 'd', waitMs: 300 }).catch((error: unknown) => error);
    expect(refused).toMatchObject({ code: 'DSEC_POOL_EXHAUSTED' });
    expect((refused as Error).message).toMatch(/1 claimed \(at most 1\)/);
    expect((refused as Error).message).toMatch(/2 waiting/);
    await agent.client.release(first.id);
    const b = await second;
    expect(order).toEqual(['b']);
    await agent.client.release(b.id);
    const c = await third;
    expect(order).toEqual(['b', 'c']);
    expect(new Set([first.id, b.id, c.id]).size).toBe(3);
    await agent.client.release(c.id);
    await agent.client.deletePool('fifo', LINEAGE);
  }, 60_000);

  it('recycles a released sandbox (gone, nothing of it handed out again), or keeps it unclaimed and never hands it out with keep', async () => {
    await agent.client.setPool(pool('recycle', 1));
    await waitFor('1 ready', () => readyCount('recycle'), (n) => n === 1);
    const used = await agent.client.acquire('recycle', { holder: 'r1' });
    await agent.client.exec(used.id, { cmd: ['sh', '-c', 'echo secret > /root/answer'] });
    const recycled = await agent.client.release(used.id, { holder: 'r1' });
    expect(recycled).toEqual({ id: used.id, recycled: true });
    expect((await members('recycle')).map((s) => s.id)).not.toContain(used.id);
    expect(runcContainers().some((id) => id.endsWith(`-${used.id}`))).toBe(false);

    const next = await agent.client.acquire('recycle', { holder: 'r2', waitMs: 30_000 });
    const leftover = await agent.client.exec(next.id, { cmd: ['sh', '-c', 'cat /root/answer 2>&1 || true'] });
    expect(leftover.stdout).not.toContain('secret');
    const kept = await agent.client.release(next.id, { keep: true });
    expect(kept.recycled).toBe(false);
    expect(kept.sandbox).toMatchObject({ id: next.id, status: 'running', kept: { holder: 'r2' } });
    expect(kept.sandbox!.claim).toBeUndefined();
    // Kept is not ready: the next acquire gets a fresh one.
    const third = await agent.client.acquire('recycle', { holder: 'r3', waitMs: 30_000 });
    expect(third.id).not.toBe(next.id);
    for (const id of [next.id, third.id]) await agent.client.release(id);
    await agent.client.deletePool('recycle', LINEAGE);
  }, 90_000);

  it('recycles the sandbox of a holder that died when its claim lapses, and the pool stays full', async () => {
    await agent.client.setPool(pool('lapse', 1));
    await waitFor('1 ready', () => readyCount('lapse'), (n) => n === 1);
    const held = await agent.client.acquire('lapse', { holder: 'dead-trainer', ttlSeconds: 1 });
    expect(Date.parse(held.claim!.expiresAt!) - Date.now()).toBeLessThanOrEqual(1000);
    await waitFor('the lapsed claim recycled', () => members('lapse'), (list) => !list.some((s) => s.id === held.id));
    await waitFor('the pool full again', () => poolInfo('lapse'), (info) => info.counts.ready === 1 && info.counts.claimed === 0);
    expect(agent.logText()).toContain(`sandbox ${held.id}: reaped because the claim of dead-trainer expired`);
    await agent.client.deletePool('lapse', LINEAGE);
  }, 60_000);

  it('a release racing the reaper at the claim\'s expiry: each sandbox is recycled once, by one of them, and the pool ends full', async () => {
    const size = 6;
    await agent.client.setPool(pool('race-reaper', size));
    await waitFor(`${size} ready`, () => readyCount('race-reaper'), (n) => n === size);
    const held = await Promise.all(Array.from({ length: size }, (_, i) => agent.client.acquire('race-reaper', { holder: `h${i}`, ttlSeconds: 1 })));
    // Release each one around its expiry, while the reaper (every 200 ms) is after it too.
    const outcomes = await Promise.all(
      held.map(async (sandbox, i) => {
        await sleep(Date.parse(sandbox.claim!.expiresAt!) - Date.now() - 150 + i * 60);
        return agent.client.release(sandbox.id, { holder: `h${i}` }).then(
          (result) => ({ id: sandbox.id, recycled: result.recycled }),
          (error: { code?: string }) => ({ id: sandbox.id, code: error.code }),
        );
      }),
    );
    // The reaper won where the release found the claim gone: nothing else is an answer.
    for (const outcome of outcomes) {
      if ('code' in outcome) expect(['DSEC_SANDBOX_NOT_FOUND', 'DSEC_SANDBOX_NOT_CLAIMED']).toContain(outcome.code);
      else expect(outcome.recycled).toBe(true);
    }
    const final = await waitFor('the pool full again', () => poolInfo('race-reaper'), (info) => info.counts.ready === size && info.counts.claimed === 0 && info.counts.creating === 0);
    const live = await members('race-reaper');
    expect(live).toHaveLength(size);
    expect(live.filter((s) => held.some((h) => h.id === s.id))).toEqual([]);
    expect(live.every((s) => s.status === 'running' && !s.claim && !s.kept)).toBe(true);
    expect(final.counts).toMatchObject({ ready: size, claimed: 0 });
    expect(agent.logText()).not.toMatch(/race-reaper-[a-z0-9]{8}: (destroy|cleaning up).* failed/);
    await agent.client.deletePool('race-reaper', LINEAGE);
  }, 90_000);

  it('refuses calls and renewals naming a holder that does not hold the sandbox, and lists a holder\'s sandboxes', async () => {
    await agent.client.setPool(pool('holder', 2));
    await waitFor('2 ready', () => readyCount('holder'), (n) => n === 2);
    const mine = await agent.client.acquire('holder', { holder: 'trainer-1/rollout-7', labels: { job: 'j7' } });
    expect((await agent.client.exec(mine.id, { cmd: ['true'], holder: 'trainer-1/rollout-7' } as never)).exitCode).toBe(0);
    await expect(agent.client.exec(mine.id, { cmd: ['true'], holder: 'someone-else' } as never)).rejects.toMatchObject({ code: 'DSEC_SANDBOX_CLAIMED' });
    await expect(agent.client.renew(mine.id, { holder: 'someone-else', ttlSeconds: 60 })).rejects.toMatchObject({ code: 'DSEC_SANDBOX_CLAIMED' });
    const renewed = await agent.client.renew(mine.id, { holder: 'trainer-1/rollout-7', ttlSeconds: 600 });
    expect(Date.parse(renewed.claim!.expiresAt!) - Date.now()).toBeGreaterThan(590_000);
    const listed = await agent.client.listSandboxes(undefined, { holder: 'trainer-1/rollout-7' });
    expect(listed.map((s) => s.id)).toEqual([mine.id]);
    // The claim's labels are found by selectors, beside the sandbox's own.
    expect((await agent.client.listSandboxes({ job: 'j7' })).map((s) => s.id)).toEqual([mine.id]);
    await agent.client.release(mine.id, { keep: true });
    await expect(agent.client.exec(mine.id, { cmd: ['true'], holder: 'trainer-1/rollout-7' } as never)).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_CLAIMED' });
    await agent.client.destroySandbox(mine.id);
    await agent.client.deletePool('holder', LINEAGE);
  }, 60_000);

  it('an agent killed in the middle of acquires and releases loses nothing and hands nothing out twice', async () => {
    await agent.client.setPool(pool('crash', 4));
    await waitFor('4 ready', () => readyCount('crash'), (n) => n === 4);
    const held = await Promise.all([0, 1].map((i) => agent.client.acquire('crash', { holder: `pre-${i}` })));
    // A burst of acquires and a recycle in flight when the agent dies.
    const inFlight = [
      ...[0, 1, 2].map((i) => agent.client.acquire('crash', { holder: `burst-${i}`, waitMs: 10_000 }).then((info) => info, () => undefined)),
      agent.client.release(held[0].id).then((result) => result, () => undefined),
    ];
    await sleep(30);
    await agent.kill();
    const answered = (await Promise.all(inFlight)).filter((value): value is SandboxInfo => value !== undefined && 'claim' in value);
    await agent.startDaemon();
    // The pool converges: 4 ready again, and every claim on disk names one holder, each at most once.
    const info = await waitFor('the pool full again after the restart', () => poolInfo('crash'), (p) => p.counts.ready === 4 && p.counts.creating === 0, 60_000);
    const live = await members('crash');
    const claimed = live.filter((s) => s.claim);
    expect(new Set(claimed.map((s) => s.claim!.holder)).size).toBe(claimed.length);
    expect(info.counts.claimed).toBe(claimed.length);
    // What callers were told they got is theirs, as the agent now says.
    for (const got of answered) expect(live.find((s) => s.id === got.id)?.claim?.holder).toBe(got.claim!.holder);
    expect(live.find((s) => s.id === held[1].id)?.claim?.holder).toBe('pre-1');
    // Nothing half-made or half-recycled is left: every container is a live sandbox's.
    const ours = new Set((await agent.client.listSandboxes()).map((s) => agent.containerId(s.id)));
    const containers = runcContainers().filter((id) => id.startsWith(agent.containerId('')));
    expect(containers.filter((id) => !ours.has(id))).toEqual([]);
    for (const s of claimed) await agent.client.release(s.id);
    await agent.client.deletePool('crash', LINEAGE);
  }, 120_000);
});
