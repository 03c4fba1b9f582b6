/**
 * `dsec sandbox pause|resume|claim|release`: freeze sandboxes (their memory
 * reclaimed) and thaw them, by id or by label, so a job whose trainer is
 * preempted pauses all its sandboxes in one call; and hold a sandbox for a
 * rollout so the fleet's lifetimes do not reap it.
 */
import type { Command } from 'commander';
import { DsecError } from '../../errors.js';
import type { SandboxInfo, SandboxTarget } from '../../live.js';
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

function claimLine(info: SandboxInfo): string {
  if (!info.claim) return `Sandbox ${info.id} is not claimed (${info.status}).`;
  const until = info.claim.expiresAt ? ` until ${info.claim.expiresAt}` : ' until released';
  return `Sandbox ${info.id} is claimed by ${info.claim.holder}${until} (${info.status}).`;
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

  sandbox
    .command('claim')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .description(
      "Hold a sandbox for a job: while the claim lasts the fleet's ttl does not reap it. " +
        'When --ttl runs out the claim ends and the sandbox is reaped (a fleet sandbox is re-created).',
    )
    .requiredOption('--holder <name>', 'who holds it (a job or rollout name), shown in dsec sandbox ls')
    .option('--ttl <duration>', 'the claim\'s own lifetime: 90s, 30m, 2h, 1d or seconds (default: until released)', parseDuration)
    .option('--json', 'print the sandbox as JSON')
    .action(
      action<{ holder: string; ttl?: number; json?: boolean }, [string]>(async (ctx, flags, id) => {
        const client = await ctx.agent();
        const info = await client.claimSandbox(id, flags.holder, flags.ttl);
        if (flags.json) printJson(info);
        else process.stdout.write(`${claimLine(info)}\n`);
        return 0;
      }),
    );

  sandbox
    .command('release')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .description("End a sandbox's claim: the fleet's ttl applies to it again. A no-op when it has none.")
    .option('--json', 'print the sandbox as JSON')
    .action(
      action<{ json?: boolean }, [string]>(async (ctx, flags, id) => {
        const client = await ctx.agent();
        const info = await client.releaseSandbox(id);
        if (flags.json) printJson(info);
        else process.stdout.write(`${claimLine(info)}\n`);
        return 0;
      }),
    );
}
