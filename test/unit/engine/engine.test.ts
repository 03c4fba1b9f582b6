import { describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { DsecError } from '../../../core/errors.js';
import { planProject } from '../../../core/engine/engine.js';
import { digestDeclaredLayers } from '../../../core/engine/layers.js';
import { liveViewFromState, reconcileState } from '../../../core/engine/refresh.js';
import { LABEL_LINEAGE } from '../../../core/live.js';
import { FakeProvider } from './fake-provider.js';
import { LINEAGE, converge, fleetRecord, freshState, liveSandbox, project } from './fixtures.js';

describe('planProject', () => {
  it('refreshes, digests the layers, plans, and lets plan taps refine the plan', async () => {
    const dsec = new Dsec();
    dsec.hooks.plan.tapPromise('annotate', async (plan) => ({
      ...plan,
      warnings: [...plan.warnings, 'checked by annotate'],
    }));
    const plan = await planProject({
      config: project(),
      provider: new FakeProvider(),
      state: freshState(),
      dsec,
      options: {},
    });
    expect(plan.resource_changes.map((change) => change.action)).toEqual(['create', 'create', 'create']);
    expect(plan.warnings).toEqual(['checked by annotate']);
  });

  it('reports a reviewPlan veto that is a plain error as DSEC_PLAN_VETOED naming the plugin', async () => {
    const dsec = new Dsec();
    dsec.hooks.reviewPlan.tap('allow-all', () => {});
    dsec.hooks.reviewPlan.tap('no-friday-deploys', () => {
      throw new Error('it is Friday');
    });
    const error = await planProject({
      config: project(),
      provider: new FakeProvider(),
      state: freshState(),
      dsec,
      options: {},
    }).catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(DsecError);
    expect((error as DsecError).code).toBe('DSEC_PLAN_VETOED');
    expect((error as DsecError).message).toBe('plugin no-friday-deploys vetoed the plan: it is Friday');
  });

  it('plans from the state alone with refresh false, so drift goes unseen', async () => {
    const { provider, state } = await converge(project());
    provider.sandboxes.clear();
    let refreshed = false;
    provider.refresh = async () => {
      refreshed = true;
      throw new Error('must not be called');
    };
    const plan = await planProject({
      config: project(),
      provider,
      state,
      dsec: new Dsec(),
      options: { refresh: false },
    });
    expect(refreshed).toBe(false);
    expect(plan.resource_changes.every((change) => change.action === 'no-op')).toBe(true);
  });
});

describe('digestDeclaredLayers', () => {
  it('asks the provider for the digest of every declared layer, keyed name@version', async () => {
    const provider = new FakeProvider();
    provider.contents.set('tools@1.0.0', 'sha256:custom');
    expect(await digestDeclaredLayers(project(), provider)).toEqual({
      'python@3.11.9': 'sha256:python@3.11.9',
      'tools@1.0.0': 'sha256:custom',
    });
  });
});

describe('reconcileState', () => {
  it('adopts live sandboxes with our lineage, drops recorded ones that are gone, and ignores strangers', async () => {
    const { provider, state } = await converge(project({ replicas: 2 }));
    const [gone] = [...provider.sandboxes.keys()];
    provider.sandboxes.delete(gone);
    const orphan = liveSandbox('web-orphan01', 'web', 'x');
    const stranger = liveSandbox('web-strange1', 'web', 'x', { lineage: 'other' });
    provider.sandboxes.set(orphan.id, orphan);
    provider.sandboxes.set(stranger.id, stranger);

    const next = reconcileState(state, await provider.refresh());
    const recorded = Object.keys(fleetRecord(next, 'web').sandboxes);
    expect(recorded).toContain('web-orphan01');
    expect(recorded).not.toContain(gone);
    expect(recorded).not.toContain('web-strange1');
    expect(recorded).toHaveLength(2);
  });

  it('turns the state back into a live view that plans as no changes', async () => {
    const { state } = await converge(project());
    const live = liveViewFromState(state);
    expect(live.sandboxes).toHaveLength(4);
    expect(live.sandboxes.every((sandbox) => sandbox.labels[LABEL_LINEAGE] === LINEAGE)).toBe(true);
    expect(live.layers.map((layer) => layer.name).sort()).toEqual(['python', 'tools']);
  });
});
