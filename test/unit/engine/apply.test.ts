import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { DsecError, isDsecError } from '../../../core/errors.js';
import { applyPlan } from '../../../core/engine/apply.js';
import { planHasChanges } from '../../../core/engine/render.js';
import type { Plan, StateFile } from '../../../core/plan.js';
import { LocalStateStore } from '../../../core/state/index.js';
import { FakeProvider } from './fake-provider.js';
import { config, environment, fleet, fleetRecord, layer, planWith, project } from './fixtures.js';

let dir: string;
let store: LocalStateStore;
beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'dsec-apply-'));
  store = new LocalStateStore(dir);
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Plan and apply under the real state lock, as the CLI does. */
async function planAndApply(
  model: ReturnType<typeof project>,
  provider: FakeProvider,
  options: { parallelism?: number; dsec?: Dsec; plan?: Parameters<typeof planWith>[3] } = {},
) {
  const session = await store.lock({ command: 'dsec apply' });
  try {
    const plan = await planWith(model, provider, session.state, options.plan);
    const result = await applyPlan(plan, {
      provider,
      state: session,
      dsec: options.dsec ?? new Dsec(),
      parallelism: options.parallelism ?? 10,
    });
    return { plan, result, state: session.state };
  } finally {
    await session.release();
  }
}

async function replan(model: ReturnType<typeof project>, provider: FakeProvider, options = {}): Promise<Plan> {
  return planWith(model, provider, await store.read(), options);
}

const ids = (state: StateFile, fleetName: string): string[] =>
  Object.keys(fleetRecord(state, fleetName).sandboxes).sort();

describe('applyPlan', () => {
  it('creates everything from an empty state, records it on disk, and a re-plan has no changes', async () => {
    const provider = new FakeProvider();
    const { result } = await planAndApply(project({ replicas: 3 }), provider);
    expect(result.failed).toEqual([]);
    expect(result.succeeded.map((change) => change.address)).toEqual(
      expect.arrayContaining(['layer.python@3.11.9', 'layer.tools@1.0.0', 'fleet.web']),
    );
    expect(result.sandboxes).toEqual({ done: 3, failed: 0, skipped: 0 });
    const state = await store.read();
    expect(Object.keys(state.resources).sort()).toEqual(['fleet.web', 'layer.python@3.11.9', 'layer.tools@1.0.0']);
    expect(ids(state, 'web')).toEqual([...provider.sandboxes.keys()].sort());
    expect(fleetRecord(state, 'web').attributes.replicas).toBe(3);
    expect(planHasChanges(await replan(project({ replicas: 3 }), provider))).toBe(false);
  });

  it('publishes layers before creating the sandboxes that use them', async () => {
    const provider = new FakeProvider();
    await planAndApply(project({ replicas: 2 }), provider);
    const firstCreate = provider.calls.findIndex((call) => call.startsWith('createSandbox'));
    const lastPublish = provider.calls.map((call) => call.startsWith('publishLayer')).lastIndexOf(true);
    expect(lastPublish).toBeLessThan(firstCreate);
  });

  it('records the successes of a partly failed apply, reports the failures, and converges on a re-run', async () => {
    const provider = new FakeProvider();
    let creates = 0;
    provider.failWhen = (call) => {
      if (call !== 'createSandbox') return undefined;
      creates += 1;
      return creates % 2 === 0 ? new Error('no capacity') : undefined;
    };
    const { result } = await planAndApply(project({ replicas: 4 }), provider);
    expect(result.sandboxes).toEqual({ done: 2, failed: 2, skipped: 0 });
    expect(result.failed.map(({ change }) => change.address)).toEqual(['fleet.web']);
    expect(isDsecError(result.failed[0].error, 'DSEC_APPLY_FLEET')).toBe(true);
    expect(result.failed[0].error.message).toBe('fleet.web: 2 of 4 sandbox operation(s) failed; first: no capacity');
    expect(result.succeeded.map((change) => change.address).sort()).toEqual([
      'layer.python@3.11.9',
      'layer.tools@1.0.0',
    ]);

    const state = await store.read();
    expect(ids(state, 'web')).toEqual([...provider.sandboxes.keys()].sort());
    expect(ids(state, 'web')).toHaveLength(2);

    provider.failWhen = () => undefined;
    const retry = await replan(project({ replicas: 4 }), provider);
    const web = retry.resource_changes.find((change) => change.address === 'fleet.web')!;
    expect(web.fleet!.summary).toMatchObject({ create: 2, unchanged: 2 });
    const second = await planAndApply(project({ replicas: 4 }), provider);
    expect(second.result.failed).toEqual([]);
    expect(provider.sandboxes.size).toBe(4);
    expect(planHasChanges(await replan(project({ replicas: 4 }), provider))).toBe(false);
  });

  it('has every finished sandbox operation on disk in the state before it counts as done', async () => {
    const dsec = new Dsec();
    const notOnDisk: string[] = [];
    dsec.hooks.sandboxOperation.tap('check-disk', (_fleet, operation, error) => {
      if (error || operation.op !== 'create') return;
      const onDisk = JSON.parse(readFileSync(store.file, 'utf8')) as StateFile;
      const record = onDisk.resources['fleet.web'];
      if (record?.type !== 'fleet' || !record.sandboxes[operation.spec.id]) notOnDisk.push(operation.spec.id);
    });
    const provider = new FakeProvider();
    provider.delayMs = 1;
    await planAndApply(project({ replicas: 12 }), provider, { dsec, parallelism: 4 });
    expect(provider.sandboxes.size).toBe(12);
    expect(notOnDisk).toEqual([]);
  });

  it('never runs more sandbox operations at once than the parallelism', async () => {
    const provider = new FakeProvider();
    provider.delayMs = 5;
    await planAndApply(project({ replicas: 24 }), provider, { parallelism: 3 });
    expect(provider.sandboxes.size).toBe(24);
    expect(provider.maxRunning).toBe(3);
  });

  it('replaces in batches of maxUnavailable, keeping the rest of the fleet up', async () => {
    const provider = new FakeProvider();
    const model = project({ replicas: 6, fleet: { update: { maxUnavailable: 2 } } });
    await planAndApply(model, provider);
    const before = new Set(provider.sandboxes.keys());

    let lowest = Infinity;
    const originalDestroy = provider.destroySandbox.bind(provider);
    provider.destroySandbox = async (id) => {
      await originalDestroy(id);
      lowest = Math.min(lowest, provider.sandboxes.size);
    };
    provider.delayMs = 2;
    const { result, plan } = await planAndApply(model, provider, { plan: { replace: ['fleet.web'] } });
    expect(plan.resource_changes.find((change) => change.address === 'fleet.web')!.action).toBe('replace');
    expect(result.failed).toEqual([]);
    expect(lowest).toBe(4);
    expect([...provider.sandboxes.keys()].some((id) => before.has(id))).toBe(false);
    expect(ids(await store.read(), 'web')).toEqual([...provider.sandboxes.keys()].sort());
  });

  it('stops rolling a fleet out after a replacement batch fails', async () => {
    const provider = new FakeProvider();
    await planAndApply(project({ toolkit: '1.0.0', replicas: 4 }), provider);
    provider.failWhen = (call) => (call === 'createSandbox' ? new Error('the new image does not start') : undefined);
    const { result } = await planAndApply(project({ toolkit: '1.1.0', replicas: 4 }), provider);
    expect(result.sandboxes).toEqual({ done: 0, failed: 1, skipped: 3 });
    expect(result.failed[0].error.message).toMatch(
      /1 of 4 sandbox operation\(s\) failed \(3 replacement\(s\) not started\)/,
    );
    // Three old sandboxes still serve; the unused old toolkit was not unpublished from under them.
    expect(provider.sandboxes.size).toBe(3);
    expect(result.failed.map(({ change }) => change.address)).toContain('layer.tools@1.0.0');
    const state = await store.read();
    expect(fleetRecord(state, 'web').attributes.layers.map((item) => item.version)).toContain('1.0.0');
  });

  it('fails a fleet without touching it when a layer it needs failed to publish', async () => {
    const provider = new FakeProvider();
    provider.failWhen = (call, target) =>
      call === 'publishLayer' && target === 'tools@1.0.0' ? new Error('disk full') : undefined;
    const { result } = await planAndApply(project(), provider);
    const web = result.failed.find(({ change }) => change.address === 'fleet.web')!;
    expect(isDsecError(web.error, 'DSEC_APPLY_DEPENDENCY')).toBe(true);
    expect(web.error.message).toBe('fleet.web was not applied because layer.tools@1.0.0 failed');
    expect(provider.sandboxes.size).toBe(0);
    expect(result.sandboxes.skipped).toBe(4);
  });

  it('fires beforeChange and afterChange per resource and sandboxOperation per sandbox', async () => {
    const dsec = new Dsec();
    const seen: string[] = [];
    dsec.hooks.beforeChange.tap('test', (change) => void seen.push(`before ${change.address}`));
    dsec.hooks.afterChange.tap(
      'test',
      (change, error) => void seen.push(`after ${change.address} ${error ? 'failed' : 'ok'}`),
    );
    let operations = 0;
    dsec.hooks.sandboxOperation.tap('test', () => void (operations += 1));
    await planAndApply(project({ replicas: 3 }), new FakeProvider(), { dsec });
    expect(operations).toBe(3);
    expect(seen.filter((line) => line.startsWith('before'))).toHaveLength(3);
    expect(seen).toContain('after fleet.web ok');
    expect(seen.indexOf('before fleet.web')).toBeGreaterThan(seen.indexOf('after layer.tools@1.0.0'));
  });

  it('lets a beforeChange tap stop one change', async () => {
    const dsec = new Dsec();
    dsec.hooks.beforeChange.tap('policy', (change) => {
      if (change.address === 'fleet.web') throw new DsecError('DSEC_PLAN_VETOED', { plugin: 'policy', message: 'no' });
    });
    const provider = new FakeProvider();
    const { result } = await planAndApply(project(), provider, { dsec });
    expect(result.failed.map(({ change }) => change.address)).toEqual(['fleet.web']);
    expect(provider.sandboxes.size).toBe(0);
    expect(provider.layers.size).toBe(2);
  });

  it('adopts sandboxes created by an apply that lost track of them, and never creates them twice', async () => {
    const provider = new FakeProvider();
    const model = project({ replicas: 3 });
    // The agent creates the sandbox but the answer never arrives (a crash, a dropped connection).
    const create = provider.createSandbox.bind(provider);
    provider.createSandbox = async (spec) => {
      await create(spec);
      throw new Error('connection reset');
    };
    const { plan, result } = await planAndApply(model, provider);
    expect(result.sandboxes.failed).toBe(3);
    expect(provider.sandboxes.size).toBe(3);
    const state = await store.read();
    // The state file was written before the first create, so the lineage the sandboxes carry is kept.
    expect(state.lineage).toBe(plan.prior_state.lineage);
    expect(state.resources['fleet.web']).toBeUndefined();

    provider.createSandbox = create;
    const retried = await replan(model, provider);
    const web = retried.resource_changes.find((change) => change.address === 'fleet.web')!;
    expect(web).toMatchObject({ action: 'update', reason: 'drift' });
    expect(web.fleet!.summary).toMatchObject({ live: 3, create: 0 });
    expect(web.fleet!.adopt).toHaveLength(3);
    await planAndApply(model, provider);
    expect(provider.sandboxes.size).toBe(3);
    expect(ids(await store.read(), 'web')).toEqual([...provider.sandboxes.keys()].sort());
    expect(planHasChanges(await replan(model, provider))).toBe(false);
  });

  it('destroys every fleet and layer and empties the state', async () => {
    const provider = new FakeProvider();
    await planAndApply(project(), provider);
    const { result } = await planAndApply(project(), provider, { plan: { destroy: true } });
    expect(result.failed).toEqual([]);
    expect(provider.sandboxes.size).toBe(0);
    expect(provider.layers.size).toBe(0);
    expect((await store.read()).resources).toEqual({});
  });

  it('records a scale down and an in-place resize in the state', async () => {
    const provider = new FakeProvider();
    await planAndApply(project({ replicas: 4 }), provider);
    const { result } = await planAndApply(
      project({ replicas: 2, fleet: { resources: { cpu: 2, memoryMiB: 512, pids: 64 } } }),
      provider,
    );
    expect(result.failed).toEqual([]);
    const record = fleetRecord(await store.read(), 'web');
    expect(Object.values(record.sandboxes).map((sandbox) => sandbox.resources.cpu)).toEqual([2, 2]);
    expect(record.attributes.replicas).toBe(2);
    expect([...provider.sandboxes.values()].every((sandbox) => sandbox.resources.memoryMiB === 512)).toBe(true);
  });

  it('removes a fleet dropped from the config from the state once its sandboxes are gone', async () => {
    const provider = new FakeProvider();
    const both = config({
      layers: [layer('python', '3.11.9')],
      environments: [environment('py', ['python@3.11.9'])],
      fleets: [fleet('web', 'py'), fleet('api', 'py')],
    });
    await planAndApply(both, provider);
    const onlyWeb = config({
      ...both,
      layers: [layer('python', '3.11.9')],
      environments: [environment('py', ['python@3.11.9'])],
      fleets: [fleet('web', 'py')],
    });
    const { result } = await planAndApply(onlyWeb, provider);
    expect(result.failed).toEqual([]);
    expect(Object.keys((await store.read()).resources).sort()).toEqual(['fleet.web', 'layer.python@3.11.9']);
    expect(provider.sandboxes.size).toBe(2);
  });
});
