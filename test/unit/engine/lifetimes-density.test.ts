/**
 * Lifetimes (ttl) and density switches through the engine: what goes into a
 * sandbox's spec, what a change of each plans (in-place update or replace),
 * what apply sends the provider, how it renders, and that a state written
 * before density existed still plans as it did.
 */
import { describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { applyPlan } from '../../../core/engine/apply.js';
import { planToJson, renderPlan } from '../../../core/engine/render.js';
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import { fleetSpecHash, sandboxSpecFor } from '../../../core/engine/spec.js';
import { createHash } from 'node:crypto';
import { canonicalJson } from '../../../core/util/canonical-json.js';
import type { FleetState, ResourceChange, SandboxOperation, StateFile } from '../../../core/plan.js';
import { FakeProvider } from './fake-provider.js';
import { converge, environment, fleet, fleetRecord, memorySession, planWith, project } from './fixtures.js';

const webChange = (changes: readonly ResourceChange[]): ResourceChange => {
  const found = changes.find((item) => item.address === 'fleet.web');
  if (!found) throw new Error('no change for fleet.web');
  return found;
};
const ops = (item: ResourceChange, op: SandboxOperation['op']) =>
  item.fleet!.operations.filter((operation) => operation.op === op);

const identity = {
  backend: 'container',
  layers: [{ name: 'python', version: '3.11.9', digest: 'sha256:a' }],
  env: {},
  workdir: '/',
  user: 'root',
  network: 'none' as const,
  qos: 'best-effort' as const,
  memorySharing: false,
};

describe('the spec of a fleet sandbox', () => {
  it('carries only the lifetime limits that are set, and the fleet density switches', () => {
    const web = fleet('web', 'py', {
      ttl: { idleStopSeconds: 600 },
      density: { memorySharing: true, reclaimOnPause: false },
    });
    const spec = sandboxSpecFor(web, environment('py', []), identity.layers, 'lineage-1', 'web-abcdefgh');
    expect(spec.ttl).toEqual({ idleStopSeconds: 600 });
    expect(spec.density).toEqual({ memorySharing: true, reclaimOnPause: false });
  });

  it('has no ttl at all when the fleet sets no limit, and the default density for a fleet recorded without one', () => {
    const { density: _density, ...recorded } = fleet('web', 'py');
    const spec = sandboxSpecFor(recorded, environment('py', []), identity.layers, 'lineage-1', 'web-abcdefgh');
    expect('ttl' in spec).toBe(false);
    expect(spec.density).toEqual({ memorySharing: false, reclaimOnPause: true });
  });

  it('hashes memory sharing only when it is on, so the hash of a fleet without it is what it was before density existed', () => {
    const { memorySharing: _off, ...before } = identity;
    const legacy = createHash('sha256')
      .update(canonicalJson({ ...before, layers: before.layers.map((layer) => layer.digest) }))
      .digest('hex');
    expect(fleetSpecHash(identity)).toBe(legacy);
    expect(fleetSpecHash({ ...identity, memorySharing: true })).not.toBe(legacy);
  });
});

describe('planning a lifetime or density change', () => {
  it('plans a ttl change as an in-place update of the fleet, each sandbox updated with the whole SandboxUpdate', async () => {
    const { provider, state } = await converge(project());
    const desired = project({ fleet: { ttl: { maxLifetimeSeconds: 7200, idleStopSeconds: 600 } } });
    const web = webChange((await planWith(desired, provider, state)).resource_changes);
    expect(web).toMatchObject({ action: 'update', reason: 'update_ttl', replacePaths: [] });
    expect(web.fleet!.summary).toMatchObject({ update: 4, replace: 0, create: 0, unchanged: 0 });
    expect(ops(web, 'update')[0]).toEqual({
      op: 'update',
      id: expect.any(String),
      resources: { cpu: 1, memoryMiB: 256, pids: 256 },
      ttl: { maxLifetimeSeconds: 7200, idleStopSeconds: 600 },
      density: { memorySharing: false, reclaimOnPause: true },
      labels: {},
    });
  });

  it('plans a reclaimOnPause change as an in-place update too', async () => {
    const { provider, state } = await converge(project());
    const desired = project({ fleet: { density: { memorySharing: false, reclaimOnPause: false } } });
    const web = webChange((await planWith(desired, provider, state)).resource_changes);
    expect(web).toMatchObject({ action: 'update', reason: 'update_density' });
    expect(ops(web, 'update')).toHaveLength(4);
    expect(ops(web, 'update').every((op) => op.op === 'update' && op.density?.reclaimOnPause === false)).toBe(true);
  });

  it('plans a memorySharing change as a replace of every sandbox, forced by density.memorySharing', async () => {
    const { provider, state } = await converge(project());
    const desired = project({ fleet: { density: { memorySharing: true, reclaimOnPause: true } } });
    const plan = await planWith(desired, provider, state);
    const web = webChange(plan.resource_changes);
    expect(web).toMatchObject({ action: 'replace', reason: 'replace_because_cannot_update' });
    expect(web.replacePaths).toEqual([['density', 'memorySharing']]);
    expect(ops(web, 'replace')).toHaveLength(4);
    expect(ops(web, 'replace')[0]).toMatchObject({ because: 'density.memorySharing changed' });
    const text = renderPlan(plan, { color: false });
    expect(text).toMatch(/~ density\.memorySharing: +false -> true # forces replacement/);
  });

  it('names memory sharing as the cause when the state already holds it (a half-finished rollout)', async () => {
    const { provider, state } = await converge(project());
    const desired = project({ fleet: { density: { memorySharing: true, reclaimOnPause: true } } });
    const session = memorySession(state);
    const plan = await planWith(desired, provider, session.state);
    // Apply as far as recording the new attributes, without replacing any sandbox.
    await session.write((current) => ({
      ...current,
      resources: {
        ...current.resources,
        'fleet.web': { ...fleetRecord(current, 'web'), attributes: plan.desired.fleets.web },
      },
    }));
    const web = webChange((await planWith(desired, provider, session.state)).resource_changes);
    expect(web.action).toBe('replace');
    expect(web.replacePaths).toEqual([['density', 'memorySharing']]);
  });

  it('plans a converged fleet with lifetimes and density set as no changes', async () => {
    const model = project({ fleet: { ttl: { idleStopSeconds: 60 }, density: { memorySharing: true, reclaimOnPause: false } } });
    const { provider, state } = await converge(model);
    expect(webChange((await planWith(model, provider, state)).resource_changes).action).toBe('no-op');
  });

  it('updates a sandbox whose reported lifetimes differ from the declared ones, as drift', async () => {
    const model = project({ fleet: { ttl: { idleStopSeconds: 60 } } });
    const { provider, state } = await converge(model);
    const [drifted] = [...provider.sandboxes.keys()];
    provider.sandboxes.set(drifted, { ...provider.sandboxes.get(drifted)!, ttl: { idleStopSeconds: 5 } });
    const web = webChange((await planWith(model, provider, state)).resource_changes);
    expect(web).toMatchObject({ action: 'update', reason: 'drift' });
    expect(ops(web, 'update')).toEqual([expect.objectContaining({ id: drifted, ttl: { idleStopSeconds: 60 } })]);
  });

  it('renders which attribute changed and says no sandbox is replaced', async () => {
    const { provider, state } = await converge(project({ fleet: { ttl: { idleStopSeconds: 600 } } }));
    const plan = await planWith(project({ fleet: { ttl: { idleStopSeconds: 1800 } } }), provider, state);
    const text = renderPlan(plan, { color: false });
    expect(text).toContain('  ~ fleet.web  # will be updated in-place (ttl changed: each live sandbox gets the new lifetimes, none is replaced)');
    expect(text).toMatch(/~ ttl\.idleStopSeconds: +600 -> 1800\n/);
    expect(text).toContain('sandboxes: +0 create, ~4 update, -/+ 0 replace (batches of 1), -0 destroy; 0 unchanged');
    expect(text).not.toContain('forces replacement');
    const schema = JSON.parse(readFileSync(new URL('../../../schemas/plan.schema.json', import.meta.url), 'utf8'));
    const json = planToJson(plan) as { resource_changes: { address: string; action_reason?: string }[] };
    expect(new Ajv({ allErrors: true }).validate(schema, json)).toBe(true);
    expect(json.resource_changes.find((item) => item.address === 'fleet.web')?.action_reason).toBe('update_ttl');
  });

  it('renders a first lifetime as one added attribute, not an emptied ttl and a new one', async () => {
    const { provider, state } = await converge(project());
    const plan = await planWith(project({ fleet: { ttl: { maxLifetimeSeconds: 3600 } } }), provider, state);
    const text = renderPlan(plan, { color: false });
    expect(text).toMatch(/\+ ttl\.maxLifetimeSeconds: +3600\n/);
    expect(text).not.toMatch(/- ttl:/);
  });
});

describe('a state written before density existed', () => {
  const withoutDensity = (state: StateFile): StateFile => {
    const record = fleetRecord(state, 'web');
    const { density: _density, ...attributes } = record.attributes;
    const legacy = { ...record, attributes } as unknown as FleetState;
    return { ...state, resources: { ...state.resources, 'fleet.web': legacy } };
  };

  it('plans no changes for a fleet that keeps the default density', async () => {
    const { provider, state } = await converge(project());
    const web = webChange((await planWith(project(), provider, withoutDensity(state))).resource_changes);
    expect(web.action).toBe('no-op');
  });

  it('plans a reclaimOnPause switched off as an in-place update against the defaults', async () => {
    const { provider, state } = await converge(project());
    const desired = project({ fleet: { density: { memorySharing: false, reclaimOnPause: false } } });
    const web = webChange((await planWith(desired, provider, withoutDensity(state))).resource_changes);
    expect(web).toMatchObject({ action: 'update', reason: 'update_density' });
    expect(web.before).toMatchObject({ density: { memorySharing: false, reclaimOnPause: true } });
  });
});

describe('applying a lifetime change', () => {
  it('sends each sandbox the whole SandboxUpdate, records the new attributes and converges', async () => {
    const { provider, state } = await converge(project());
    const desired = project({ fleet: { ttl: { idleStopSeconds: 900 }, density: { memorySharing: false, reclaimOnPause: false } } });
    const session = memorySession(state);
    const plan = await planWith(desired, provider, session.state);
    const result = await applyPlan(plan, { provider, state: session, dsec: new Dsec() });
    expect(result.failed).toEqual([]);
    expect(provider.updates).toHaveLength(4);
    expect(provider.updates[0].change).toEqual({
      resources: { cpu: 1, memoryMiB: 256, pids: 256 },
      ttl: { idleStopSeconds: 900 },
      density: { memorySharing: false, reclaimOnPause: false },
      labels: {},
    });
    expect(provider.calls.filter((call) => call.startsWith('createSandbox') || call.startsWith('destroySandbox'))).toHaveLength(4);
    expect(fleetRecord(session.state, 'web').attributes.ttl).toEqual({ idleStopSeconds: 900 });
    expect(webChange((await planWith(desired, provider, session.state)).resource_changes).action).toBe('no-op');
  });

  it('sends resources alone for an update from a plan saved before lifetimes were updated in place', async () => {
    const { provider, state } = await converge(project());
    const session = memorySession(state);
    const plan = await planWith(project({ fleet: { resources: { cpu: 2, memoryMiB: 256, pids: 256 } } }), provider, session.state);
    const legacy = {
      ...plan,
      resource_changes: plan.resource_changes.map((item) =>
        item.fleet
          ? {
              ...item,
              fleet: {
                ...item.fleet,
                operations: item.fleet.operations.map((op) => (op.op === 'update' ? { op: 'update' as const, id: op.id, resources: op.resources } : op)),
              },
            }
          : item,
      ),
    };
    await applyPlan(legacy, { provider, state: session, dsec: new Dsec() });
    expect(provider.updates.map((update) => update.change)).toEqual(
      Array(4).fill({ resources: { cpu: 2, memoryMiB: 256, pids: 256 } }),
    );
  });
});
