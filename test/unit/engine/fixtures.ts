/** Small builders for config models, states and live views used by the engine tests. */
import { LABEL_FLEET, LABEL_LINEAGE, LABEL_SPEC, type SandboxInfo, type SandboxStatus } from '../../../core/live.js';
import type { ConfigModel, EnvironmentModel, FleetModel, LayerKind, LayerModel } from '../../../core/model.js';
import type { FleetState, Plan, PlanOptions, StateFile } from '../../../core/plan.js';
import { Dsec } from '../../../core/dsec.js';
import { applyPlan } from '../../../core/engine/apply.js';
import { makePlan } from '../../../core/engine/planner.js';
import type { StateSession } from '../../../core/state/session.js';
import { FakeProvider } from './fake-provider.js';

export const LINEAGE = 'lineage-test-1';

export function layer(name: string, version: string, kind: LayerKind = 'base'): LayerModel {
  return { ref: `${name}@${version}`, name, version, kind, source: { type: 'dir', path: `/layers/${name}` } };
}

export function environment(
  name: string,
  layers: string[],
  overrides: Partial<EnvironmentModel> = {},
): EnvironmentModel {
  return { name, layers, env: {}, workdir: '/', user: 'root', ...overrides };
}

export function fleet(name: string, environmentName: string, overrides: Partial<FleetModel> = {}): FleetModel {
  return {
    name,
    environment: environmentName,
    backend: 'container',
    replicas: 2,
    resources: { cpu: 1, memoryMiB: 256, pids: 256 },
    network: 'none',
    qos: 'best-effort',
    ttl: {},
    density: { memorySharing: false, reclaimOnPause: true },
    labels: {},
    update: { maxUnavailable: 1 },
    ...overrides,
  };
}

const byName = <T extends { name: string }>(items: T[]): Record<string, T> =>
  Object.fromEntries(items.map((item) => [item.name, item]));

export function config(parts: {
  layers: LayerModel[];
  environments: EnvironmentModel[];
  fleets: FleetModel[];
}): ConfigModel {
  return {
    version: 1,
    file: '/project/dsec.yaml',
    dir: '/project',
    provider: { type: 'local', stateDir: '.dsec' },
    plugins: [],
    layers: byName(parts.layers),
    environments: byName(parts.environments),
    fleets: byName(parts.fleets),
  };
}

/** The usual project: base python + a toolkit, environment `py`, fleet `web` (4 replicas). */
export function project(
  overrides: { replicas?: number; fleet?: Partial<FleetModel>; toolkit?: string } = {},
): ConfigModel {
  const toolkit = overrides.toolkit ?? '1.0.0';
  return config({
    layers: [layer('python', '3.11.9'), layer('tools', toolkit, 'toolkit')],
    environments: [environment('py', ['python@3.11.9', `tools@${toolkit}`])],
    fleets: [fleet('web', 'py', { replicas: overrides.replicas ?? 4, ...overrides.fleet })],
  });
}

export const digestsOf = (model: ConfigModel): Record<string, string> =>
  Object.fromEntries(Object.values(model.layers).map((item) => [item.ref, `sha256:${item.ref}`]));

export function freshState(lineage = LINEAGE): StateFile {
  return { format_version: 1, lineage, serial: 0, dsec_version: '0.1.0', resources: {} };
}

export function liveSandbox(
  id: string,
  fleetName: string,
  specHash: string,
  overrides: Partial<SandboxInfo> & { lineage?: string; status?: SandboxStatus } = {},
): SandboxInfo {
  const { lineage = LINEAGE, ...rest } = overrides;
  return {
    id,
    node: 'node-1',
    backend: 'container',
    status: 'running',
    labels: { [LABEL_LINEAGE]: lineage, [LABEL_FLEET]: fleetName, [LABEL_SPEC]: specHash },
    resources: { cpu: 1, memoryMiB: 256, pids: 256 },
    layers: [],
    createdAt: '2025-01-01T00:00:00.000Z',
    ...rest,
  };
}

export const fleetRecord = (state: StateFile, name: string): FleetState => {
  const record = state.resources[`fleet.${name}`];
  if (record?.type !== 'fleet') throw new Error(`no fleet ${name} in the state`);
  return record;
};

// ------------------------------------------------------------ converging

/** An in-memory StateSession, for setting up planner fixtures (apply tests use the real store). */
export function memorySession(initial: StateFile): StateSession {
  let current = initial;
  return {
    get state() {
      return current;
    },
    lock: { id: 'memory', pid: process.pid, host: 'test', command: 'test', createdAt: '' },
    async write(mutate) {
      const next = mutate(current);
      if (next !== current) current = { ...next, serial: current.serial + 1 };
      return current;
    },
    async flush() {},
    async release() {},
  };
}

export async function planWith(
  model: ConfigModel,
  provider: FakeProvider,
  state: StateFile,
  options: PlanOptions = {},
): Promise<Plan> {
  return makePlan({ config: model, state, live: await provider.refresh(), layerDigests: digestsOf(model), options });
}

/** Plan and apply `model` against the fake provider; returns the provider and the state after. */
export async function converge(
  model: ConfigModel,
  provider = new FakeProvider(),
  state: StateFile = freshState(),
): Promise<{ provider: FakeProvider; state: StateFile }> {
  const session = memorySession(state);
  const plan = await planWith(model, provider, session.state);
  const result = await applyPlan(plan, { provider, state: session, dsec: new Dsec() });
  if (result.failed.length > 0) throw result.failed[0].error;
  return { provider, state: session.state };
}
