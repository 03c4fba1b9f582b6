/**
 * Replanning after a toolkit upgrade: 1,000 environments, each a shared base,
 * a workspace of its own and one shared toolkit, one fleet each (4 replicas
 * by default), all applied and running. Then a new toolkit version is
 * declared (new content, so a new digest) and the engine's planner runs
 * in-process on a config, state and live view built in memory (as
 * bench/plan-scale.ts does): how many layers does the plan publish, what
 * else does it touch, and how long does planning take. The same for a base
 * upgrade, and a no-change replan as the control.
 *
 * "Layers (re)built/published" is what the plan says it will publish: the
 * layer changes with action `create`. Target (the issue's): one, for the
 * toolkit upgrade. Plan time is the median of 5 `makePlan` calls (after 3 untimed ones) (the
 * digests are given, as the provider would compute them; only the changed
 * layer's content is new, every other digest comes from the digest cache).
 *
 *   npm run build && node dist/bench/layers-replan.js [--environments 1000] [--replicas 4]
 */
import { resolveFleet } from '../core/engine/fleet-attributes.js';
import { makePlan } from '../core/engine/planner.js';
import { LABEL_FLEET, LABEL_LINEAGE, LABEL_SPEC, type LiveView, type SandboxInfo } from '../core/live.js';
import type { ConfigModel, EnvironmentModel, FleetModel, LayerModel } from '../core/model.js';
import type { FleetState, Plan, PlanInput, SandboxState, StateFile } from '../core/plan.js';
import { fixed, median, table } from './lib/measure.js';
import { benchConfig, benchFleet } from './lib/model.js';
import { runWhenMain } from './lib/main.js';

const RUNS = 5;
const LINEAGE = 'bench-replan';

export interface ReplanSettings {
  environments: number;
  replicas: number;
}

export function parseReplanArgs(argv: readonly string[]): ReplanSettings {
  const settings: ReplanSettings = { environments: 1000, replicas: 4 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = { '--environments': 'environments', '--replicas': 'replicas' }[argv[i]] as keyof ReplanSettings | undefined;
    const value = Number(argv[i + 1]);
    if (!key || !Number.isInteger(value) || value < 1) throw new Error('usage: layers-replan [--environments N] [--replicas N]');
    settings[key] = value;
  }
  return settings;
}

/** A digest that changes with the content's name@version (stands in for the content hash). */
const digestOf = (ref: string): string => `sha256:${Buffer.from(ref).toString('hex').padEnd(64, '0').slice(0, 64)}`;

interface Declared {
  readonly config: ConfigModel;
  readonly digests: Record<string, string>;
}

/** The config: base@`base`, toolkit@`toolkit`, and per environment a workspace and a fleet. */
function declare(settings: ReplanSettings, versions: { base: string; toolkit: string }): Declared {
  const layers: Record<string, LayerModel> = {};
  const digests: Record<string, string> = {};
  const layer = (name: string, version: string, kind: LayerModel['kind']): string => {
    const ref = `${name}@${version}`;
    layers[name] = { ref, name, version, kind, source: { type: 'dir', path: `/layers/${name}/${version}` } };
    digests[ref] = digestOf(ref);
    return ref;
  };
  const base = layer('base', versions.base, 'base');
  const toolkit = layer('toolkit', versions.toolkit, 'toolkit');
  const environments: Record<string, EnvironmentModel> = {};
  const fleets: Record<string, FleetModel> = {};
  for (let index = 0; index < settings.environments; index++) {
    const name = `task${String(index).padStart(4, '0')}`;
    environments[name] = { name, layers: [base, layer(`workspace-${name}`, '1.0.0', 'workspace'), toolkit], env: { TASK: name }, workdir: '/work', user: 'root' };
    fleets[name] = benchFleet(name, name, settings.replicas, 2);
  }
  const config = benchConfig(layers, environments, fleets);
  return { config, digests };
}

/** The state and live view after `declared` was applied: every layer published, every sandbox running. */
function applied({ config, digests }: Declared): { state: StateFile; live: LiveView } {
  const resources: Record<string, StateFile['resources'][string]> = {};
  for (const layer of Object.values(config.layers)) {
    resources[`layer.${layer.ref}`] = { type: 'layer', name: layer.name, version: layer.version, kind: layer.kind, digest: digests[layer.ref] };
  }
  const sandboxes: SandboxInfo[] = [];
  let counter = 0;
  for (const fleet of Object.values(config.fleets)) {
    const attributes = resolveFleet(config, fleet, digests);
    const recorded: Record<string, SandboxState> = {};
    for (let replica = 0; replica < fleet.replicas; replica++) {
      const index = counter++;
      const id = `${fleet.name}-${index.toString(36).padStart(8, '0')}`;
      const createdAt = new Date(1_700_000_000_000 + index * 1000).toISOString();
      recorded[id] = { id, node: 'node-1', specHash: attributes.specHash, resources: fleet.resources, createdAt };
      sandboxes.push({
        id,
        node: 'node-1',
        backend: fleet.backend,
        status: 'running',
        labels: { team: 'rl', [LABEL_LINEAGE]: LINEAGE, [LABEL_FLEET]: fleet.name, [LABEL_SPEC]: attributes.specHash },
        resources: fleet.resources,
        layers: attributes.layers,
        createdAt,
      });
    }
    resources[`fleet.${fleet.name}`] = { type: 'fleet', name: fleet.name, attributes, sandboxes: recorded } satisfies FleetState;
  }
  const live: LiveView = {
    nodes: [],
    layers: Object.values(config.layers).map((layer) => ({
      name: layer.name,
      version: layer.version,
      kind: layer.kind,
      digest: digests[layer.ref],
      sizeBytes: 0,
      files: 0,
      publishedAt: '',
      format: 'erofs',
    })),
    sandboxes,
  };
  return { state: { format_version: 1, lineage: LINEAGE, serial: 7, dsec_version: 'bench', resources }, live };
}

interface Outcome {
  readonly scenario: string;
  readonly published: string[];
  readonly unpublished: number;
  readonly unchangedLayers: number;
  readonly fleetsChanged: number;
  readonly sandboxOperations: number;
  readonly planMs: number;
}

function planTimed(scenario: string, input: PlanInput): Outcome {
  const times: number[] = [];
  let plan: Plan | undefined;
  for (let run = 0; run < RUNS; run++) {
    const started = performance.now();
    plan = makePlan(input);
    times.push(performance.now() - started);
  }
  const changes = plan!.resource_changes;
  const layers = changes.filter((change) => change.type === 'layer');
  const fleets = changes.filter((change) => change.type === 'fleet' && change.action !== 'no-op');
  return {
    scenario,
    published: layers.filter((change) => change.action === 'create').map((change) => change.name),
    unpublished: layers.filter((change) => change.action === 'delete').length,
    unchangedLayers: layers.filter((change) => change.action === 'no-op').length,
    fleetsChanged: fleets.length,
    sandboxOperations: fleets.reduce((sum, change) => sum + (change.fleet?.operations.length ?? 0), 0),
    planMs: median(times),
  };
}

export function runReplan(settings: ReplanSettings): boolean {
  const before = declare(settings, { base: '1.0.0', toolkit: '1.0.0' });
  const { state, live } = applied(before);
  const input = (after: Declared): PlanInput => ({ config: after.config, state, live, layerDigests: after.digests, options: {} });
  // Untimed warm-up, so the first scenario does not pay for the JIT.
  for (let run = 0; run < 3; run++) makePlan(input(before));
  const outcomes = [
    planTimed('no change (control)', input(before)),
    planTimed('toolkit 1.0.0 -> 1.1.0', input(declare(settings, { base: '1.0.0', toolkit: '1.1.0' }))),
    planTimed('base 1.0.0 -> 1.1.0', input(declare(settings, { base: '1.1.0', toolkit: '1.0.0' }))),
  ];
  const rows = outcomes.map((outcome) => [
    outcome.scenario,
    `${outcome.published.length}${outcome.published.length > 0 ? ` (${outcome.published.join(', ')})` : ''}`,
    String(outcome.unpublished),
    String(outcome.unchangedLayers),
    String(outcome.fleetsChanged),
    String(outcome.sandboxOperations),
    `${fixed(outcome.planMs, 0)} ms`,
  ]);
  const upgrade = outcomes[1];
  const met = upgrade.published.length === 1 && outcomes[2].published.length === 1 && outcomes[0].published.length === 0;
  const layerCount = Object.keys(before.config.layers).length;
  process.stdout.write(
    [
      `layers-replan: ${settings.environments} environments (shared base + own workspace + shared toolkit), one fleet of ${settings.replicas} each ` +
        `(${settings.environments * settings.replicas} sandboxes), ${layerCount} layers, all applied; makePlan in-process, median of ${RUNS}`,
      '',
      table(['replan', 'layers published', 'unpublished', 'layers unchanged', 'fleets changed', 'sandbox operations', 'plan time'], rows),
      `  toolkit upgrade: ${upgrade.published.length} layer published (target: 1), ${upgrade.fleetsChanged} fleets replaced in batches, plan in ${fixed(upgrade.planMs, 0)} ms`,
      `\ntarget: ${met ? 'met' : 'NOT met'}\n`,
    ].join('\n'),
  );
  return met;
}

runWhenMain(import.meta.url, 'layers-replan', (argv) => runReplan(parseReplanArgs(argv)));
