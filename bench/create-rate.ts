/**
 * Sandbox creation rate: a real `dsec apply` of a fleet of N container
 * sandboxes (default 50, parallelism 10) beside the bare OCI runtime running
 * the same bundles (overlay mount + `runc run --detach` of the config.json the
 * backend generated, same parallelism), and the same for destroy.
 *
 * Each round runs every side once, in an order that rotates from round to
 * round, so all sides share the machine's noise; figures are medians over
 * the rounds, and ratios are taken within a round before the median. Sides:
 *
 *   dsec apply  in-process `dsec apply --auto-approve`, the CLI's own code
 *               (lock, refresh, plan, apply, unlock); its sandbox phase
 *               (first create started -> last one in the state) apart too
 *   dsec CLI    `node bin/dsec.js apply --auto-approve`, spawn to exit
 *   bare runc   mount(8) + `runc run --detach` from Node with the backend's
 *               own helpers; teardown kill + `runc delete --force` + umount
 *   bare sh     the same mount + run from `xargs -P N sh -c`: no Node fork
 *               per process, the strictest baseline (create only)
 *
 * The target (the issue's): dsec's apply creates at >= 0.5x the bare rate,
 * checked against the stricter of the two bare baselines. Needs root, runc
 * and overlayfs. Cleans up everything, even on failure or ^C.
 *
 *   npm run build && node dist/bench/create-rate.js [--count 50] [--parallel 10] [--rounds 5] [--no-cli] [--no-shell]
 */
import { mkdir, mkdtemp, readdir, readFile, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stopAgent } from '../core/agent/daemon.js';
import { removeCgroupDirs } from '../plugins/backend-container/cgroups.js';
import { cgroupsPathOf, containerId } from '../plugins/backend-container/index.js';
import { unmountAll } from '../plugins/backend-container/rootfs.js';
import { findRuntime, runRuntime } from '../plugins/backend-container/runtime.js';
import { agentRootOf } from '../providers/local/index.js';
import { BareRuntime, type OciConfigTemplate } from './lib/bare-runc.js';
import { applyInProcess, applyWithCli, FLEET_ADDRESS, HOLD_FLEET, writeProject } from './lib/dsec-project.js';
import { renderCreateRate, type Round, type Side, type SideResult } from './lib/create-rate-report.js';
import { fixed, measured, pool } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';

export interface CreateRateSettings {
  count: number;
  parallel: number;
  rounds: number;
  /** Also time the real command. */
  cli: boolean;
  /** Also run the shell-driven bare baseline. */
  shell: boolean;
}

export function parseCreateRateArgs(argv: readonly string[]): CreateRateSettings {
  const settings: CreateRateSettings = { count: 50, parallel: 10, rounds: 5, cli: true, shell: true };
  const usage = 'usage: create-rate [--count N] [--parallel N] [--rounds N] [--no-cli] [--no-shell]';
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--no-cli' || flag === '--no-shell') {
      settings[flag === '--no-cli' ? 'cli' : 'shell'] = false;
      continue;
    }
    const key = flag.replace(/^--/, '');
    const value = Number(argv[++i]);
    if (!['count', 'parallel', 'rounds'].includes(key) || !Number.isInteger(value) || value < 1) throw new Error(usage);
    settings[key as 'count' | 'parallel' | 'rounds'] = value;
  }
  return settings;
}

let aborted = false;
const checkAborted = () => {
  if (aborted) throw new Error('interrupted');
};

export async function runCreateRate(settings: CreateRateSettings): Promise<boolean> {
  const runtime = findRuntime('runc');
  const work = await realpath(await mkdtemp(path.join(tmpdir(), 'dsec-bench-')));
  const project = path.join(work, 'project');
  const agentRoot = agentRootOf(path.join(project, '.dsec'));
  await mkdir(project);
  await writeProject(project, settings.count);
  const onSignal = () => {
    if (aborted) process.exit(130);
    aborted = true;
    process.stderr.write('create-rate: interrupted; finishing the step in flight, then cleaning up (^C again to leave things behind)\n');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  let bare: BareRuntime | undefined;
  const rounds: Round[] = [];
  try {
    // Warm-up, untimed: starts the agent, publishes the layer, runs one full
    // apply, and lends the bare runtime one sandbox's config.json and layer trees.
    const apply = { destroy: false, parallelism: settings.parallel, expect: settings.count };
    const destroy = { ...apply, destroy: true, targets: [FLEET_ADDRESS] };
    await applyInProcess(project, { ...apply, expect: settings.count + 1 });
    bare = await bareFromSandbox(runtime, agentRoot, work);
    await applyInProcess(project, destroy);
    const runtimeSide = bare;
    const perSandbox = (seconds: number) => settings.count / seconds;

    const run: Record<Side, (round: number) => Promise<SideResult>> = {
      dsec: async () => {
        const up = await measured(() => applyInProcess(project, apply));
        const down = await measured(() => applyInProcess(project, destroy));
        return {
          create: perSandbox(up.seconds),
          createCpu: up.cpuSeconds,
          createPhase: perSandbox(up.value.sandboxes),
          destroy: perSandbox(down.seconds),
          destroyCpu: down.cpuSeconds,
          destroyPhase: perSandbox(down.value.sandboxes),
        };
      },
      cli: async () => {
        const up = await measured(() => applyWithCli(project, apply));
        const down = await measured(() => applyWithCli(project, destroy));
        return { create: perSandbox(up.seconds), createCpu: up.cpuSeconds, destroy: perSandbox(down.seconds), destroyCpu: down.cpuSeconds };
      },
      bare: async (round) => {
        const bundles = await runtimeSide.prepare(`node-${round}`, settings.count);
        const up = await measured(() => pool(bundles.length, settings.parallel, (i) => runtimeSide.start(bundles[i])));
        const down = await measured(() => pool(bundles.length, settings.parallel, (i) => runtimeSide.stop(bundles[i])));
        return { create: perSandbox(up.seconds), createCpu: up.cpuSeconds, destroy: perSandbox(down.seconds), destroyCpu: down.cpuSeconds };
      },
      sh: async (round) => {
        const bundles = await runtimeSide.prepare(`sh-${round}`, settings.count);
        const up = await measured(() => runtimeSide.startAllWithShell(bundles, settings.parallel));
        await pool(bundles.length, settings.parallel, (i) => runtimeSide.stop(bundles[i]));
        return { create: perSandbox(up.seconds), createCpu: up.cpuSeconds };
      },
    };

    const sides: Side[] = ['dsec', 'bare', ...(settings.cli ? (['cli'] as const) : []), ...(settings.shell ? (['sh'] as const) : [])];
    for (let round = 0; round < settings.rounds; round++) {
      const results: Round = {};
      // Rotate the order, so no side always runs on a warmer (or busier) machine.
      for (const side of sides.map((_, i) => sides[(i + round) % sides.length])) {
        checkAborted();
        results[side] = await run[side](round);
      }
      rounds.push(results);
      process.stderr.write(`create-rate: round ${round + 1}/${settings.rounds} done\n`);
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    const problems = await cleanUp({ runtime, work, project, agentRoot, bare, settings });
    for (const problem of problems) process.stderr.write(`create-rate: cleanup: ${problem}\n`);
  }
  return report(rounds, settings);
}

/** The bare runtime, given the config.json and layer trees of the holder sandbox (alive all along). */
async function bareFromSandbox(runtime: ReturnType<typeof findRuntime>, agentRoot: string, work: string): Promise<BareRuntime> {
  const sandboxes = path.join(agentRoot, 'sandboxes');
  const first = (await readdir(sandboxes)).find((name) => name.startsWith(`${HOLD_FLEET}-`));
  if (!first) throw new Error(`the warm-up apply left no ${HOLD_FLEET} sandbox in ${sandboxes}`);
  const config = JSON.parse(await readFile(path.join(sandboxes, first, 'config.json'), 'utf8')) as OciConfigTemplate;
  const record = JSON.parse(await readFile(path.join(sandboxes, first, 'record.json'), 'utf8')) as { lowerDirs: string[] };
  const bareDir = path.join(work, 'bare');
  await mkdir(bareDir);
  return new BareRuntime(runtime, bareDir, config, record.lowerDirs);
}

/**
 * Leave the machine as it was: the bare containers, then dsec's (through
 * `dsec destroy`, and by hand if that fails), the agent, mounts, cgroups and
 * the temp folder. Returns what could not be undone.
 */
async function cleanUp(args: {
  runtime: ReturnType<typeof findRuntime>;
  work: string;
  project: string;
  agentRoot: string;
  bare: BareRuntime | undefined;
  settings: CreateRateSettings;
}): Promise<string[]> {
  const { runtime, work, project, agentRoot, bare } = args;
  const problems: string[] = bare ? await bare.cleanup() : [];
  try {
    // Everything the state owns (the fleet, and the layer too), plus live sandboxes of ours it adopts.
    await applyInProcess(project, { destroy: true, parallelism: args.settings.parallel });
  } catch (error) {
    problems.push(`dsec destroy: ${(error as Error).message}`);
  }
  await stopAgent(agentRoot).catch((error: Error) => problems.push(`stopping the agent: ${error.message}`));
  // By hand, whatever the destroy could not reach.
  const prefix = containerId(agentRoot, '');
  const listed = await runRuntime(runtime, ['list', '--quiet']).catch(() => undefined);
  for (const id of (listed?.stdout ?? '').split('\n').filter((line) => line.startsWith(prefix))) {
    problems.push(`container ${id} was left running; deleting it`);
    await runRuntime(runtime, ['delete', '--force', id]);
    await removeCgroupDirs(cgroupsPathOf(id)).catch((error: Error) => problems.push(error.message));
  }
  try {
    await unmountAll(work);
    await rm(work, { recursive: true, force: true });
  } catch (error) {
    problems.push(`removing ${work}: ${(error as Error).message}`);
  }
  return problems;
}

function report(rounds: readonly Round[], settings: CreateRateSettings): boolean {
  const { text, ratios } = renderCreateRate(rounds, settings);
  process.stdout.write(text);
  const strictest = Math.min(ratios.bare ?? Infinity, ratios.sh ?? Infinity);
  const met = strictest >= 0.5;
  const against = [
    ratios.bare !== undefined ? `${fixed(ratios.bare, 2)}x the Node-driven runc` : '',
    ratios.sh !== undefined ? `${fixed(ratios.sh, 2)}x the shell-driven runc` : '',
  ].filter(Boolean);
  process.stdout.write(`\ntarget: dsec apply creates at >= 0.5x the bare runtime's rate: ${met ? 'met' : 'NOT met'} (${against.join(', ')})\n`);
  return met;
}

runWhenMain(import.meta.url, 'create-rate', (argv) => runCreateRate(parseCreateRateArgs(argv)));
