/**
 * `dsec apply` and `dsec destroy`: take the state lock, plan (or load a saved
 * plan and check it is still fresh), ask for confirmation, apply with bounded
 * parallelism, and report exactly what succeeded and what failed. Every
 * finished action is already in the state, so a re-run converges.
 */
import path from 'node:path';
import type { Command } from 'commander';
import { action, collect, parseBool, parsePositiveInt } from '../command.js';
import type { CliContext } from '../context.js';
import { colors, confirm, printJson } from '../output.js';
import { attachProgress } from '../progress.js';
import { planFor, type PlanFlags } from './plan.js';
import { applyPlan, type ApplyResult } from '../../engine/apply.js';
import { countChanges, planHasChanges, planToJson, renderPlan } from '../../engine/render.js';
import { assertPlanFresh, loadPlan } from '../../engine/saved-plan.js';
import { DsecError, isDsecError } from '../../errors.js';
import type { Plan } from '../../plan.js';

interface ApplyFlags extends PlanFlags {
  autoApprove?: boolean;
  parallelism: number;
}

async function runApply(ctx: CliContext, flags: ApplyFlags, planFile: string | undefined, destroy: boolean): Promise<number> {
  const c = colors(flags.color);
  const command = destroy ? 'destroy' : 'apply';
  const store = await ctx.stateStore();
  const session = await store.lock({ command: `dsec ${command}` });
  try {
    let plan: Plan;
    const saved = Boolean(planFile);
    if (planFile) {
      plan = await loadPlan(path.resolve(ctx.cwd, planFile));
      assertPlanFresh(plan, session.state);
    } else {
      const provider = await ctx.connect();
      for (const line of (await provider.sweepStrays?.()) ?? []) process.stderr.write(`note: ${line}\n`);
      plan = await planFor(ctx, flags, destroy, session.state);
    }
    if (!flags.json) process.stdout.write(renderPlan(plan, { color: flags.color }));
    if (!planHasChanges(plan)) {
      if (flags.json) printJson({ plan: planToJson(plan), applied: true, changes: 0 });
      return 0;
    }
    if (!saved && !flags.autoApprove) {
      if (!process.stdin.isTTY) {
        throw new DsecError('DSEC_USAGE', {
          message: `${command} needs confirmation, but standard input is not a terminal; pass --auto-approve`,
        });
      }
      const question = destroy ? 'Do you really want to destroy all resources?' : 'Do you want to perform these actions?';
      if (!(await confirm(question, `dsec will perform the actions described above.`))) {
        process.stderr.write(`\n${command} cancelled.\n`);
        return 1;
      }
    }
    const { dsec } = await ctx.load();
    const progress = attachProgress(dsec, plan, Boolean(process.stderr.isTTY) && !flags.json);
    if (!flags.json) {
      dsec.hooks.afterChange.tap('cli-report', (change, error) => {
        const verb = error ? c.red('failed') : c.green('done');
        progress.log(`${change.address}: ${change.action} ${verb}${error ? `: ${describeFailure(change.address, error)}` : ''}`);
      });
    }
    let result: ApplyResult;
    try {
      result = await applyPlan(plan, {
        provider: await ctx.connect(),
        state: session,
        dsec,
        parallelism: flags.parallelism,
      });
    } finally {
      progress.stop();
    }
    for (const note of result.notes) process.stderr.write(`note: ${note}\n`);
    return report(plan, result, flags, destroy);
  } finally {
    await session.release();
  }
}

function report(plan: Plan, result: ApplyResult, flags: ApplyFlags, destroy: boolean): number {
  const c = colors(flags.color);
  const counts = countChanges(plan);
  if (flags.json) {
    printJson({
      plan: planToJson(plan),
      succeeded: result.succeeded.map((change) => change.address),
      failed: result.failed.map(({ change, error }) => ({ address: change.address, error: error.message, codes: errorCodes(error) })),
      sandboxes: result.sandboxes,
      notes: result.notes,
    });
    return result.failed.length > 0 ? 1 : 0;
  }
  if (result.failed.length === 0) {
    const what = destroy
      ? `${counts.destroy} destroyed`
      : `${counts.add} added, ${counts.change} changed, ${counts.destroy} destroyed`;
    process.stdout.write(`\n${c.green(c.bold(`${destroy ? 'Destroy' : 'Apply'} complete! Resources: ${what}.`))}\n`);
    return 0;
  }
  process.stdout.write(`\n${c.red(c.bold('Apply failed part-way.'))} What succeeded is recorded in the state; run apply again to converge.\n`);
  for (const change of result.succeeded) process.stdout.write(`  ${c.green('ok')}     ${change.address}\n`);
  for (const { change, error } of result.failed) {
    process.stdout.write(`  ${c.red('failed')} ${change.address}: ${describeFailure(change.address, error)}\n`);
  }
  process.stdout.write(`  sandboxes: ${result.sandboxes.done} done, ${result.sandboxes.failed} failed\n`);
  return 1;
}

/** The dsec error codes along an error's cause chain, outermost first (a fleet's failure, then what the agent said). */
function errorCodes(error: unknown): string[] {
  const codes: string[] = [];
  for (let at = error; at instanceof Error; at = at.cause) if (isDsecError(at)) codes.push(at.code);
  return codes;
}

/** A failure after its address: the message without the address it may start with, and the root cause's code to search for. */
function describeFailure(address: string, error: Error): string {
  const message = error.message.startsWith(`${address}: `) ? error.message.slice(address.length + 2) : error.message;
  const code = errorCodes(error).at(-1);
  return code ? `${message} [${code}]` : message;
}

function applyOptions(command: Command): Command {
  return command
    .option('--auto-approve', 'skip the interactive confirmation')
    .option('--parallelism <n>', 'how many sandbox operations run at once', parsePositiveInt, 10)
    .option('--target <address>', 'apply only this resource and what it depends on (repeatable)', collect)
    .option('--replace <address>', "force the replacement of this fleet's sandboxes (repeatable)", collect)
    .option('--replace-claimed', 'also replace (and destroy) sandboxes rollouts hold now, where the plan replaces or deletes them; their holders lose them')
    .option('--refresh <bool>', 'read the live view first', parseBool, true)
    .option('--json', 'print the plan and the outcome as JSON');
}

export function registerApply(program: Command): void {
  applyOptions(
    program
      .command('apply')
      .argument('[planfile]', 'a plan saved with `dsec plan --out`; applied exactly, without confirmation')
      .description('Make the live cluster match the config: plan, confirm, then create, update and destroy.'),
  ).action(action<ApplyFlags, [string | undefined]>((ctx, flags, planFile) => runApply(ctx, flags, planFile, false)));

  applyOptions(
    program.command('destroy').description('Destroy every sandbox and layer this config manages (fleets first).'),
  ).action(action<ApplyFlags, []>((ctx, flags) => runApply(ctx, flags, undefined, true)));
}
