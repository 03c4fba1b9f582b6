/**
 * Plan at scale: 1,000 fleets x 100 replicas = 100,000 sandboxes, a live view
 * and a state that match except for 1% drift (a third missing, a third built
 * from an outdated spec, a third failed). Times makePlan, renderPlan and
 * planToJson (median of 5 runs), reports peak RSS and heap, and says whether
 * the target (< 2 s, < 1 GiB) was met.
 *
 *   npm run build && node --expose-gc dist/bench/plan-scale.js
 */
import { LABEL_FLEET, LABEL_LINEAGE, LABEL_SPEC, type LiveView, type SandboxInfo } from '../core/live.js';
import type { EnvironmentModel, FleetModel, LayerModel } from '../core/model.js';
import type { FleetState, PlanInput, SandboxState, StateFile } from '../core/plan.js';
import { resolveFleet } from '../core/engine/fleet-attributes.js';
import { makePlan } from '../core/engine/planner.js';
import { planToJson, renderPlan } from '../core/engine/render.js';
import { benchConfig, benchFleet } from './lib/model.js';
import { runWhenMain } from './lib/main.js';

const FLEETS = 1_000;
const REPLICAS = 100;
const ENVIRONMENTS = 50;
const TOOLKITS = 20;
const RUNS = 5;
const TARGET_MS = 2_000;
const TARGET_BYTES = 1024 ** 3;
const LINEAGE = 'bench-lineage';

/**
 * Which sandboxes drift: one in each fleet of 100 (1%), so every fleet has a
 * change to plan and render; the kind rotates from fleet to fleet.
 */
const drift = (index: number): 'missing' | 'outdated' | 'failed' | undefined =>
  index % REPLICAS === 7 ? (['missing', 'outdated', 'failed'] as const)[Math.floor(index / REPLICAS) % 3] : undefined;

function buildScenario(): PlanInput {
  const layers: Record<string, LayerModel> = {};
  const digests: Record<string, string> = {};
  const addLayer = (name: string, kind: LayerModel['kind']): string => {
    const ref = `${name}@1.0.0`;
    layers[name] = { ref, name, version: '1.0.0', kind, source: { type: 'dir', path: `/layers/${name}` } };
    digests[ref] = `sha256:${name.padEnd(64, '0')}`;
    return ref;
  };
  const base = addLayer('base', 'base');
  const toolkits = Array.from({ length: TOOLKITS }, (_, index) => addLayer(`toolkit${index}`, 'toolkit'));
  const environments: Record<string, EnvironmentModel> = {};
  for (let index = 0; index < ENVIRONMENTS; index += 1) {
    const name = `env${index}`;
    environments[name] = {
      name,
      layers: [base, addLayer(`workspace${index}`, 'workspace'), toolkits[index % TOOLKITS]],
      env: { TASK: name },
      workdir: '/work',
      user: 'root',
    };
  }
  const fleets: Record<string, FleetModel> = {};
  for (let index = 0; index < FLEETS; index += 1) {
    const name = `fleet${String(index).padStart(4, '0')}`;
    fleets[name] = benchFleet(name, `env${index % ENVIRONMENTS}`, REPLICAS, 10);
  }
  const config = benchConfig(layers, environments, fleets);

  const resources: Record<string, StateFile['resources'][string]> = {};
  for (const layer of Object.values(layers)) {
    resources[`layer.${layer.ref}`] = {
      type: 'layer',
      name: layer.name,
      version: layer.version,
      kind: layer.kind,
      digest: digests[layer.ref],
    };
  }
  const sandboxes: SandboxInfo[] = [];
  let counter = 0;
  for (const fleet of Object.values(fleets)) {
    const attributes = resolveFleet(config, fleet, digests);
    const recorded: Record<string, SandboxState> = {};
    for (let replica = 0; replica < REPLICAS; replica += 1) {
      const index = counter++;
      const id = `${fleet.name}-${index.toString(36).padStart(8, '0')}`;
      const createdAt = new Date(1_700_000_000_000 + index * 1000).toISOString();
      recorded[id] = { id, node: 'node-1', specHash: attributes.specHash, resources: fleet.resources, createdAt };
      const kind = drift(index);
      if (kind === 'missing') continue;
      sandboxes.push({
        id,
        node: 'node-1',
        backend: fleet.backend,
        status: kind === 'failed' ? 'failed' : 'running',
        labels: {
          team: 'rl',
          [LABEL_LINEAGE]: LINEAGE,
          [LABEL_FLEET]: fleet.name,
          [LABEL_SPEC]: kind === 'outdated' ? 'an-older-spec' : attributes.specHash,
        },
        resources: fleet.resources,
        layers: attributes.layers,
        createdAt,
        ...(kind === 'failed' ? { error: 'oom-killed' } : {}),
      });
    }
    resources[`fleet.${fleet.name}`] = {
      type: 'fleet',
      name: fleet.name,
      attributes,
      sandboxes: recorded,
    } satisfies FleetState;
  }
  const state: StateFile = { format_version: 1, lineage: LINEAGE, serial: 42, dsec_version: 'bench', resources };
  const live: LiveView = {
    nodes: [],
    layers: Object.values(layers).map((layer) => ({
      name: layer.name,
      version: layer.version,
      kind: layer.kind,
      digest: digests[layer.ref],
      sizeBytes: 0,
      files: 0,
      publishedAt: '',
    })),
    sandboxes,
  };
  return { config, state, live, layerDigests: digests, options: {} };
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const mib = (bytes: number): string => `${(bytes / 1024 ** 2).toFixed(0)} MiB`;
const ms = (value: number): string => `${value.toFixed(0)} ms`;

export function runPlanScale(): boolean {
  const gc = (globalThis as { gc?: () => void }).gc;
  const input = buildScenario();
  const timings = {
    makePlan: [] as number[],
    renderPlan: [] as number[],
    planToJson: [] as number[],
    total: [] as number[],
  };
  let peakHeap = 0;
  let summary = '';
  for (let run = 0; run < RUNS; run += 1) {
    gc?.();
    const start = performance.now();
    const plan = makePlan(input);
    const planned = performance.now();
    const text = renderPlan(plan, { color: false });
    const rendered = performance.now();
    const json = JSON.stringify(planToJson(plan));
    const end = performance.now();
    timings.makePlan.push(planned - start);
    timings.renderPlan.push(rendered - planned);
    timings.planToJson.push(end - rendered);
    timings.total.push(end - start);
    peakHeap = Math.max(peakHeap, process.memoryUsage().heapUsed);
    summary = `${text
      .trimEnd()
      .split('\n')
      .find((line) => line.startsWith('Plan:'))} (${json.length} bytes of JSON)`;
    const ops = plan.resource_changes.reduce((n, change) => n + (change.fleet?.operations.length ?? 0), 0);
    if (run === 0) summary += `, ${ops} sandbox operations`;
  }
  const peakRss = process.resourceUsage().maxRSS * 1024;
  const total = median(timings.total);
  const met = total < TARGET_MS && peakRss < TARGET_BYTES;
  const rows: [string, string][] = [
    ['scenario', `${FLEETS} fleets x ${REPLICAS} = ${FLEETS * REPLICAS} sandboxes, 1% drift`],
    ['makePlan (median)', ms(median(timings.makePlan))],
    ['renderPlan (median)', ms(median(timings.renderPlan))],
    ['planToJson + stringify (median)', ms(median(timings.planToJson))],
    ['total (median of 5)', ms(total)],
    ['peak RSS', mib(peakRss)],
    ['peak heap used', mib(peakHeap)],
    ['plan', summary],
    ['target (< 2 s, < 1 GiB)', met ? 'met' : 'MISSED'],
  ];
  const width = Math.max(...rows.map(([key]) => key.length));
  process.stdout.write(`plan-scale${gc ? '' : ' (run with --expose-gc for steadier figures)'}\n`);
  for (const [key, value] of rows) process.stdout.write(`  ${key.padEnd(width)}  ${value}\n`);
  return met;
}

runWhenMain(import.meta.url, 'plan-scale', () => runPlanScale());
