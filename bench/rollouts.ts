/**
 * SWE-style rollouts through the SDK (`connect({ dir })`), as an RL harness
 * runs them: N concurrent rollouts (default 32), each slot running
 * `--waves` of them one after the other, on container sandboxes of a
 * fleet's warm pool (`--replicas`, default 32) stacked on a real Debian 12
 * base layer with python3 and pytest (built once with debootstrap into
 * /var/cache/dsec-bench, bench/lib/debian-base.ts) and a workspace layer
 * holding a small Python package with a bug (bench/lib/swe-task.ts).
 *
 * One rollout: acquire from the pool; open a session; 14 commands
 * (cd, ls, cat, find, grep, export, python3 -c, pytest failing as it should
 * before the patch, ...); the patch (writeFile of the fixed source); 6 more
 * commands; pytest with a JUnit report (exit 0); readFile of the report (every
 * test passed); release (recycled). Every answer is checked: a rollout whose
 * tests do not pass after its patch, or any step that answers wrongly, is a
 * failed rollout, reported.
 *
 * Reported: rollouts per minute; per kind of call, the wall time the caller
 * saw and the command's own duration the exec server reports (durationMs),
 * so the share of wall time spent in dsec rather than in the commands is
 * sum(wall - duration) / sum(wall) over every call (a call without a command,
 * acquire, writeFile, readFile, release, is all dsec); the pool size, the
 * machine's cores and load. One rollout alone (the warm-up) is shown too.
 * Cleans up everything, even on failure or ^C; the Debian tree stays cached.
 *
 *   npm run build && node dist/bench/rollouts.js [--rollouts 32] [--waves 2] [--replicas 32] [--parallel 16]
 */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import type { SessionRunResult } from '../core/live-process.js';
import type { DsecClient } from '../core/sdk/index.js';
import { debianBase } from './lib/debian-base.js';
import { loadAverage, machineLine, ms, parseFlags } from './lib/latency.js';
import { coreCount, fixed, median, table } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';
import { admissionFor, interruptible, SdkProject } from './lib/sdk-project.js';
import { AFTER_PATCH, BEFORE_PATCH, checkReport, FIXED_STATS, PATCHED_FILE, PYTEST, REPORT_FILE, writeWorkspace, type Step } from './lib/swe-task.js';

const DEFAULTS = { rollouts: 32, waves: 2, replicas: 32, parallel: 16 };
export type RolloutSettings = typeof DEFAULTS;
const USAGE = 'usage: rollouts [--rollouts N] [--waves N] [--replicas N] [--parallel N]';
const FLEET = 'swe';
const RESOURCES = { cpu: 1, memoryMiB: 256, pids: 256 };
const KINDS = ['acquire', 'session', 'command', 'writeFile', 'pytest', 'readFile', 'release'] as const;
type Kind = (typeof KINDS)[number];
const KIND_NAME: Record<Kind, string> = {
  acquire: 'acquire',
  session: 'session (open)',
  command: `session.run, ${BEFORE_PATCH.length + AFTER_PATCH.length} commands`,
  writeFile: 'writeFile (the patch)',
  pytest: 'session.run, final pytest',
  readFile: 'readFile (the report)',
  release: 'release',
};

interface Call {
  readonly kind: Kind;
  readonly wallMs: number;
  /** The command's own duration, as the exec server reports it (0 for calls that run none). */
  readonly serverMs: number;
}

interface Rollout {
  readonly problem?: string;
  readonly seconds: number;
  readonly calls: readonly Call[];
}

function projectYaml(settings: RolloutSettings, basePath: string, workspacePath: string): string {
  return (
    `# written by bench/rollouts\nversion: 1\nprovider:\n  local: {}\n` +
    admissionFor(settings.replicas + settings.rollouts + 1, RESOURCES.cpu, RESOURCES.memoryMiB) +
    `layers:\n  debian:\n    kind: base\n    version: 12.0.0\n    source:\n      dir: ${JSON.stringify(basePath)}\n` +
    `  calc:\n    kind: workspace\n    version: 0.1.0\n    source:\n      dir: ${JSON.stringify(workspacePath)}\n` +
    `environments:\n  swe:\n    layers: [debian, calc]\n    env:\n      LANG: C.UTF-8\n` +
    `fleets:\n  ${FLEET}:\n    environment: swe\n    backend: container\n    replicas: ${settings.replicas}\n` +
    `    resources: { cpu: ${RESOURCES.cpu}, memory: ${RESOURCES.memoryMiB}Mi, pids: ${RESOURCES.pids} }\n`
  );
}

export async function runRollouts(settings: RolloutSettings): Promise<boolean> {
  const guard = interruptible('rollouts');
  process.stdout.write(`machine: ${machineLine()}\n`);
  const base = await debianBase({ progress: (line) => process.stderr.write(`rollouts: ${line}\n`) });
  const project = await SdkProject.create('rollouts');
  const rollouts: Rollout[] = [];
  let alone: Rollout | undefined;
  let applySeconds = 0;
  let phaseSeconds = 0;
  const load: string[] = [];
  try {
    const workspace = path.join(project.work, 'workspace');
    await mkdir(workspace);
    await writeWorkspace(workspace);
    const applied = await project.apply(projectYaml(settings, base.path, workspace), settings.parallel);
    applySeconds = applied.whole;
    process.stderr.write(`rollouts: layers published and ${settings.replicas} sandboxes made in ${fixed(applySeconds, 1)} s\n`);
    const dsec = await project.connect();
    // Warm-up, untimed in the totals: one rollout alone on the node.
    alone = await rollout(dsec, 'warm-up');
    if (alone.problem) throw new Error(`the warm-up rollout failed: ${alone.problem}`);
    await waitPoolFull(project, settings.replicas);
    guard.check();
    load.push(loadAverage());
    const started = performance.now();
    await Promise.all(
      Array.from({ length: settings.rollouts }, async (_, slot) => {
        for (let wave = 0; wave < settings.waves && !guard.interrupted(); wave++) {
          const result = await rollout(dsec, `s${slot}-w${wave}`);
          rollouts.push(result);
          if (result.problem) process.stderr.write(`rollouts: rollout s${slot}-w${wave} FAILED: ${result.problem}\n`);
        }
      }),
    );
    phaseSeconds = (performance.now() - started) / 1000;
    load.push(loadAverage());
    guard.check();
  } finally {
    guard.dispose();
    const problems = await project.dispose(settings.parallel);
    for (const problem of problems) process.stderr.write(`rollouts: cleanup: ${problem}\n`);
  }
  const baseLine = `${base.suite} minbase + ${base.include.join(', ')} from ${base.mirror}: ${base.path} (${base.built ? `built now in ${fixed(base.seconds, 0)} s` : 'cached'})`;
  return report(settings, { baseLine, applySeconds, phaseSeconds, load, alone, rollouts });
}

async function waitPoolFull(project: SdkProject, replicas: number): Promise<void> {
  const deadline = Date.now() + 5 * 60_000;
  for (;;) {
    const info = (await project.agent.listPools()).find((pool) => pool.fleet === FLEET);
    if (info && info.counts.ready >= replicas && info.counts.creating === 0) return;
    if (Date.now() > deadline) throw new Error(`pool ${FLEET} is not full after 5 minutes: ${JSON.stringify(info?.counts)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** One rollout, start to end; never throws (a failure is its `problem`), always releases what it acquired. */
async function rollout(dsec: DsecClient, tag: string): Promise<Rollout> {
  const calls: Call[] = [];
  const timed = async <T>(kind: Kind, work: () => Promise<T>, serverMs: (result: T) => number = () => 0): Promise<T> => {
    const begun = performance.now();
    const result = await work();
    calls.push({ kind, wallMs: performance.now() - begun, serverMs: serverMs(result) });
    return result;
  };
  const started = performance.now();
  let problem: string | undefined;
  let id: string | undefined;
  try {
    id = (await timed('acquire', () => dsec.acquire(FLEET, { holder: `rollout-${tag}`, waitMs: 300_000 }))).id;
    const sandbox = id;
    const sh = await timed('session', () => dsec.session(sandbox));
    const runAll = async (steps: readonly Step[]) => {
      for (const step of steps) {
        const result = await timed('command', () => sh.run(step.command, { timeoutMs: 300_000 }), (answer: SessionRunResult) => answer.durationMs);
        const wrong = step.check?.(result);
        if (wrong) throw new Error(`\`${step.command}\` ${wrong}`);
      }
    };
    await runAll(BEFORE_PATCH);
    await timed('writeFile', () => dsec.writeFile(sandbox, PATCHED_FILE, FIXED_STATS));
    await runAll(AFTER_PATCH);
    const tests = await timed('pytest', () => sh.run(PYTEST, { timeoutMs: 300_000 }), (answer) => answer.durationMs);
    if (tests.exitCode !== 0) throw new Error(`the tests do not pass after the patch: pytest exited ${tests.exitCode}: ${tests.stdout.trim().slice(-300)}`);
    const xml = (await timed('readFile', () => dsec.readFile(sandbox, REPORT_FILE))).toString('utf8');
    const wrong = checkReport(xml);
    if (wrong) throw new Error(`the tests do not pass after the patch: ${wrong}`);
  } catch (error) {
    problem = (error as Error).message;
  } finally {
    if (id !== undefined) {
      const sandbox = id;
      await timed('release', () => dsec.release(sandbox)).catch((error: Error) => (problem ??= `release: ${error.message}`));
    }
  }
  return { ...(problem !== undefined ? { problem } : {}), seconds: (performance.now() - started) / 1000, calls };
}

interface Results {
  readonly baseLine: string;
  readonly applySeconds: number;
  readonly phaseSeconds: number;
  readonly load: readonly string[];
  readonly alone?: Rollout;
  readonly rollouts: readonly Rollout[];
}

function report(settings: RolloutSettings, results: Results): boolean {
  const out = (text: string) => process.stdout.write(text);
  const { rollouts, alone } = results;
  const total = settings.rollouts * settings.waves;
  const failed = rollouts.filter((one) => one.problem);
  out(`\nSWE-style rollouts: ${settings.rollouts} concurrent x ${settings.waves} waves = ${total}, fleet ${FLEET} pool of ${settings.replicas} (${RESOURCES.cpu} CPU, ${RESOURCES.memoryMiB} MiB each), ${coreCount()} cores\n`);
  out(`  base layer: ${results.baseLine}\n`);
  out(`  setup (layers published, ${settings.replicas} sandboxes made by dsec apply): ${fixed(results.applySeconds, 1)} s\n`);
  if (alone) {
    const of = (kind: Kind) => alone.calls.filter((call) => call.kind === kind);
    const overhead = (kind: Kind) => ms(median(of(kind).map((call) => call.wallMs - call.serverMs)));
    out(
      `  one rollout alone (warm-up): ${fixed(alone.seconds, 2)} s, ${fixed(dsecShare(alone.calls) * 100, 1)}% of it in dsec; its final pytest ${ms(of('pytest')[0]?.wallMs ?? Number.NaN)} ms; ` +
        `dsec per call (median ms): acquire ${overhead('acquire')}, session open ${overhead('session')}, command ${overhead('command')}, writeFile ${overhead('writeFile')}, readFile ${overhead('readFile')}, release ${overhead('release')}\n`,
    );
  }
  if (rollouts.length === 0) return false;
  out(`  load average at the start / end of the rollouts: ${results.load.join('  ->  ')}\n\n`);

  const perMinute = (rollouts.length - failed.length) / (results.phaseSeconds / 60);
  out(
    table(['rollouts', 'value'], [
      ['finished / failed', `${rollouts.length - failed.length} / ${failed.length}`],
      ['wall time of all, s', fixed(results.phaseSeconds, 1)],
      ['rollouts per minute (finished)', fixed(perMinute, 1)],
      ['one rollout, median s (min-max)', `${fixed(median(rollouts.map((one) => one.seconds)), 2)} (${fixed(Math.min(...rollouts.map((one) => one.seconds)), 2)}-${fixed(Math.max(...rollouts.map((one) => one.seconds)), 2)})`],
      ['share of wall time in dsec (all calls)', `${fixed(dsecShare(rollouts.flatMap((one) => one.calls)) * 100, 1)}%`],
    ]),
  );

  out('\nper kind of call (over every rollout): wall time seen by the caller, the command\'s own duration (server), and the difference (dsec)\n');
  const all = rollouts.flatMap((one) => one.calls);
  const wallSum = all.reduce((sum, call) => sum + call.wallMs, 0);
  const rows = KINDS.map((kind) => {
    const of = all.filter((call) => call.kind === kind);
    const wall = of.reduce((sum, call) => sum + call.wallMs, 0);
    const server = of.reduce((sum, call) => sum + call.serverMs, 0);
    return [
      KIND_NAME[kind],
      String(of.length),
      ms(median(of.map((call) => call.wallMs))),
      ms(median(of.map((call) => call.serverMs))),
      ms(median(of.map((call) => call.wallMs - call.serverMs))),
      fixed((wall - server) / 1000, 1),
      `${fixed(((wall - server) / wallSum) * 100, 1)}%`,
    ];
  });
  out(table(['call', 'calls', 'wall median ms', 'server median ms', 'dsec median ms', 'dsec sum s', 'dsec share of all wall'], rows));

  for (const one of failed.slice(0, 10)) out(`  FAILED: ${one.problem}\n`);
  const ok = failed.length === 0 && rollouts.length === total;
  out(`\ncheck: every rollout's tests pass after its patch: ${ok ? 'yes' : `NO (${failed.length} failed, ${total - rollouts.length} not run)`}\n`);
  return ok;
}

/** sum(wall - command duration) / sum(wall). */
function dsecShare(calls: readonly Call[]): number {
  const wall = calls.reduce((sum, call) => sum + call.wallMs, 0);
  const server = calls.reduce((sum, call) => sum + call.serverMs, 0);
  return wall > 0 ? (wall - server) / wall : Number.NaN;
}

runWhenMain(import.meta.url, 'rollouts', (argv) => runRollouts(parseFlags(argv, DEFAULTS, USAGE)), { exit: true });
