/**
 * `dsec sandbox pause|resume`: freeze sandboxes (their memory reclaimed) and
 * thaw them, by id or by label, so a job whose trainer is preempted pauses
 * all its sandboxes in one call. Claims are sandbox-claims.ts's.
 */
import type { Command } from 'commander';
import { DsecError } from '../../errors.js';
import type { SandboxTarget } from '../../live.js';
import { batchFailed, outcomeLines } from '../batch-outcomes.js';
import { action, collect, parseDuration, parseKeyValues } from '../command.js';
import { colors, printJson } from '../output.js';

/** The ids and labels a batch command names; neither is a usage error (it would act on nothing, or everything). */
export function batchTarget(ids: readonly string[], labelFlags: readonly string[] | undefined, verb: string): SandboxTarget {
  const labels = parseKeyValues(labelFlags, '--label');
  if (ids.length === 0 && !labels) {
    throw new DsecError('DSEC_USAGE', {
      message: `dsec sandbox ${verb}: name the sandboxes: one or more ids, or --label key=value (repeatable)`,
    });
  }
  return { ...(ids.length > 0 ? { ids: [...ids] } : {}), ...(labels ? { labels } : {}) };
}

export function registerSandboxDensityCommands(sandbox: Command): void {
  for (const verb of ['pause', 'resume'] as const) {
    sandbox
      .command(verb)
      .argument('[ids...]', 'sandbox ids (see dsec sandbox ls)')
      .description(
        verb === 'pause'
          ? 'Freeze sandboxes and reclaim their memory; an exec or file call resumes one transparently. ' +
              'Select by id and/or --label. One line per sandbox; exit 1 if any failed.'
          : 'Thaw paused sandboxes (their memory prefetched). Select by id and/or --label. One line per sandbox; exit 1 if any failed.',
      )
      .option('-l, --label <key=value>', 'every sandbox with this label (repeatable: all must match)', collect)
      .option('--json', 'print one outcome per sandbox as JSON')
      .action(
        action<{ label?: string[]; json?: boolean; color: boolean }, [string[]]>(async (ctx, flags, ids) => {
          const target = batchTarget(ids, flags.label, verb);
          const provider = await ctx.connect();
          const outcomes = await (verb === 'pause' ? provider.pauseSandboxes(target) : provider.resumeSandboxes(target));
          if (flags.json) {
            printJson(outcomes);
          } else if (outcomes.length === 0) {
            process.stdout.write('No sandbox matched.\n');
          } else {
            process.stdout.write(`${outcomeLines(outcomes, verb, colors(flags.color)).join('\n')}\n`);
          }
          return batchFailed(outcomes) ? 1 : 0;
        }),
      );
  }
}
