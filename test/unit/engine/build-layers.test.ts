/**
 * Build layers in the engine: graph edges to parents, digests in parent
 * order, the plan of a layer not built yet ("known after apply"), and apply
 * publishing parents first and creating sandboxes with the real digest.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { DsecError } from '../../../core/errors.js';
import { applyPlan } from '../../../core/engine/apply.js';
import { buildGraph, dependenciesOf, graphToDot, walkOrder } from '../../../core/engine/graph.js';
import { digestDeclaredLayers } from '../../../core/engine/layers.js';
import { makePlan } from '../../../core/engine/planner.js';
import { renderPlan } from '../../../core/engine/render.js';
import { fleetSpecHash, specIdentityOf } from '../../../core/engine/spec.js';
import { isPendingDigest, LABEL_SPEC, pendingDigest } from '../../../core/live.js';
import type { ConfigModel, LayerModel } from '../../../core/model.js';
import type { StateFile } from '../../../core/plan.js';
import { FakeProvider } from './fake-provider.js';
import { config, environment, fleet, freshState, layer, memorySession } from './fixtures.js';

function build(name: string, version: string, from: string[], steps = ['echo hi > /hi']): LayerModel {
  return { ref: `${name}@${version}`, name, version, kind: 'toolkit', source: { type: 'build', from, steps, env: {}, workdir: '/' } };
}

/** The project: base + a build on it, environment `env` stacks both, fleet `web`. */
function buildProject(version = '1.0.0', steps?: string[]): ConfigModel {
  return config({
    layers: [layer('base', '1.0.0'), build('tools', version, ['base@1.0.0'], steps)],
    environments: [environment('env', ['base@1.0.0', `tools@${version}`])],
    fleets: [fleet('web', 'env', { replicas: 2 })],
  });
}

/** A fake provider that builds: a build's digest is known once built (cached by parents + steps), pending before. */
class BuildingProvider extends FakeProvider {
  readonly built = new Map<string, string>();
  readonly digestCalls: string[] = [];

  private identity(layer: LayerModel): string {
    if (layer.source.type !== 'build') throw new Error('not a build');
    const parents = layer.source.parents ?? [];
    if (parents.length !== layer.source.from.length) throw new Error(`${layer.ref}: the engine gave no parents`);
    return createHash('sha256').update(JSON.stringify([parents.map((parent) => parent.digest), layer.source.steps])).digest('hex');
  }

  override async digestLayer(layer: LayerModel): Promise<string> {
    this.digestCalls.push(layer.ref);
    if (layer.source.type !== 'build') return super.digestLayer(layer);
    if (layer.source.parents?.some((parent) => isPendingDigest(parent.digest))) return pendingDigest('parent-pending');
    const identity = this.identity(layer);
    return this.built.get(identity) ?? pendingDigest(identity);
  }

  override async publishLayer(layer: LayerModel) {
    if (layer.source.type === 'build') {
      for (const ref of layer.source.from) if (!this.layers.has(ref)) throw new Error(`${layer.ref} built before its parent ${ref}`);
      const parents = layer.source.from.map((ref) => ({ ...this.layers.get(ref)!, digest: this.layers.get(ref)!.digest }));
      const identity = this.identity({ ...layer, source: { ...layer.source, parents } });
      const digest = this.built.get(identity) ?? `sha256:built-${identity.slice(0, 8)}`;
      this.built.set(identity, digest);
      this.contents.set(layer.ref, digest);
    }
    return super.publishLayer(layer);
  }
}

async function planFor(model: ConfigModel, provider: FakeProvider, state: StateFile) {
  const layerDigests = await digestDeclaredLayers(model, provider);
  return makePlan({ config: model, state, live: await provider.refresh(), layerDigests, options: {} });
}

describe('build layers in the graph', () => {
  it('makes each `from` parent an edge, so a build comes after its parents', () => {
    const model = config({
      layers: [layer('base', '1.0.0'), build('a', '1.0.0', ['base@1.0.0']), build('b', '1.0.0', ['base@1.0.0', 'a@1.0.0'])],
      environments: [environment('env', ['base@1.0.0', 'b@1.0.0'])],
      fleets: [fleet('web', 'env')],
    });
    const graph = buildGraph(model);
    expect(graph.nodes.get('layer.b@1.0.0')?.dependsOn).toEqual(['layer.base@1.0.0', 'layer.a@1.0.0']);
    const order = walkOrder(graph);
    expect(order.indexOf('layer.a@1.0.0')).toBeLessThan(order.indexOf('layer.b@1.0.0'));
    // -target fleet.web brings the build's parents too, even one the environment does not list.
    expect(dependenciesOf(graph, 'fleet.web').has('layer.a@1.0.0')).toBe(true);
    expect(graphToDot(graph)).toContain('"layer.a@1.0.0" -> "layer.b@1.0.0";');
  });

  it('refuses builds on top of each other as a cycle', () => {
    const model = config({
      layers: [layer('base', '1.0.0'), build('a', '1.0.0', ['b@1.0.0']), build('b', '1.0.0', ['a@1.0.0'])],
      environments: [],
      fleets: [],
    });
    expect(() => buildGraph(model)).toThrow(DsecError);
    expect(() => buildGraph(model)).toThrow(/dependency cycle: layer\.a@1\.0\.0 -> layer\.b@1\.0\.0 -> layer\.a@1\.0\.0/);
  });
});

describe('a build not built yet', () => {
  it('is digested after its parent, with the parent digests in hand, and planned as known after apply', async () => {
    const provider = new BuildingProvider();
    const model = buildProject();
    const digests = await digestDeclaredLayers(model, provider);
    expect(provider.digestCalls).toEqual(['base@1.0.0', 'tools@1.0.0']);
    expect(isPendingDigest(digests['tools@1.0.0'])).toBe(true);

    const plan = makePlan({ config: model, state: freshState(), live: await provider.refresh(), layerDigests: digests, options: {} });
    const tools = plan.resource_changes.find((change) => change.address === 'layer.tools@1.0.0')!;
    expect(tools.action).toBe('create');
    expect(tools.after).toMatchObject({ digest: '(known after apply)', source: 'build:from base@1.0.0, 1 step(s)' });
    expect(plan.desired.layers['tools@1.0.0'].source).toMatchObject({ parents: [{ name: 'base', version: '1.0.0', digest: 'sha256:base@1.0.0' }] });
    expect(plan.warnings).toEqual([
      'layer.tools@1.0.0 is built during apply, so its digest is known after apply; the sandboxes of fleet.web are created on it (live ones replaced) once it is built',
    ]);
    expect(renderPlan(plan, { color: false })).toContain('+ digest:  "(known after apply)"');
  });

  it('is built after its parent by apply, and the sandboxes get its real digest; a re-plan changes nothing', async () => {
    const provider = new BuildingProvider();
    const session = memorySession(freshState());
    const plan = await planFor(buildProject(), provider, session.state);
    const result = await applyPlan(plan, { provider, state: session, dsec: new Dsec() });
    expect(result.failed).toEqual([]);
    const publishes = provider.calls.filter((call) => call.startsWith('publishLayer'));
    expect(publishes).toEqual(['publishLayer base@1.0.0', 'publishLayer tools@1.0.0']);

    const built = provider.layers.get('tools@1.0.0')!.digest;
    expect(built).toMatch(/^sha256:built-/);
    const sandboxes = [...provider.sandboxes.values()];
    expect(sandboxes).toHaveLength(2);
    const layers = [
      { name: 'base', version: '1.0.0', digest: 'sha256:base@1.0.0' },
      { name: 'tools', version: '1.0.0', digest: built },
    ];
    const expectedHash = fleetSpecHash(specIdentityOf(fleet('web', 'env'), environment('env', []), layers));
    for (const sandbox of sandboxes) {
      expect(sandbox.layers).toEqual(layers);
      expect(sandbox.labels[LABEL_SPEC]).toBe(expectedHash);
    }
    const recorded = session.state.resources['layer.tools@1.0.0'];
    expect(recorded).toMatchObject({ type: 'layer', digest: built });
    expect(session.state.resources['fleet.web']).toMatchObject({ attributes: { specHash: expectedHash } });

    // Built once: the digest now comes from the cache, so nothing is pending and nothing changes.
    const again = await planFor(buildProject(), provider, session.state);
    expect(again.warnings).toEqual([]);
    expect(again.resource_changes.every((change) => change.action === 'no-op')).toBe(true);
  });

  it('replaces the fleets of a new build version, and refuses a changed build under a published version', async () => {
    const provider = new BuildingProvider();
    const session = memorySession(freshState());
    await applyPlan(await planFor(buildProject(), provider, session.state), { provider, state: session, dsec: new Dsec() });

    const bumped = await planFor(buildProject('1.1.0', ['echo changed > /hi']), provider, session.state);
    const web = bumped.resource_changes.find((change) => change.address === 'fleet.web')!;
    expect(web.action).toBe('replace');
    expect(web.replacePaths).toEqual([['layers']]);
    const result = await applyPlan(bumped, { provider, state: session, dsec: new Dsec() });
    expect(result.failed).toEqual([]);
    const digest = provider.layers.get('tools@1.1.0')!.digest;
    expect([...provider.sandboxes.values()].every((sandbox) => sandbox.layers[1].digest === digest)).toBe(true);

    const error = await planFor(buildProject('1.1.0', ['echo other > /hi']), provider, session.state).catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(DsecError);
    expect((error as DsecError).code).toBe('DSEC_LAYER_IMMUTABLE');
    expect((error as DsecError).message).toContain('layer tools@1.1.0 is already published with digest');
    expect((error as DsecError).message).toContain('(known after apply): its build inputs (parents, steps, env, workdir) are not the ones it was built from');
  });

  it('does not build a layer whose parent failed to publish', async () => {
    const provider = new BuildingProvider();
    provider.failWhen = (call, target) => (call === 'publishLayer' && target === 'base@1.0.0' ? new Error('disk full') : undefined);
    const session = memorySession(freshState());
    const result = await applyPlan(await planFor(buildProject(), provider, session.state), { provider, state: session, dsec: new Dsec() });
    const failed = Object.fromEntries(result.failed.map(({ change, error }) => [change.address, error.message]));
    expect(failed['layer.base@1.0.0']).toBe('disk full');
    expect(failed['layer.tools@1.0.0']).toBe('layer.tools@1.0.0 was not applied because layer.base@1.0.0 failed');
    expect(provider.calls.some((call) => call === 'publishLayer tools@1.0.0')).toBe(false);
  });
});

describe('a published layer', () => {
  it('is planned as a no-op and never recorded in the state, so dsec never unpublishes it', async () => {
    const provider = new FakeProvider();
    const snap: LayerModel = { ref: 'snap@1.0.0', name: 'snap', version: '1.0.0', kind: 'workspace', source: { type: 'published' } };
    await provider.publishLayer({ ...snap, source: { type: 'dir', path: '/x' } });
    const model = config({
      layers: [layer('base', '1.0.0'), snap],
      environments: [environment('env', ['base@1.0.0', 'snap@1.0.0'])],
      fleets: [fleet('web', 'env', { replicas: 1 })],
    });
    const session = memorySession(freshState());
    const plan = await planFor(model, provider, session.state);
    expect(plan.resource_changes.find((change) => change.address === 'layer.snap@1.0.0')?.action).toBe('no-op');
    const result = await applyPlan(plan, { provider, state: session, dsec: new Dsec() });
    expect(result.failed).toEqual([]);
    expect(session.state.resources['layer.snap@1.0.0']).toBeUndefined();
    expect(session.state.resources['layer.base@1.0.0']).toBeDefined();

    // Without a refresh the store's record is not listed: still not a publish.
    const noRefresh = makePlan({
      config: model,
      state: session.state,
      live: { nodes: [], layers: [], sandboxes: [] },
      layerDigests: await digestDeclaredLayers(model, provider),
      options: {},
    });
    expect(noRefresh.resource_changes.find((change) => change.address === 'layer.snap@1.0.0')?.action).toBe('no-op');
  });
});
