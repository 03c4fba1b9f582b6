/**
 * `dsec plan`: refresh, diff, show what apply would do. Like Terraform, it can
 * save the plan (`--out`), report changes through its exit code
 * (`--detailed-exitcode`: 0 none, 1 error, 2 changes), narrow to addresses
 * (`--target`), force replacements (`--replace`) and plan a destroy.
 */
import path from 'node:path';
import type { Command } from 'commander';
import type { CliContext } from '../context.js';
import { action, collect, parseBool } from '../command.js';
import { printJson } from '../output.js';
import { planProject } from '../../engine/engine.js';
import { planHasChanges, planToJson, renderPlan } from '../../engine/render.js';
import { savePlan } from '../../engine/saved-plan.js';
import type { Plan, StateFile } from '../../plan.js';

export interface PlanFlags {
  out?: string;
  detailedExitcode?: boolean;
  target?: string[];
  replace?: string[];
  replaceClaimed?: boolean;
  destroy?: boolean;
  refresh?: boolean;
  json?: boolean;
  color: boolean;
}

/**
 * Load, refresh and plan: shared by plan, apply and destroy. `plan` reads the
 * state without locking it (it writes nothing); apply passes the state it
 * holds the lock on.
 */
export async function planFor(ctx: CliContext, flags: PlanFlags, destroy: boolean, locked?: StateFile): Promise<Plan> {
  const { config, dsec, warnings } = await ctx.load();
  for (const warning of warnings) ctx.log.warn(`${warning.path}: ${warning.message}`);
  const provider = await ctx.connect();
  const state = locked ?? (await (await ctx.stateStore()).read());
  return planProject({
    config,
    provider,
    state,
    dsec,
    options: {
      destroy,
      targets: flags.target,
      replace: flags.replace,
      replaceClaimed: flags.replaceClaimed === true,
      refresh: flags.refresh ?? true,
    },
  });
}

export function registerPlan(program: Command): void {
  program
    .command('plan')
    .description('Show what apply would change: refresh the live view, diff it against the config, print the plan.')
    .option('-o, --out <file>', 'save the plan to a file that `dsec apply <file>` runs exactly')
    .option('--detailed-exitcode', 'exit 0 when there are no changes, 1 on error, 2 when there are changes')
    .option('--target <address>', 'plan only this resource and what it depends on (repeatable)', collect)
    .option('--replace <address>', 'force the replacement of this fleet\'s sandboxes (repeatable)', collect)
    .option('--replace-claimed', 'also replace (and destroy) sandboxes rollouts hold now, where the plan replaces or deletes them; their holders lose them')
    .option('--destroy', 'plan to destroy everything this config manages')
    .option('--refresh <bool>', 'read the live view first (--refresh=false plans from the state alone)', parseBool, true)
    .option('--json', 'print the plan as JSON (schemas/plan.schema.json)')
    .action(
      action<PlanFlags, []>(async (ctx, flags) => {
        const plan = await planFor(ctx, flags, Boolean(flags.destroy));
        const out = flags.out && path.resolve(ctx.cwd, flags.out);
        if (out) await savePlan(plan, out);
        if (flags.json) printJson(planToJson(plan));
        else {
          process.stdout.write(renderPlan(plan, { color: flags.color }));
          if (flags.out) {
            process.stdout.write(`\nSaved the plan to: ${flags.out}\nTo perform exactly these actions, run: dsec apply ${flags.out}\n`);
          }
        }
        return flags.detailedExitcode && planHasChanges(plan) ? 2 : 0;
      }),
    );
}
