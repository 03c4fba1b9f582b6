/**
 * Commands that read the config and touch nothing: `validate`, `synth`
 * (the JSON model YAML and TypeScript both produce) and `graph` (DOT).
 */
import type { Command } from 'commander';
import { action } from '../command.js';
import { colors, printJson } from '../output.js';
import { clashWarnings } from '../clash-warnings.js';
import { formatDiagnostics, synthConfig } from '../../config/index.js';
import { sortDiagnostics } from '../../config/problems.js';
import { buildGraph, graphToDot } from '../../engine/graph.js';

export function registerConfigCommands(program: Command): void {
  program
    .command('validate')
    .description(
      'Check the config: schema, references, names, layer order; and, when the project\'s agent runs, paths two published layers of an environment both hold. Exit 1 with every problem located.',
    )
    .option('--json', 'print {valid, warnings, notes} as JSON')
    .action(
      action<{ json?: boolean; color: boolean }, []>(async (ctx, flags) => {
        const { config, warnings: loaded, locate } = await ctx.load();
        buildGraph(config); // cycles and dangling references are errors too
        const clashes = await clashWarnings(config, () => ctx.agent({ autoStart: false }), locate);
        const warnings = sortDiagnostics([...loaded, ...clashes.warnings]);
        if (flags.json) {
          printJson({ valid: true, file: config.file, warnings, notes: clashes.notes });
          return 0;
        }
        const c = colors(flags.color);
        if (warnings.length > 0) process.stderr.write(`${formatDiagnostics(warnings, { color: flags.color })}\n`);
        for (const note of clashes.notes) process.stderr.write(`${c.dim(`note: ${note}`)}\n`);
        process.stdout.write(`${c.green(c.bold('Success!'))} The configuration is valid.\n`);
        return 0;
      }),
    );

  program
    .command('synth')
    .description('Print the JSON model the config (dsec.yaml or dsec.ts) produces; the same program always gives the same bytes.')
    .action(
      action(async (ctx) => {
        const { config } = await ctx.load();
        process.stdout.write(synthConfig(config));
        return 0;
      }),
    );

  program
    .command('graph')
    .description('Print the dependency graph (layers -> environments -> fleets) in DOT; pipe it to `dot -Tsvg`.')
    .action(
      action(async (ctx) => {
        const { config } = await ctx.load();
        process.stdout.write(graphToDot(buildGraph(config)));
        return 0;
      }),
    );
}
