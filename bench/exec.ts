/**
 * Exec latency and throughput: `exec(id, ['true'])` through the SDK
 * (`connect({ dir })`'s DsecClient, the project's local agent, the sandbox's
 * exec server as PID 1 over its FIFOs), beside `runc exec <container> true`
 * on the same sandboxes in the same run (the runtime alone: the old path
 * cost this plus the agent's wrapper), with few and with many idle
 * sandboxes on the node:
 *
 *   latency     sequential calls, round-robin over 10 sandboxes, in blocks
 *               that alternate the two sides; median, p90, p99
 *   throughput  64 callers over 16 sandboxes, a fixed number of calls per
 *               side, sides in rotating order; execs/s
 *
 * Levels: first 10 sandboxes on the node (latency), then 16 (throughput),
 * then a fleet of N idle ones more (`--idle`, default 2000; both again), then
 * the idle fleet deleted and both once more at 10 and 16 (A-B-A: a machine
 * whose load drifted shows, and the few-sandbox figures pool both passes). All
 * are busybox container sandboxes of the smallest memory the backend takes
 * (32 MiB), 0.05 CPU, made by `dsec apply` of one project; the project's
 * density-admission overcommit is raised so N fit. Targets (the issue's):
 * median <= 5 ms at 10, at N no more than 1.5x that; >= 500 execs/s.
 * Cleans up everything, even on failure or ^C.
 *
 *   npm run build && node dist/bench/exec.js [--idle 2000] [--calls 300] [--runc-calls 100]
 *     [--tput-calls 2000] [--runc-tput-calls 192] [--callers 64] [--parallel 16] [--qos best-effort]
 */
import { containerId } from '../plugins/backend-container/index.js';
import { findRuntime, runRuntime, type Runtime } from '../plugins/backend-container/runtime.js';
import type { DsecClient } from '../core/sdk/index.js';
import { LABEL_FLEET } from '../core/live.js';
import { loadAverage, machineLine, ms, parseFlags, summarize, timedCalls, type Summary } from './lib/latency.js';
import { fixed, median, table } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';
import { admissionFor, interruptible, SdkProject } from './lib/sdk-project.js';

const DEFAULTS = { idle: 2000, calls: 300, runcCalls: 100, tputCalls: 2000, runcTputCalls: 192, callers: 64, parallel: 16, blocks: 5, rounds: 2, qos: 'best-effort' };
export type ExecSettings = typeof DEFAULTS;
const USAGE =
  'usage: exec [--idle N] [--calls N] [--runc-calls N] [--tput-calls N] [--runc-tput-calls N] [--callers N] [--parallel N] [--blocks N] [--rounds N] [--qos best-effort|latency-sensitive]';

/** Latency targets first, then throughput: 10 and 16 of the fleet `bench`. */
const LATENCY_TARGETS = 10;
const TPUT_TARGETS = 16;
const CPU = 0.05;
const MEMORY_MIB = 32;

type Side = 'sdk' | 'runc';
const SIDES: readonly Side[] = ['sdk', 'runc'];
const SIDE_NAME: Record<Side, string> = { sdk: 'SDK exec', runc: 'runc exec' };

interface Target {
  readonly id: string;
  readonly cid: string;
}

interface Level {
  /** Sandboxes on the node when measured. */
  readonly latencyAt: number;
  readonly tputAt: number;
  readonly latency: Record<Side, Summary>;
  readonly samples: Record<Side, number[]>;
  /** The exec server's own durationMs for the SDK calls (median). */
  readonly serverMs: number;
  /** Execs per second, per round. */
  readonly tput: Record<Side, number[]>;
  readonly tputLatency: Record<Side, Summary>;
}

function projectYaml(settings: ExecSettings, bench: number, idle: number): string {
  const fleet = (name: string, replicas: number) =>
    `  ${name}:\n    environment: shell\n    backend: container\n    replicas: ${replicas}\n    qos: ${settings.qos}\n` +
    `    resources: { cpu: ${CPU}, memory: ${MEMORY_MIB}Mi, pids: 64 }\n`;
  return (
    `# written by bench/exec\nversion: 1\nprovider:\n  local: {}\n${admissionFor(settings.idle + TPUT_TARGETS, CPU, MEMORY_MIB)}` +
    `layers:\n  base:\n    kind: base\n    version: 1.0.0\n    source:\n      busybox: {}\nenvironments:\n  shell:\n    layers: [base]\n` +
    `fleets:\n${fleet('bench', bench)}${idle > 0 ? fleet('idle', idle) : ''}`
  );
}

export async function runExec(settings: ExecSettings): Promise<boolean> {
  if (!['best-effort', 'latency-sensitive'].includes(settings.qos)) throw new Error(USAGE);
  const runtime = findRuntime('runc');
  const guard = interruptible('exec');
  const project = await SdkProject.create('exec');
  const levels: Level[] = [];
  const setup: string[][] = [];
  let problems: string[] = [];
  let cleanupSeconds = 0;
  process.stdout.write(`machine: ${machineLine()}\n`);
  try {
    const step = async (what: string, bench: number, idle: number) => {
      guard.check();
      const load = loadAverage();
      const timing = await project.apply(projectYaml(settings, bench, idle), settings.parallel);
      setup.push([what, fixed(timing.whole, 1), fixed(timing.done / timing.whole, 1), load, loadAverage()]);
      process.stderr.write(`exec: ${what}: ${fixed(timing.whole, 1)} s\n`);
    };
    await step(`${LATENCY_TARGETS} sandboxes (fleet bench)`, LATENCY_TARGETS, 0);
    const dsec = await project.connect();
    const small = await measureLevel(dsec, runtime, project, settings, async () => step(`+${TPUT_TARGETS - LATENCY_TARGETS} (fleet bench to ${TPUT_TARGETS})`, TPUT_TARGETS, 0), guard.check);
    levels.push(small);
    await step(`${settings.idle} idle sandboxes (fleet idle)`, TPUT_TARGETS, settings.idle);
    levels.push(await measureLevel(dsec, runtime, project, settings, async () => undefined, guard.check));
    // And back (A-B-A): the few-sandbox figures again, so a machine whose load drifted meanwhile shows.
    await step(`idle fleet deleted, fleet bench to ${LATENCY_TARGETS}`, LATENCY_TARGETS, 0);
    levels.push(await measureLevel(dsec, runtime, project, settings, async () => step(`+${TPUT_TARGETS - LATENCY_TARGETS} (fleet bench to ${TPUT_TARGETS})`, TPUT_TARGETS, 0), guard.check));
  } finally {
    guard.dispose();
    const started = performance.now();
    problems = await project.dispose(settings.parallel);
    cleanupSeconds = (performance.now() - started) / 1000;
    for (const problem of problems) process.stderr.write(`exec: cleanup: ${problem}\n`);
  }
  return report(settings, levels, setup, cleanupSeconds);
}

/** Latency over the first 10 of fleet bench, then `grow` (to 16), then throughput over 16. */
async function measureLevel(dsec: DsecClient, runtime: Runtime, project: SdkProject, settings: ExecSettings, grow: () => Promise<void>, check: () => void): Promise<Level> {
  const targetsNow = async () => {
    const list = await dsec.list({ labels: { [LABEL_FLEET]: 'bench' } });
    const ids = list.filter((sandbox) => sandbox.status === 'running').map((sandbox) => sandbox.id).sort();
    return ids.map((id): Target => ({ id, cid: containerId(project.agentRoot, id) }));
  };
  const serverMs: number[] = [];
  const call: Record<Side, (target: Target) => Promise<void>> = {
    sdk: async (target) => {
      const result = await dsec.exec(target.id, ['true']);
      if (result.exitCode !== 0) throw new Error(`exec true in ${target.id} answered ${JSON.stringify(result)}`);
      serverMs.push(result.durationMs);
    },
    runc: async (target) => {
      const result = await runRuntime(runtime, ['exec', target.cid, 'true']);
      if (result.code !== 0) throw new Error(`runc exec ${target.cid} true exited ${result.code ?? result.signal}: ${result.stderr.trim()}`);
    },
  };
  const onNode = async () => (await dsec.list()).length;

  const latencyTargets = (await targetsNow()).slice(0, LATENCY_TARGETS);
  if (latencyTargets.length < LATENCY_TARGETS) throw new Error(`fleet bench has ${latencyTargets.length} running sandboxes, not ${LATENCY_TARGETS}`);
  const latencyAt = await onNode();
  // Warm-up, untimed: every target answers on both sides (the agent opens its channel to each exec server).
  for (const side of SIDES) for (const target of latencyTargets) await call[side](target);
  serverMs.length = 0;
  const latencies: Record<Side, number[]> = { sdk: [], runc: [] };
  const perBlock: Record<Side, number> = { sdk: Math.ceil(settings.calls / settings.blocks), runc: Math.ceil(settings.runcCalls / settings.blocks) };
  for (let block = 0; block < settings.blocks; block++) {
    for (const side of block % 2 === 0 ? SIDES : [...SIDES].reverse()) {
      check();
      const { latencies: got } = await timedCalls(perBlock[side], 1, (index) => call[side](latencyTargets[(block * perBlock[side] + index) % latencyTargets.length]));
      latencies[side].push(...got);
    }
  }
  const sdkServerMs = median(serverMs);

  await grow();
  const tputTargets = (await targetsNow()).slice(0, TPUT_TARGETS);
  if (tputTargets.length < TPUT_TARGETS) throw new Error(`fleet bench has ${tputTargets.length} running sandboxes, not ${TPUT_TARGETS}`);
  const tputAt = await onNode();
  for (const target of tputTargets) await call.sdk(target);
  const tput: Record<Side, number[]> = { sdk: [], runc: [] };
  const tputLatencies: Record<Side, number[]> = { sdk: [], runc: [] };
  const counts: Record<Side, number> = { sdk: settings.tputCalls, runc: settings.runcTputCalls };
  for (let round = 0; round < settings.rounds; round++) {
    for (const side of round % 2 === 0 ? SIDES : [...SIDES].reverse()) {
      check();
      const { latencies: got, seconds } = await timedCalls(counts[side], settings.callers, (index) => call[side](tputTargets[index % tputTargets.length]));
      tput[side].push(counts[side] / seconds);
      tputLatencies[side].push(...got);
      process.stderr.write(`exec: ${tputAt} on the node, ${SIDE_NAME[side]} throughput round ${round + 1}: ${fixed(counts[side] / seconds, 0)}/s\n`);
    }
  }
  return {
    latencyAt,
    tputAt,
    latency: { sdk: summarize(latencies.sdk), runc: summarize(latencies.runc) },
    samples: latencies,
    serverMs: sdkServerMs,
    tput,
    tputLatency: { sdk: summarize(tputLatencies.sdk), runc: summarize(tputLatencies.runc) },
  };
}

function report(settings: ExecSettings, levels: readonly Level[], setup: readonly string[][], cleanupSeconds: number): boolean {
  const out = (text: string) => process.stdout.write(text);
  out(`\nexec of \`true\` in busybox container sandboxes (${MEMORY_MIB} MiB, ${CPU} CPU, ${settings.qos}), SDK connect({dir}) beside runc exec on the same sandboxes\n\n`);
  out(`setting up (dsec apply, parallelism ${settings.parallel}; the first step starts the agent and publishes the layer)\n`);
  out(table(['step', 'seconds', 'sandboxes/s', 'load before', 'load after'], setup));
  out(`  cleanup (pools deleted, every sandbox destroyed, agent stopped): ${fixed(cleanupSeconds, 1)} s\n`);
  if (levels.length === 0) return false;
  // Few, many, few again (A-B-A): the few-sandbox figures pool both passes.
  const name = (index: number) => `${levels[index].latencyAt}${index === 0 ? ' (before)' : index === 2 ? ' (after)' : ''}`;
  const lows = levels.filter((_, index) => index !== 1);
  const lowSummary = (side: Side) => summarize(lows.flatMap((level) => level.samples[side]));
  const high = levels[1];

  out(`\nlatency, ms: one call at a time, round-robin over ${LATENCY_TARGETS} sandboxes, ${settings.blocks} blocks alternating the sides\n`);
  const row = (label: string, side: Side, summary: Summary, server: string) => [label, SIDE_NAME[side], String(summary.count), ms(summary.median), ms(summary.p90), ms(summary.p99), ms(summary.max), server];
  const latencyRows = levels.flatMap((level, index) => SIDES.map((side) => row(name(index), side, level.latency[side], side === 'sdk' ? ms(level.serverMs) : '')));
  if (lows.length === 2) latencyRows.push(...SIDES.map((side) => row(`${LATENCY_TARGETS}, both passes`, side, lowSummary(side), '')));
  out(table(['sandboxes on the node', 'side', 'calls', 'median', 'p90', 'p99', 'max', 'server-side median'], latencyRows));
  const growth = (side: Side) => (high ? high.latency[side].median / lowSummary(side).median : Number.NaN);
  out(`  runc exec / SDK exec, median: ${levels.map((level, index) => `${fixed(level.latency.runc.median / level.latency.sdk.median, 1)}x at ${name(index)}`).join(', ')}\n`);
  if (high) out(`  at ${high.latencyAt} / at ${LATENCY_TARGETS} (both passes), median: SDK exec ${fixed(growth('sdk'), 2)}x, runc exec ${fixed(growth('runc'), 2)}x\n`);

  out(`\nthroughput: ${settings.callers} callers over ${TPUT_TARGETS} sandboxes; ${settings.tputCalls} SDK calls and ${settings.runcTputCalls} runc calls per round, ${settings.rounds} rounds in rotating order\n`);
  const rounds = Array.from({ length: settings.rounds }, (_, index) => `r${index + 1}/s`);
  const tputName = (index: number) => `${levels[index].tputAt}${index === 0 ? ' (before)' : index === 2 ? ' (after)' : ''}`;
  const tputRows = levels.flatMap((level, index) => [
    ...SIDES.map((side) => [
      tputName(index),
      SIDE_NAME[side],
      ...level.tput[side].map((rate) => fixed(rate, 0)),
      fixed(median(level.tput[side]), 0),
      ms(level.tputLatency[side].median),
      ms(level.tputLatency[side].p99),
    ]),
    [tputName(index), 'SDK / runc', ...level.tput.sdk.map((rate, round) => `${fixed(rate / level.tput.runc[round], 1)}x`), `${fixed(median(level.tput.sdk) / median(level.tput.runc), 1)}x`, '', ''],
  ]);
  out(table(['sandboxes on the node', 'side', ...rounds, 'median/s', 'call median ms', 'call p99 ms'], tputRows));

  const lowMedian = lowSummary('sdk').median;
  const checks: [string, boolean, string][] = [
    [`SDK exec median at ${LATENCY_TARGETS} <= 5 ms`, lowMedian <= 5, `${ms(lowMedian)} ms`],
    ...(high ? [[`SDK exec median at ${high.latencyAt} <= 1.5x at ${LATENCY_TARGETS}`, growth('sdk') <= 1.5, `${fixed(growth('sdk'), 2)}x, ${ms(high.latency.sdk.median)} ms`] as [string, boolean, string]] : []),
    ...levels.map((level, index): [string, boolean, string] => [`SDK throughput at ${tputName(index)} >= 500/s`, median(level.tput.sdk) >= 500, `${fixed(median(level.tput.sdk), 0)}/s`]),
  ];
  out('\ntargets\n');
  out(table(['', 'met', 'figure'], checks.map(([what, met, figure]) => [what, met ? 'met' : 'NOT met', figure])));
  out(`  load average at the end: ${loadAverage()}\n`);
  return levels.length === 3 && checks.every(([, met]) => met);
}

runWhenMain(import.meta.url, 'exec', (argv) => runExec(parseFlags(argv, DEFAULTS, USAGE)), { exit: true });
