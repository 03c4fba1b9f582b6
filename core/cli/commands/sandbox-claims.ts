/**
 * `dsec sandbox acquire|claim|renew|release`: a rollout taking a ready
 * sandbox from its fleet's warm pool (the pool makes a fresh one in its
 * place), holding one by id, extending its claim, and giving it back
 * (recycled by default, or kept). On every provider: they go through it.
 */
import type { Command } from 'commander';
import type { ReleaseResult, SandboxInfo } from '../../live.js';
import { action, collect, parseDuration, parseKeyValues } from '../command.js';
import { printJson } from '../output.js';

function claimLine(info: SandboxInfo): string {
  if (!info.claim) return `Sandbox ${info.id} is not claimed (${info.status}).`;
  const until = info.claim.expiresAt ? ` until ${info.claim.expiresAt}` : ' until released';
  return `Sandbox ${info.id} is claimed by ${info.claim.holder}${until} (${info.status}).`;
}

function releaseLine(result: ReleaseResult): string {
  if (result.recycled) return `Sandbox ${result.id} was recycled (destroyed; its pool made a fresh one in its place when it was acquired).`;
  if (result.sandbox?.kept) return `Sandbox ${result.id} is kept, unclaimed (${result.sandbox.status}); acquire never hands it out again: destroy it when done.`;
  return result.sandbox ? claimLine(result.sandbox) : `Sandbox ${result.id} was released.`;
}

export function registerSandboxClaimCommands(sandbox: Command): void {
  sandbox
    .command('acquire')
    .argument('<fleet>', "the fleet whose warm pool to take a sandbox from")
    .description(
      'Take a ready sandbox of a fleet for a holder (a rollout), never one another holder has; the pool makes a fresh one ' +
        'in its place. Prints its id. Waits up to --wait when none is ready, then fails with the pool\'s counts.',
    )
    .requiredOption('--holder <name>', 'who holds it; dsec sandbox ls --holder finds its sandboxes again')
    .option('--ttl <duration>', 'the claim lapses after this long unless renewed, and the sandbox is recycled (default: the fleet\'s pool.claimTtl)', parseDuration)
    .option('--wait <duration>', 'how long to wait for a ready sandbox (default: fail at once)', parseDuration)
    .option('-l, --label <key=value>', 'a label of this claim, for selectors such as pause --label (repeatable)', collect)
    .option('--lineage <lineage>', "which project's fleet, when several projects have a fleet of this name on a cluster")
    .option('--json', 'print the sandbox as JSON')
    .action(
      action<{ holder: string; ttl?: number; wait?: number; label?: string[]; lineage?: string; json?: boolean }, [string]>(async (ctx, flags, fleet) => {
        const provider = await ctx.connect();
        const labels = parseKeyValues(flags.label, '--label');
        const info = await provider.acquireSandbox(fleet, {
          holder: flags.holder,
          ...(flags.ttl !== undefined ? { ttlSeconds: flags.ttl } : {}),
          ...(flags.wait !== undefined ? { waitMs: flags.wait * 1000 } : {}),
          ...(labels ? { labels } : {}),
          ...(flags.lineage !== undefined ? { lineage: flags.lineage } : {}),
        });
        if (flags.json) printJson(info);
        else process.stdout.write(`${info.id}\n`);
        return 0;
      }),
    );

  sandbox
    .command('claim')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .description(
      "Hold one sandbox by id for a job: while the claim lasts the fleet's ttl does not reap it, and a pool's sandbox is " +
        'replaced in the pool by a fresh one. When --ttl runs out the claim ends and the sandbox is recycled.',
    )
    .requiredOption('--holder <name>', 'who holds it (a job or rollout name), shown in dsec sandbox ls')
    .option('--ttl <duration>', "the claim's own lifetime: 90s, 30m, 2h, 1d or seconds (default: until released)", parseDuration)
    .option('--json', 'print the sandbox as JSON')
    .action(
      action<{ holder: string; ttl?: number; json?: boolean }, [string]>(async (ctx, flags, id) => {
        const info = await (await ctx.connect()).claimSandbox(id, flags.holder, flags.ttl);
        if (flags.json) printJson(info);
        else process.stdout.write(`${claimLine(info)}\n`);
        return 0;
      }),
    );

  sandbox
    .command('renew')
    .argument('<id>', 'the sandbox id')
    .description("Extend a holder's claim: it lasts --ttl from now. Refused for another holder, and once the claim lapsed.")
    .requiredOption('--holder <name>', 'the holder the claim is for')
    .requiredOption('--ttl <duration>', 'how long the claim lasts from now: 90s, 30m, 2h, 1d or seconds', parseDuration)
    .option('--json', 'print the sandbox as JSON')
    .action(
      action<{ holder: string; ttl: number; json?: boolean }, [string]>(async (ctx, flags, id) => {
        const info = await (await ctx.connect()).renewClaim(id, { holder: flags.holder, ttlSeconds: flags.ttl });
        if (flags.json) printJson(info);
        else process.stdout.write(`${claimLine(info)}\n`);
        return 0;
      }),
    );

  sandbox
    .command('release')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .description(
      "Give a sandbox back. A pool's sandbox is recycled (destroyed: nothing its holder wrote reaches the next holder); " +
        'with --keep it stays, unclaimed, for inspection or a later turn, and acquire never hands it out again. ' +
        'A sandbox outside any pool only loses its claim.',
    )
    .option('--keep', 'keep the sandbox instead of recycling it')
    .option('--holder <name>', 'only if this holder has it')
    .option('--json', 'print the outcome as JSON')
    .action(
      action<{ keep?: boolean; holder?: string; json?: boolean }, [string]>(async (ctx, flags, id) => {
        const result = await (await ctx.connect()).releaseSandbox(id, { ...(flags.keep ? { keep: true } : {}), ...(flags.holder ? { holder: flags.holder } : {}) });
        if (flags.json) printJson(result);
        else process.stdout.write(`${releaseLine(result)}\n`);
        return 0;
      }),
    );
}
