import { describe, expect, it } from 'vitest';
import { isDsecError } from '../../../core/errors.js';
import { LABEL_FLEET, LABEL_LINEAGE, LABEL_SPEC } from '../../../core/live.js';
import type { ResourceChange, SandboxOperation } from '../../../core/plan.js';
import { makePlan } from '../../../core/engine/planner.js';
import { FakeProvider } from './fake-provider.js';
import {
  LINEAGE,
  config,
  converge,
  digestsOf,
  environment,
  fleet,
  fleetRecord,
  freshState,
  layer,
  liveSandbox,
  planWith,
  project,
} from './fixtures.js';

const change = (changes: readonly ResourceChange[], address: string): ResourceChange => {
  const found = changes.find((item) => item.address === address);
  if (!found) throw new Error(`no change for ${address} in ${changes.map((item) => item.address).join(', ')}`);
  return found;
};
const ops = (item: ResourceChange, op: SandboxOperation['op']) =>
  item.fleet!.operations.filter((operation) => operation.op === op);

describe('makePlan', () => {
  it('plans every layer publish and one fleet create with a create operation per replica from an empty state', async () => {
    const model = project({ replicas: 3 });
    const plan = await planWith(model, new FakeProvider(), freshState());

    expect(plan.resource_changes.map((item) => [item.address, item.action])).toEqual([
      ['layer.python@3.11.9', 'create'],
      ['layer.tools@1.0.0', 'create'],
      ['fleet.web', 'create'],
    ]);
    const web = change(plan.resource_changes, 'fleet.web');
    expect(web.fleet!.summary).toMatchObject({ desired: 3, live: 0, create: 3, replace: 0, delete: 0 });
    const creates = ops(web, 'create') as Extract<SandboxOperation, { op: 'create' }>[];
    expect(creates).toHaveLength(3);
    for (const { spec } of creates) {
      expect(spec.id).toMatch(/^web-[a-z0-9]{8}$/);
      expect(spec.labels[LABEL_LINEAGE]).toBe(LINEAGE);
      expect(spec.labels[LABEL_FLEET]).toBe('web');
      expect(spec.labels[LABEL_SPEC]).toBe(plan.desired.fleets.web.specHash);
      expect(spec.layers.map((item) => item.digest)).toEqual(['sha256:python@3.11.9', 'sha256:tools@1.0.0']);
    }
    expect(new Set(creates.map(({ spec }) => spec.id)).size).toBe(3);
    expect(plan.prior_state).toEqual({ lineage: LINEAGE, serial: 0 });
  });

  it('plans a converged project as no changes at all', async () => {
    const { provider, state } = await converge(project());
    const plan = await planWith(project(), provider, state);
    expect(plan.resource_changes.every((item) => item.action === 'no-op')).toBe(true);
  });

  it('plans replicas 4 -> 6 as ONE update of the fleet with two creates', async () => {
    const { provider, state } = await converge(project({ replicas: 4 }));
    const plan = await planWith(project({ replicas: 6 }), provider, state);
    const changed = plan.resource_changes.filter((item) => item.action !== 'no-op');
    expect(changed).toHaveLength(1);
    expect(changed[0]).toMatchObject({ address: 'fleet.web', action: 'update', reason: 'update_replicas' });
    expect(changed[0].fleet!.summary).toMatchObject({ desired: 6, live: 4, create: 2, unchanged: 4 });
    expect(changed[0].before).toMatchObject({ replicas: 4 });
    expect(changed[0].after).toMatchObject({ replicas: 6 });
  });

  it('plans an environment change as a replace of every sandbox, forced by the environment, batched by maxUnavailable', async () => {
    const model = project({ fleet: { update: { maxUnavailable: 2 } } });
    const { provider, state } = await converge(model);
    const moved = config({
      layers: [layer('python', '3.11.9'), layer('python3', '3.12.0'), layer('tools', '1.0.0', 'toolkit')],
      environments: [
        environment('py', ['python@3.11.9', 'tools@1.0.0']),
        environment('py312', ['python3@3.12.0', 'tools@1.0.0']),
      ],
      fleets: [fleet('web', 'py312', { replicas: 4, update: { maxUnavailable: 2 } })],
    });
    const plan = await planWith(moved, provider, state);
    const web = change(plan.resource_changes, 'fleet.web');
    expect(web).toMatchObject({ action: 'replace', reason: 'replace_because_cannot_update' });
    expect(web.replacePaths).toContainEqual(['environment']);
    expect(web.fleet!.maxUnavailable).toBe(2);
    expect(web.fleet!.summary).toMatchObject({ replace: 4, create: 0, delete: 0 });
    const replaces = ops(web, 'replace') as Extract<SandboxOperation, { op: 'replace' }>[];
    expect(replaces.every((operation) => operation.spec.labels[LABEL_SPEC] === plan.desired.fleets.web.specHash)).toBe(
      true,
    );
    expect(replaces[0].because).toMatch(/environment/);
  });

  it('plans a toolkit version bump as a replace forced by the layers', async () => {
    const { provider, state } = await converge(project({ toolkit: '1.0.0' }));
    const plan = await planWith(project({ toolkit: '1.1.0' }), provider, state);
    const web = change(plan.resource_changes, 'fleet.web');
    expect(web.action).toBe('replace');
    expect(web.replacePaths).toEqual([['layers']]);
    expect(change(plan.resource_changes, 'layer.tools@1.1.0').action).toBe('create');
    // The old toolkit is still used by the sandboxes being replaced only, so it goes too, after the fleet.
    expect(change(plan.resource_changes, 'layer.tools@1.0.0').action).toBe('delete');
    expect(plan.resource_changes.map((item) => item.address).at(-1)).toBe('layer.tools@1.0.0');
  });

  it('plans a resources change as an in-place update of each sandbox', async () => {
    const { provider, state } = await converge(project());
    const plan = await planWith(
      project({ fleet: { resources: { cpu: 2, memoryMiB: 512, pids: 256 } } }),
      provider,
      state,
    );
    const web = change(plan.resource_changes, 'fleet.web');
    expect(web).toMatchObject({ action: 'update', reason: 'update_resources', replacePaths: [] });
    expect(ops(web, 'update')).toHaveLength(4);
    expect(ops(web, 'replace')).toHaveLength(0);
  });

  it('recreates a sandbox that is in the state but gone, and replaces one that failed, as drift', async () => {
    const { provider, state } = await converge(project());
    const [gone, failed] = [...provider.sandboxes.keys()];
    provider.sandboxes.delete(gone);
    provider.sandboxes.set(failed, { ...provider.sandboxes.get(failed)!, status: 'failed', error: 'oom' });

    const plan = await planWith(project(), provider, state);
    const web = change(plan.resource_changes, 'fleet.web');
    expect(web).toMatchObject({ action: 'replace', reason: 'drift', replacePaths: [] });
    expect(web.fleet!.summary).toMatchObject({ create: 1, replace: 1, unchanged: 2, live: 3 });
    expect(web.fleet!.forget).toEqual([gone]);
    const replace = ops(web, 'replace')[0] as Extract<SandboxOperation, { op: 'replace' }>;
    expect(replace).toMatchObject({ id: failed, because: 'sandbox is failed: oom' });
  });

  it('adopts a sandbox with our lineage that the state does not record instead of creating another', async () => {
    const model = project({ replicas: 2 });
    const provider = new FakeProvider();
    const first = await planWith(model, provider, freshState());
    // A crashed apply: layers published and one sandbox created, nothing recorded.
    for (const item of Object.values(model.layers)) await provider.publishLayer(item);
    const created = (
      ops(change(first.resource_changes, 'fleet.web'), 'create')[0] as Extract<SandboxOperation, { op: 'create' }>
    ).spec;
    await provider.createSandbox(created);

    const plan = await planWith(model, provider, freshState());
    const web = change(plan.resource_changes, 'fleet.web');
    expect(web.fleet!.summary).toMatchObject({ live: 1, create: 1 });
    expect(web.fleet!.adopt?.map((sandbox) => sandbox.id)).toEqual([created.id]);
    expect(ops(web, 'create')).toHaveLength(1);
  });

  it('never touches a sandbox without our lineage, even one labelled with our fleet name', async () => {
    const { provider, state } = await converge(project({ replicas: 1 }));
    const stranger = liveSandbox('web-stranger', 'web', 'whatever', { lineage: 'someone-else' });
    const unlabelled = { ...liveSandbox('web-unlabelled', 'web', 'x'), labels: {} };
    provider.sandboxes.set(stranger.id, stranger);
    provider.sandboxes.set(unlabelled.id, unlabelled);

    for (const options of [{}, { destroy: true }]) {
      const plan = await planWith(project({ replicas: 1 }), provider, state, options);
      const touched = plan.resource_changes.flatMap((item) =>
        (item.fleet?.operations ?? []).map((operation) => ('id' in operation ? operation.id : operation.spec.id)),
      );
      expect(touched).not.toContain('web-stranger');
      expect(touched).not.toContain('web-unlabelled');
    }
  });

  it('deletes every fleet, then every layer in the state, in destroy mode', async () => {
    const { provider, state } = await converge(project());
    const plan = await planWith(project(), provider, state, { destroy: true });
    expect(plan.mode).toBe('destroy');
    expect(plan.resource_changes.map((item) => [item.address, item.action, item.reason])).toEqual([
      ['fleet.web', 'delete', 'delete_because_destroy_mode'],
      ['layer.python@3.11.9', 'delete', 'delete_because_destroy_mode'],
      ['layer.tools@1.0.0', 'delete', 'delete_because_destroy_mode'],
    ]);
    expect(ops(plan.resource_changes[0], 'delete')).toHaveLength(4);
    expect(plan.desired).toEqual({ layers: {}, fleets: {} });
  });

  it('limits a targeted plan to the fleet and the layers it depends on', async () => {
    const model = config({
      layers: [layer('python', '3.11.9'), layer('node', '20.0.0')],
      environments: [environment('py', ['python@3.11.9']), environment('js', ['node@20.0.0'])],
      fleets: [fleet('web', 'py'), fleet('api', 'js')],
    });
    const plan = await planWith(model, new FakeProvider(), freshState(), { targets: ['fleet.web'] });
    expect(plan.resource_changes.map((item) => item.address)).toEqual(['layer.python@3.11.9', 'fleet.web']);
    expect(plan.warnings).toEqual([]);

    const nothing = await planWith(model, new FakeProvider(), freshState(), { targets: ['fleet.nope'] });
    expect(nothing.resource_changes).toEqual([]);
    expect(nothing.warnings[0]).toMatch(/--target fleet.nope matches no resource/);
  });

  it('destroys a targeted layer together with the fleets built on it', async () => {
    const { provider, state } = await converge(project());
    const plan = await planWith(project(), provider, state, { destroy: true, targets: ['layer.tools'] });
    expect(plan.resource_changes.map((item) => [item.address, item.action])).toEqual([
      ['fleet.web', 'delete'],
      ['layer.tools@1.0.0', 'delete'],
    ]);
  });

  it('refuses a target that is not a resource address', async () => {
    let caught: unknown;
    try {
      await planWith(project(), new FakeProvider(), freshState(), { targets: ['web'] });
    } catch (error) {
      caught = error;
    }
    expect(isDsecError(caught, 'DSEC_USAGE')).toBe(true);
    expect((caught as Error).message).toMatch(/^--target web: not a resource address/);
  });

  it('replaces every sandbox of a fleet named with --replace, or just the one named with its id', async () => {
    const { provider, state } = await converge(project());
    const all = await planWith(project(), provider, state, { replace: ['fleet.web'] });
    const web = change(all.resource_changes, 'fleet.web');
    expect(web).toMatchObject({ action: 'replace', reason: 'replace_by_request', replacePaths: [] });
    expect(ops(web, 'replace')).toHaveLength(4);

    const id = [...provider.sandboxes.keys()][2];
    const one = await planWith(project(), provider, state, { replace: [`fleet.web[${id}]`] });
    expect(
      ops(change(one.resource_changes, 'fleet.web'), 'replace').map((operation) => (operation as { id: string }).id),
    ).toEqual([id]);

    const typo = await planWith(project(), provider, state, {
      replace: ['fleet.web[web-nope0000]', 'layer.python@3.11.9'],
    });
    expect(typo.warnings).toEqual([
      '--replace layer.python@3.11.9: only fleets can be replaced (layers are immutable: publish a new version)',
      '--replace fleet.web[web-nope0000]: no such live sandbox in fleet.web',
    ]);
  });

  it('refuses to plan when a published layer version holds other content', async () => {
    const { provider, state } = await converge(project());
    const model = project();
    const digests = { ...digestsOf(model), 'tools@1.0.0': 'sha256:different' };
    let caught: unknown;
    try {
      makePlan({ config: model, state, live: await provider.refresh(), layerDigests: digests, options: {} });
    } catch (error) {
      caught = error;
    }
    expect(isDsecError(caught, 'DSEC_LAYER_IMMUTABLE')).toBe(true);
    expect((caught as Error).message).toBe(
      'layer tools@1.0.0 is already published with digest sha256:tools@1.0.0; its content now has digest sha256:different. Publish a new version.',
    );
  });

  it('scales down by deleting failed and outdated sandboxes first, then the newest', async () => {
    const { provider, state } = await converge(project({ replicas: 5 }));
    const ids = [...provider.sandboxes.values()]
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt))
      .map((s) => s.id);
    provider.sandboxes.set(ids[1], { ...provider.sandboxes.get(ids[1])!, status: 'stopped' });
    const plan = await planWith(project({ replicas: 3 }), provider, state);
    const web = change(plan.resource_changes, 'fleet.web');
    expect(web.action).toBe('update');
    expect(
      ops(web, 'delete')
        .map((operation) => (operation as { id: string }).id)
        .sort(),
    ).toEqual([ids[1], ids[4]].sort());
  });

  it('leaves a stopped sandbox to the job that claims it (with a warning) and fills the pool beside it, and deletes it once the claim has expired', async () => {
    const { provider, state } = await converge(project({ replicas: 2 }));
    const [lost] = [...provider.sandboxes.keys()].sort();
    const claimed = (expiresAt?: string) => ({
      ...provider.sandboxes.get(lost)!,
      status: 'stopped' as const,
      error: 'node a is gone (its lease lapsed)',
      claim: { holder: 'job-7', claimedAt: '2026-01-01T00:00:00.000Z', ...(expiresAt ? { expiresAt } : {}) },
    });
    provider.sandboxes.set(lost, claimed(new Date(Date.now() + 3_600_000).toISOString()));
    const kept = await planWith(project({ replicas: 2 }), provider, state);
    const held = change(kept.resource_changes, 'fleet.web');
    // replicas counts the pool (unclaimed): the claimed one comes on top, so one more is made beside it.
    expect(held.fleet!.operations.map((operation) => operation.op)).toEqual(['create']);
    expect(held.fleet!.summary).toMatchObject({ claimed: 1, ready: 1, create: 1 });
    expect(kept.warnings.join('\n')).toContain(`sandbox ${lost} is stopped (node a is gone (its lease lapsed)) but claimed by job-7: left for its job`);

    provider.sandboxes.set(lost, claimed('2026-01-01T01:00:00.000Z'));
    const lapsed = await planWith(project({ replicas: 2 }), provider, state);
    const web = change(lapsed.resource_changes, 'fleet.web');
    expect(ops(web, 'delete').map((operation) => (operation as { id: string }).id)).toEqual([lost]);
    expect(ops(web, 'create')).toHaveLength(1);
  });

  it('deletes the sandboxes of a fleet removed from the config, and warns about a lineage-labelled fleet in neither state nor config', async () => {
    const { provider, state } = await converge(project({ replicas: 1 }));
    const orphan = liveSandbox('ghost-aaaaaaaa', 'ghost', 'x');
    provider.sandboxes.set(orphan.id, orphan);
    const withoutWeb = config({
      layers: Object.values(project().layers),
      environments: [environment('py', ['python@3.11.9', 'tools@1.0.0'])],
      fleets: [],
    });
    const plan = await planWith(withoutWeb, provider, state);
    expect(change(plan.resource_changes, 'fleet.web')).toMatchObject({
      action: 'delete',
      reason: 'delete_because_no_resource_config',
    });
    expect(change(plan.resource_changes, 'fleet.ghost')).toMatchObject({ action: 'delete' });
    expect(plan.warnings.join('\n')).toMatch(/fleet.ghost: 1 live sandbox\(es\) carry this state's lineage/);
  });

  it('keeps a no longer declared layer that a sandbox outside the plan still uses, with a warning', async () => {
    const { provider, state } = await converge(project({ toolkit: '1.0.0' }));
    const foreign = liveSandbox('other-aaaaaaaa', 'other', 'x', {
      lineage: 'another-project',
      layers: [{ name: 'tools', version: '1.0.0', digest: 'sha256:tools@1.0.0' }],
    });
    provider.sandboxes.set(foreign.id, foreign);
    const plan = await planWith(project({ toolkit: '1.1.0' }), provider, state);
    expect(plan.resource_changes.find((item) => item.address === 'layer.tools@1.0.0')).toBeUndefined();
    expect(plan.warnings.join('\n')).toMatch(/layer.tools@1.0.0 is no longer declared, but 1 sandbox/);
  });

  it('ignores sandboxes the state was told to forget', async () => {
    const { provider, state } = await converge(project({ replicas: 2 }));
    const [kept, forgotten] = [...provider.sandboxes.keys()];
    const record = fleetRecord(state, 'web');
    const edited = {
      ...state,
      forgotten: [forgotten],
      resources: { ...state.resources, 'fleet.web': { ...record, sandboxes: { [kept]: record.sandboxes[kept] } } },
    };
    const plan = await planWith(project({ replicas: 2 }), provider, edited, { destroy: true });
    const deleted = ops(change(plan.resource_changes, 'fleet.web'), 'delete').map(
      (operation) => (operation as { id: string }).id,
    );
    expect(deleted).toEqual([kept]);
  });

  it('fills desired so a saved plan applies without the config', async () => {
    const model = project();
    const plan = await planWith(model, new FakeProvider(), freshState());
    expect(plan.desired.layers['python@3.11.9']).toMatchObject({ kind: 'base', digest: 'sha256:python@3.11.9' });
    expect(plan.desired.fleets.web).toMatchObject({ environment: 'py', replicas: 4, workdir: '/', user: 'root' });
    expect(plan.desired.fleets.web.specHash).toMatch(/^[0-9a-f]{64}$/);
  });
});
