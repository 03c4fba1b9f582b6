/**
 * A throwaway dsec project (one busybox layer, one environment, a container
 * fleet of N and a holder fleet of one) applied and destroyed the two ways a user does it:
 *
 *   - in process, with the CLI's own pieces in the CLI's order (CliContext,
 *     state lock, planFor = refresh + digests + plan, applyPlan, release),
 *     so the sandbox phase can be timed apart from the rest;
 *   - as the real command, `node bin/dsec.js apply --auto-approve`, timed
 *     from spawn to exit (Node start-up and module loading included).
 *
 * The benchmark's destroy is `dsec destroy --target fleet.bench`: the
 * fleet's sandboxes go, the layer stays published for the next round.
 */
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { planFor } from '../../core/cli/commands/plan.js';
import { CliContext } from '../../core/cli/context.js';
import { applyPlan } from '../../core/engine/apply.js';
import { renderPlan } from '../../core/engine/render.js';

export const FLEET = 'bench';
export const FLEET_ADDRESS = `fleet.${FLEET}`;
/**
 * One sandbox of the same environment that lives through the whole run: it
 * keeps the layer mounted (the store mounts a layer image while a sandbox
 * uses it), so every round of either side starts from the same mounted
 * layer, and the bare runtime can use its trees.
 */
export const HOLD_FLEET = 'hold';
/** Small limits, so 50 sandboxes fit any machine; the bare runtime gets the same config.json. */
const RESOURCES = { cpu: 0.25, memory: '64Mi', pids: 64 };

/** <package>/bin/dsec.js, from dist/bench/lib/ (compiled) or bench/lib/ (tsx). */
export function cliPath(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const up = here.split(path.sep).includes('dist') ? '../../..' : '../..';
  return path.resolve(here, up, 'bin', 'dsec.js');
}

export function projectYaml(replicas: number): string {
  return `# written by bench/create-rate: one layer, one environment, one fleet
version: 1
provider:
  local: {}
layers:
  base:
    kind: base
    version: 1.0.0
    source:
      busybox: {}
environments:
  shell:
    layers: [base]
fleets:
  ${FLEET}:
    environment: shell
    backend: container
    replicas: ${replicas}
    resources:
      cpu: ${RESOURCES.cpu}
      memory: ${RESOURCES.memory}
      pids: ${RESOURCES.pids}
    labels:
      bench: create-rate
  ${HOLD_FLEET}:
    environment: shell
    backend: container
    replicas: 1
    resources:
      cpu: ${RESOURCES.cpu}
      memory: ${RESOURCES.memory}
      pids: ${RESOURCES.pids}
`;
}

export async function writeProject(dir: string, replicas: number): Promise<void> {
  await writeFile(path.join(dir, 'dsec.yaml'), projectYaml(replicas));
}

export interface ApplyOptions {
  /** `dsec destroy` rather than `dsec apply`. */
  readonly destroy: boolean;
  readonly parallelism: number;
  /** `--target` addresses (none: everything). */
  readonly targets?: readonly string[];
  /** Sandbox operations that must run (checked only when given). */
  readonly expect?: number;
}

export interface ApplyTiming {
  /** Lock -> plan -> apply -> unlock, as `dsec apply` runs it after start-up (seconds). */
  readonly whole: number;
  /** Refresh + layer digests + plan (seconds). */
  readonly plan: number;
  /** From the fleet change's start to its last sandbox operation recorded in the state (seconds). */
  readonly sandboxes: number;
  /** Sandbox operations that finished. */
  readonly done: number;
}

/**
 * One `dsec apply --auto-approve` (or `dsec destroy --auto-approve --target
 * fleet.bench`) in this process. Throws unless every sandbox operation
 * succeeded and, when `expect` is given, exactly that many ran.
 */
export async function applyInProcess(dir: string, options: ApplyOptions): Promise<ApplyTiming> {
  const started = performance.now();
  const ctx = new CliContext({ chdir: dir, color: false });
  try {
    const store = await ctx.stateStore();
    const session = await store.lock({ command: options.destroy ? 'dsec destroy' : 'dsec apply' });
    let planned = 0;
    let fleetStart = 0;
    let lastOperation = 0;
    let result;
    try {
      const flags = { color: false, ...(options.targets ? { target: [...options.targets] } : {}) };
      const plan = await planFor(ctx, flags, options.destroy, session.state);
      renderPlan(plan, { color: false }); // the CLI prints it; a cost the command pays
      planned = performance.now();
      const { dsec } = await ctx.load();
      dsec.hooks.beforeChange.tap('bench', (change) => {
        if (change.address === FLEET_ADDRESS) fleetStart = performance.now();
      });
      dsec.hooks.sandboxOperation.tap('bench', () => {
        lastOperation = performance.now();
      });
      result = await applyPlan(plan, { provider: await ctx.connect(), state: session, dsec, parallelism: options.parallelism });
    } finally {
      await session.release();
    }
    if (result.failed.length > 0) {
      const { change, error } = result.failed[0];
      throw new Error(`${options.destroy ? 'destroy' : 'apply'} failed at ${change.address}: ${error.message}`);
    }
    if (options.expect !== undefined && result.sandboxes.done !== options.expect) {
      throw new Error(`expected ${options.expect} sandbox operations, ${result.sandboxes.done} ran: is something left from an earlier run?`);
    }
    const ended = performance.now();
    return {
      whole: (ended - started) / 1000,
      plan: (planned - started) / 1000,
      sandboxes: (lastOperation - fleetStart) / 1000,
      done: result.sandboxes.done,
    };
  } finally {
    await ctx.close();
  }
}

/** The real command, timed from spawn to exit (seconds). Throws with its output on a non-zero exit. */
export async function applyWithCli(dir: string, options: ApplyOptions): Promise<number> {
  const args = [cliPath(), '-C', dir, '--no-color', options.destroy ? 'destroy' : 'apply', '--auto-approve'];
  args.push('--parallelism', String(options.parallelism));
  for (const target of options.targets ?? []) args.push('--target', target);
  const started = performance.now();
  const { code, output } = await new Promise<{ code: number | null; output: string }>((resolve, reject) => {
    // Pipes are safe here: the CLI starts no container itself (the agent does, with its stdio on a log file).
    // Detached: a ^C meant for the benchmark must not kill an apply half-way (it would leave the state locked).
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const chunks: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => chunks.push(chunk));
    child.on('error', reject);
    child.on('close', (exitCode) => resolve({ code: exitCode, output: Buffer.concat(chunks).toString('utf8') }));
  });
  const seconds = (performance.now() - started) / 1000;
  if (code !== 0) throw new Error(`dsec ${args.slice(3).join(' ')} exited ${code}:\n${output.slice(-3000)}`);
  return seconds;
}
