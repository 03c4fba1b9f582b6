/**
 * CPU QoS: the per-step latency of a latency-sensitive task (a fixed
 * CPU-bound step, repeated, timed from inside its sandbox) measured
 *
 *   alone         nothing else runs
 *   QoS off       next to best-effort load, on an agent with density-qos
 *                 {enabled: false}: every sandbox under the normal scheduler
 *   QoS on        the same load on an agent with density-qos: best-effort
 *                 sandboxes run SCHED_IDLE in cpu.idle cgroups
 *
 * Two real agents (storage-local, backend-container, density-qos off / on),
 * each with one latency-sensitive sandbox and `--load` best-effort sandboxes
 * of 1 CPU each (4 on this 2-core machine: twice the cores). The load is a
 * shell busy loop started by an exec (so with QoS on it is SCHED_IDLE like
 * any exec of a best-effort sandbox) and stopped with `kill -9 -1` inside the
 * sandbox. The task is bench/lib/qos-step.c, built static into a layer: each
 * step sleeps `--think` ms (an agent waiting for its model), then spins a fixed
 * number of iterations calibrated to about `--step-ms` alone.
 *
 * Rounds interleave the three ways (the order rotates), so each sees the same
 * machine. Reported: median and p90 step latency per way, the inflation over
 * alone (latency under load / alone, within each round, then the median) and
 * the ratio of the inflations. Target: inflation with QoS on < half of off.
 *
 *   npm run build && node dist/bench/qos.js [--steps 40] [--rounds 3] [--load 4] [--step-ms 40] [--think 20]
 */
import { execFile } from 'node:child_process';
import { chmod, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { LayerRef, SandboxSpec } from '../core/live.js';
import { LayerAgent, PACKAGE_ROOT, refOf, sandboxSpec } from './lib/layer-agent.js';
import { checkAborted, makeWork, onInterrupt } from './lib/layer-fixture.js';
import { coreCount, fixed, median, table } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';

const execFileAsync = promisify(execFile);

export interface QosSettings {
  steps: number;
  rounds: number;
  load: number;
  stepMs: number;
  thinkMs: number;
}

const WAYS = ['alone', 'QoS off', 'QoS on'] as const;
type Way = (typeof WAYS)[number];

/** One way in one round: every step's latency in ms. */
type Round = Record<Way, number[]>;

const STEP_BINARY = '/usr/local/bin/qos-step';
const TASK = 'task';
const loadId = (index: number) => `load-${index}`;

function log(line: string): void {
  process.stderr.write(`qos: ${line}\n`);
}

export function parseQosArgs(argv: readonly string[]): QosSettings {
  const settings: QosSettings = { steps: 40, rounds: 3, load: 4, stepMs: 40, thinkMs: 20 };
  const keys: Record<string, keyof QosSettings> = { '--steps': 'steps', '--rounds': 'rounds', '--load': 'load', '--step-ms': 'stepMs', '--think': 'thinkMs' };
  for (let i = 0; i < argv.length; i += 2) {
    const key = keys[argv[i]];
    const value = Number(argv[i + 1]);
    if (!key || !Number.isInteger(value) || value < (key === 'thinkMs' ? 0 : 1)) {
      throw new Error(`usage: qos.js [--steps N] [--rounds N] [--load N] [--step-ms N] [--think N] (bad ${argv[i]} ${argv[i + 1] ?? ''})`);
    }
    settings[key] = value;
  }
  return settings;
}

/** Build the step program static, into a folder published as a layer. */
async function buildStepLayer(work: string): Promise<string> {
  const dir = path.join(work, 'step-layer');
  const bin = path.join(dir, STEP_BINARY);
  await mkdir(path.dirname(bin), { recursive: true });
  await execFileAsync('gcc', ['-O2', '-static', '-o', bin, path.join(PACKAGE_ROOT, 'bench/lib/qos-step.c')]);
  await chmod(bin, 0o755);
  return dir;
}

/** Iterations for about `stepMs` on this machine: the median of 5 steps of 10^7, on the host, alone. */
async function calibrate(work: string, stepMs: number): Promise<number> {
  const probe = 10_000_000;
  const { stdout } = await execFileAsync(path.join(work, 'step-layer', STEP_BINARY), ['5', String(probe), '0']);
  const microseconds = median(stdout.trim().split('\n').map(Number));
  return Math.max(1, Math.round((probe * stepMs * 1000) / microseconds));
}

function spec(id: string, layers: readonly LayerRef[], qos: SandboxSpec['qos']): SandboxSpec {
  // 1 CPU each: a single-threaded step is never throttled by its quota; the load gets one core per sandbox.
  return sandboxSpec(id, layers, {}, { resources: { cpu: 1, memoryMiB: 64, pids: 64 }, qos, labels: { bench: 'qos' } });
}

/** An agent with density-qos on or off (kept in `into` at once, so a failure later still disposes of it). */
async function startSide(work: string, qos: boolean, into: (agent: LayerAgent) => void): Promise<LayerAgent> {
  await mkdir(work, { recursive: true });
  const agent = await LayerAgent.start(work, [
    { name: 'storage-local', options: {} },
    { name: 'backend-container', options: {} },
    { name: 'density-qos', options: { enabled: qos } },
  ]);
  into(agent);
  return agent;
}

/** The task's sandbox and the load's, on the busybox base and the step program's layer. */
async function populate(agent: LayerAgent, settings: QosSettings, stepLayer: string): Promise<void> {
  const base = await agent.publish({ ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } });
  const step = await agent.publish({ ref: 'qos-step@1.0.0', name: 'qos-step', version: '1.0.0', kind: 'toolkit', source: { type: 'dir', path: stepLayer } });
  const layers = [refOf(base), refOf(step)];
  await agent.startReady(spec(TASK, layers, 'latency-sensitive'));
  for (let i = 0; i < settings.load; i++) await agent.startReady(spec(loadId(i), layers, 'best-effort'));
}

/** Busy loops in every load sandbox while `work` runs; stopped (and waited for) after it, even when it fails. */
async function underLoad<T>(agent: LayerAgent, settings: QosSettings, work: () => Promise<T>): Promise<T> {
  const ids = Array.from({ length: settings.load }, (_, i) => loadId(i));
  const loops = ids.map((id) =>
    agent.client.exec(id, { cmd: ['sh', '-c', 'while :; do :; done'], timeoutMs: 600_000 }).catch(() => undefined),
  );
  try {
    await new Promise((resolve) => setTimeout(resolve, 500)); // every loop scheduled before the first step
    return await work();
  } finally {
    for (const id of ids) await agent.client.exec(id, { cmd: ['kill', '-9', '-1'] }).catch(() => undefined);
    await Promise.all(loops);
  }
}

async function steps(agent: LayerAgent, settings: QosSettings, iterations: number): Promise<number[]> {
  const result = await agent.client.exec(TASK, {
    cmd: [STEP_BINARY, String(settings.steps), String(iterations), String(settings.thinkMs)],
    timeoutMs: 600_000,
  });
  if (result.exitCode !== 0) throw new Error(`qos-step exited ${result.exitCode ?? result.signal}: ${result.stderr}`);
  return result.stdout.trim().split('\n').map((line) => Number(line) / 1000);
}

export async function runQos(settings: QosSettings): Promise<boolean> {
  const work = await makeWork('qos');
  const removeHandler = onInterrupt('qos');
  const sides: { off?: LayerAgent; on?: LayerAgent } = {};
  const rounds: Round[] = [];
  let iterations = 0;
  try {
    const stepLayer = await buildStepLayer(work);
    iterations = await calibrate(work, settings.stepMs);
    log(`${iterations} iterations per step (about ${settings.stepMs} ms alone on the host)`);
    const off = await startSide(path.join(work, 'off'), false, (agent) => (sides.off = agent));
    const on = await startSide(path.join(work, 'on'), true, (agent) => (sides.on = agent));
    await populate(off, settings, stepLayer);
    await populate(on, settings, stepLayer);
    const run: Record<Way, () => Promise<number[]>> = {
      alone: () => steps(off, settings, iterations),
      'QoS off': () => underLoad(off, settings, () => steps(off, settings, iterations)),
      'QoS on': () => underLoad(on, settings, () => steps(on, settings, iterations)),
    };
    await steps(on, settings, iterations); // warm-up: page in the binary, settle the clocks
    for (let round = 0; round < settings.rounds; round++) {
      const results = {} as Round;
      for (const way of WAYS.map((_, i) => WAYS[(i + round) % WAYS.length])) {
        checkAborted();
        results[way] = await run[way]();
        log(`round ${round + 1}: ${way}: median ${fixed(median(results[way]), 1)} ms`);
      }
      rounds.push(results);
    }
  } catch (error) {
    for (const side of [sides.off, sides.on]) if (side) process.stderr.write(`qos: an agent's log ends with:\n${side.logTail()}\n`);
    throw error;
  } finally {
    removeHandler();
    for (const side of [sides.off, sides.on]) for (const problem of (await side?.dispose()) ?? []) log(`cleanup: ${problem}`);
    await execFileAsync('rm', ['-rf', '--one-file-system', work]).catch((error: Error) => log(`cleanup: ${error.message}`));
  }
  return report(rounds, settings);
}

function percentile(values: readonly number[], fraction: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)];
}

const signed = (value: number): string => `${value >= 0 ? '+' : ''}${fixed(value, 0)}`;

function report(rounds: readonly Round[], settings: QosSettings): boolean {
  const all = (way: Way) => rounds.flatMap((round) => round[way]);
  // Inflation within each round (the ways shared that round's machine), then the median over rounds.
  const inflation = (way: Way, pick: (values: number[]) => number) =>
    median(rounds.map((round) => pick(round[way]) / pick(round.alone)));
  const p90 = (values: number[]) => percentile(values, 0.9);
  const rows = WAYS.map((way) => [
    way,
    fixed(median(all(way)), 1),
    fixed(p90(all(way)), 1),
    way === 'alone' ? '1.00x' : `${fixed(inflation(way, median), 2)}x`,
    way === 'alone' ? '1.00x' : `${fixed(inflation(way, p90), 2)}x`,
    rounds.map((round) => fixed(median(round[way]), 1)).join(' / '),
  ]);
  const offMedian = inflation('QoS off', median);
  const onMedian = inflation('QoS on', median);
  const ratio = onMedian / offMedian;
  const ratioP90 = inflation('QoS on', p90) / inflation('QoS off', p90);
  const met = ratio < 0.5;
  const out = [
    `qos: ${settings.steps} steps of ~${settings.stepMs} ms CPU (after ${settings.thinkMs} ms of sleep each) in a latency-sensitive ` +
      `sandbox, alone and next to ${settings.load} best-effort sandboxes (1 CPU each) spinning, on ${coreCount()} cores; ` +
      `${settings.rounds} interleaved round(s)`,
    '',
    table(['way', 'median ms', 'p90 ms', 'inflation (median)', 'inflation (p90)', 'median per round'], rows),
    `  inflation with QoS on / with QoS off: ${fixed(ratio, 2)} on the median, ${fixed(ratioP90, 2)} on the p90   (target < 0.5)`,
    `  added latency over alone (median): QoS off ${signed((offMedian - 1) * 100)}%, QoS on ${signed((onMedian - 1) * 100)}%`,
    `\ntarget: ${met ? 'met' : 'NOT met'}\n`,
  ];
  process.stdout.write(out.join('\n'));
  return met;
}

runWhenMain(import.meta.url, 'qos', (argv) => runQos(parseQosArgs(argv)));
