/**
 * `dsec nodes`: each node's usage: sandboxes by backend and state, CPU and
 * memory requested against what its policy admits and what is used, the
 * memory the density plugins shared and reclaimed, swap, and QoS.
 */
import type { Command } from 'commander';
import { action } from '../command.js';
import { renderNodeUsage } from '../node-usage.js';
import { colors, printJson } from '../output.js';

export function registerNodesCommand(program: Command): void {
  program
    .command('nodes')
    .description(
      'Show each node: sandboxes by backend and state, requested vs allocatable vs used CPU and memory, ' +
        'shared and reclaimed memory, swap, QoS.',
    )
    .option('--json', 'print a JSON array of node usage reports')
    .action(
      action<{ json?: boolean; color: boolean }, []>(async (ctx, flags) => {
        const provider = await ctx.connect();
        const usages = await provider.nodeUsage();
        if (flags.json) printJson(usages);
        else process.stdout.write(renderNodeUsage(usages, colors(flags.color)));
        return 0;
      }),
    );
}
