/**
 * Placement alone: a burst of 32,000 sandbox specs placed one after another
 * over 160 simulated nodes of equal capacity (an admission policy on each, so
 * loads are ratios of allocatable), with density-placement's `placeOne` and
 * its overlay, in process, no I/O. Prints decisions per second (median of 5
 * runs) and the max/mean load over the nodes after placement, beside the same
 * burst placed without the overlay (every decision sees the nodes' stale
 * loads, as a placer that only reads what nodes report would).
 *
 *   npm run build && node dist/bench/placement.js
 *
 * Targets: over 50,000 decisions/s, max/mean under 1.1.
 */
import type { NodeInfo, SandboxSpec } from '../core/live.js';
import { DEFAULT_K, loadWith, placeOne, type PlacementOverlay } from '../plugins/density-placement/index.js';
import { median } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';

const NODES = 160;
const SANDBOXES = 32_000;
const RUNS = 5;
const TARGET_RATE = 50_000;
const TARGET_MAX_OVER_MEAN = 1.1;

function simulatedNodes(): NodeInfo[] {
  return Array.from({ length: NODES }, (_, index) => ({
    name: `node-${String(index).padStart(3, '0')}`,
    backends: ['container'],
    capacity: { cpu: 64, memoryMiB: 262_144 },
    sandboxes: 0,
    agentVersion: 'bench',
    pid: 0,
    // density-admission's defaults: CPU 20x, memory 1x, 512 MiB reserved.
    allocatable: { cpu: 1280, memoryMiB: 261_632 },
    requested: { cpu: 0, memoryMiB: 0 },
    address: `10.0.${index >> 8}.${index & 255}:7001`,
    labels: { zone: `z${index % 4}` },
    health: 'healthy',
  }));
}

function burst(): SandboxSpec[] {
  return Array.from({ length: SANDBOXES }, (_, index) => ({
    id: `rollout-${index.toString(36).padStart(8, '0')}`,
    backend: 'container',
    layers: [],
    env: {},
    workdir: '/',
    user: 'root',
    resources: { cpu: 1, memoryMiB: 1024, pids: 256 },
    network: 'none',
    qos: 'best-effort',
    labels: { 'dsec.io/fleet': 'rollout' },
  }));
}

/** max / mean of the nodes' loads (the larger of the CPU and memory ratios) once the burst is on them. */
function maxOverMean(nodes: readonly NodeInfo[], overlay: PlacementOverlay): number {
  const nothing = { resources: { cpu: 0, memoryMiB: 0, pids: 0 } };
  const loads = nodes.map((node) => loadWith(node, nothing, overlay));
  const mean = loads.reduce((sum, load) => sum + load, 0) / loads.length;
  return Math.max(...loads) / mean;
}

export function runPlacement(): boolean {
  const gc = (globalThis as { gc?: () => void }).gc;
  const specs = burst();
  const rates: number[] = [];
  const ratios: number[] = [];
  for (let run = 0; run < RUNS; run += 1) {
    gc?.();
    // A fresh nodes array per run, as the provider hands a fresh one per apply.
    const nodes = simulatedNodes();
    const overlay: PlacementOverlay = new Map();
    const start = performance.now();
    for (const spec of specs) {
      if (placeOne(spec, nodes, overlay, DEFAULT_K) === undefined) throw new Error('no node was chosen');
    }
    const seconds = (performance.now() - start) / 1000;
    rates.push(SANDBOXES / seconds);
    ratios.push(maxOverMean(nodes, overlay));
  }
  // The same burst without the overlay: the decisions are recorded apart, never seen by the next one.
  const nodes = simulatedNodes();
  const stale: PlacementOverlay = new Map();
  for (const spec of specs) {
    const chosen = placeOne(spec, nodes, new Map(), DEFAULT_K)!;
    const placed = stale.get(chosen) ?? { cpu: 0, memoryMiB: 0, sandboxes: 0 };
    stale.set(chosen, { cpu: placed.cpu + 1, memoryMiB: placed.memoryMiB + 1024, sandboxes: placed.sandboxes + 1 });
  }

  const rate = median(rates);
  const ratio = Math.max(...ratios);
  const met = rate > TARGET_RATE && ratio < TARGET_MAX_OVER_MEAN;
  const rows: [string, string][] = [
    ['scenario', `${SANDBOXES} sandboxes (1 CPU, 1 GiB) over ${NODES} equal nodes, spread, k = ${DEFAULT_K}`],
    ['decisions/s (median of 5)', `${Math.round(rate).toLocaleString('en-US')} (runs: ${rates.map((r) => Math.round(r / 1000)).join(', ')} thousand)`],
    ['max/mean load (worst of 5)', ratio.toFixed(3)],
    ['max/mean without the overlay', `${maxOverMean(nodes, stale).toFixed(3)} (each decision sees only the reported loads)`],
    [`target (> ${TARGET_RATE.toLocaleString('en-US')}/s, max/mean < ${TARGET_MAX_OVER_MEAN})`, met ? 'met' : 'MISSED'],
  ];
  const width = Math.max(...rows.map(([key]) => key.length));
  process.stdout.write(`placement${gc ? '' : ' (run with --expose-gc for steadier figures)'}\n`);
  for (const [key, value] of rows) process.stdout.write(`  ${key.padEnd(width)}  ${value}\n`);
  return met;
}

runWhenMain(import.meta.url, 'placement', () => runPlacement());
