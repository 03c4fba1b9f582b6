/**
 * FnCall throughput: invocations per second of a trivial task (`sh` running
 * `echo hi`) through a fleet's pool of N pre-created workers, beside the rate
 * of starting a fresh container per task, in one run on one real agent:
 *
 *   pool    POST /v1/functions/bench/invoke, N in flight: a free worker runs
 *           the task through its guest agent and is reset before the next
 *   fresh   per task: create a container sandbox (same layer, same limits),
 *           exec `sh -c 'echo hi'` in it, destroy it; N in flight
 *
 * Each round runs both sides, in an order that rotates from round to round,
 * so both see the same machine; figures are medians over the rounds, and the
 * ratio is taken within a round before the median. Every answer must be
 * `hi`. Target (the issue's): the pool at >= 10x the fresh-container rate.
 * Needs root, runc, overlayfs. Cleans up everything, even on failure or ^C.
 *
 *   npm run build && node dist/bench/fncall.js [--workers 4] [--tasks 400] [--fresh 24] [--rounds 5]
 */
import { mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { LABEL_FLEET, type FunctionResult, type LayerRef } from '../core/live.js';
import { LayerAgent, refOf, sandboxSpec } from './lib/layer-agent.js';
import { fixed, median, pool, table } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';

export interface FncallSettings {
  /** Workers in the pool, and tasks in flight on both sides. */
  workers: number;
  /** Invocations per round through the pool. */
  tasks: number;
  /** Fresh containers per round (each is a create, an exec and a destroy). */
  fresh: number;
  rounds: number;
}

export function parseFncallArgs(argv: readonly string[]): FncallSettings {
  const settings: FncallSettings = { workers: 4, tasks: 400, fresh: 24, rounds: 5 };
  const usage = 'usage: fncall [--workers N] [--tasks N] [--fresh N] [--rounds N]';
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i].replace(/^--/, '');
    const value = Number(argv[++i]);
    if (!['workers', 'tasks', 'fresh', 'rounds'].includes(key) || !Number.isInteger(value) || value < 1) throw new Error(usage);
    settings[key as keyof FncallSettings] = value;
  }
  return settings;
}

const FLEET = 'bench';
const TRIVIAL = { runtime: 'sh', code: 'echo hi' };
const RESOURCES = { cpu: 0.5, memoryMiB: 128, pids: 64 };

type Side = 'pool' | 'fresh';

interface SideRound {
  /** Tasks per second. */
  readonly rate: number;
  /** Median time of one task, from the caller's side (ms). */
  readonly latencyMs: number;
}

export async function runFncall(settings: FncallSettings): Promise<boolean> {
  const work = await realpath(await mkdtemp(path.join(tmpdir(), 'dsec-bench-fncall-')));
  let agent: LayerAgent | undefined;
  let interrupted = false;
  const onSignal = () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    process.stderr.write('fncall: interrupted; finishing the step in flight, then cleaning up (^C again to leave things behind)\n');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const rounds: Record<Side, SideRound>[] = [];
  try {
    agent = await LayerAgent.start(work, [
      { name: 'storage-local', options: {} },
      { name: 'backend-container', options: {} },
      { name: 'backend-fncall', options: {} },
    ]);
    const layer = refOf(await agent.publish({ ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } }));
    const started = agent;
    // The pool, made once (as apply would): its workers serve every round.
    await pool(settings.workers, settings.workers, async (index) => {
      const spec = sandboxSpec(`${FLEET}-${index}`, [layer], { [LABEL_FLEET]: FLEET }, { backend: 'fncall', resources: RESOURCES });
      const info = await started.client.createSandbox(spec);
      if (info.status !== 'running') throw new Error(`worker ${spec.id} is ${info.status}: ${info.error ?? ''}`);
    });
    // Warm-up, untimed: every worker runs a task, and one fresh container comes and goes.
    await runPool(started, settings.workers, settings.workers);
    await runFresh(started, layer, 1, 1, 'warm');

    const sides: Side[] = ['pool', 'fresh'];
    for (let round = 0; round < settings.rounds; round++) {
      const results = {} as Record<Side, SideRound>;
      for (const side of sides.map((_, i) => sides[(i + round) % sides.length])) {
        if (interrupted) throw new Error('interrupted');
        results[side] = side === 'pool' ? await runPool(started, settings.tasks, settings.workers) : await runFresh(started, layer, settings.fresh, settings.workers, `r${round}`);
      }
      rounds.push(results);
      process.stderr.write(`fncall: round ${round + 1}/${settings.rounds} done\n`);
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    const problems = agent ? await agent.dispose() : [];
    await rm(work, { recursive: true, force: true }).catch((error: Error) => problems.push(`removing ${work}: ${error.message}`));
    for (const problem of problems) process.stderr.write(`fncall: cleanup: ${problem}\n`);
  }
  return report(rounds, settings);
}

/** `count` trivial tasks through the pool, `parallel` in flight. */
async function runPool(agent: LayerAgent, count: number, parallel: number): Promise<SideRound> {
  const latencies: number[] = [];
  const seconds = await pool(count, parallel, async () => {
    const started = performance.now();
    const result: FunctionResult = await agent.client.invokeFunction(FLEET, TRIVIAL);
    latencies.push(performance.now() - started);
    if (result.exitCode !== 0 || result.stdout !== 'hi\n') throw new Error(`a pooled task answered ${JSON.stringify(result)}`);
  });
  return { rate: count / seconds, latencyMs: median(latencies) };
}

/** `count` tasks each in a fresh container sandbox (create, exec, destroy), `parallel` in flight. */
async function runFresh(agent: LayerAgent, layer: LayerRef, count: number, parallel: number, tag: string): Promise<SideRound> {
  const latencies: number[] = [];
  const seconds = await pool(count, parallel, async (index) => {
    const id = `fresh-${tag}-${index}`;
    const started = performance.now();
    await agent.client.createSandbox(sandboxSpec(id, [layer], {}, { resources: RESOURCES }));
    try {
      const result = await agent.client.exec(id, { cmd: ['sh', '-c', TRIVIAL.code], timeoutMs: 30_000 });
      if (result.exitCode !== 0 || result.stdout !== 'hi\n') throw new Error(`the fresh container's task answered ${JSON.stringify(result)}`);
    } finally {
      await agent.client.destroySandbox(id);
    }
    latencies.push(performance.now() - started);
  });
  return { rate: count / seconds, latencyMs: median(latencies) };
}

function report(rounds: readonly Record<Side, SideRound>[], settings: FncallSettings): boolean {
  const ratios = rounds.map((round) => round.pool.rate / round.fresh.rate);
  const row = (side: Side, label: string) => [
    label,
    ...rounds.map((round) => fixed(round[side].rate, 0)),
    fixed(median(rounds.map((round) => round[side].rate)), 1),
    fixed(median(rounds.map((round) => round[side].latencyMs)), 1),
  ];
  const header = ['side', ...rounds.map((_, index) => `r${index + 1}/s`), 'median/s', 'task ms'];
  process.stdout.write(
    `FnCall: ${settings.workers} workers (${settings.workers} tasks in flight on both sides), ${settings.tasks} pooled and ${settings.fresh} fresh tasks per round, ${rounds.length} rounds\n\n`,
  );
  process.stdout.write(
    table(header, [
      row('pool', 'pool (invoke)'),
      row('fresh', 'fresh container'),
      ['pool / fresh', ...ratios.map((ratio) => `${fixed(ratio, 1)}x`), `${fixed(median(ratios), 1)}x`, ''],
    ]),
  );
  const met = median(ratios) >= 10;
  process.stdout.write(`\ntarget: the pool runs a trivial task at >= 10x the fresh-container rate: ${met ? 'met' : 'NOT met'} (${fixed(median(ratios), 1)}x)\n`);
  return met;
}

runWhenMain(import.meta.url, 'fncall', (argv) => runFncall(parseFncallArgs(argv)));
