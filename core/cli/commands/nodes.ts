/**
 * `dsec nodes`: each node's usage: sandboxes by backend and state, CPU and
 * memory requested against what its policy admits and what is used, the
 * memory the density plugins shared and reclaimed, swap, and QoS.
 */
import type { Command } from 'commander';
import { action } from '../command.js';
import type { NodeInfo, NodeUsage } from '../../live.js';
import { renderNodeUsage } from '../node-usage.js';
import { colors, printJson } from '../output.js';

/** Each usage report with its node's health, address and backends' capabilities, then the unhealthy nodes (which report none). */
function withHealth(usages: readonly NodeUsage[], nodes: readonly NodeInfo[]): unknown[] {
  const infoOf = new Map(nodes.map((node) => [node.name, node]));
  const health = (node: NodeInfo | undefined) => ({
    ...(node?.health ? { health: node.health } : {}),
    ...(node?.healthReason ? { healthReason: node.healthReason } : {}),
    ...(node?.address ? { address: node.address } : {}),
    ...(node?.capabilities ? { capabilities: node.capabilities } : {}),
  });
  const reported = usages.map((usage) => ({ ...usage, ...health(infoOf.get(usage.node)) }));
  const silent = nodes.filter((node) => !usages.some((usage) => usage.node === node.name)).map((node) => ({ node: node.name, ...health(node) }));
  return [...reported, ...silent];
}

export function registerNodesCommand(program: Command): void {
  program
    .command('nodes')
    .description(
      'Show each node: what each backend can do, sandboxes by backend and state, requested vs allocatable vs used CPU and memory, ' +
        'shared and reclaimed memory, swap, QoS.',
    )
    .option('--json', 'print a JSON array of node usage reports')
    .action(
      action<{ json?: boolean; color: boolean }, []>(async (ctx, flags) => {
        const provider = await ctx.connect();
        const usages = await provider.nodeUsage();
        // The cluster provider's nodes carry health and address (the local one's neither); all carry their backends' capabilities.
        const nodes = await provider.nodes();
        if (flags.json) printJson(withHealth(usages, nodes));
        else process.stdout.write(renderNodeUsage(usages, colors(flags.color), nodes));
        return 0;
      }),
    );
}
