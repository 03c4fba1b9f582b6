/**
 * `dsec sandbox ls|snapshot`: look at the sandboxes on the agent and turn one's
 * writable layer into a published layer. The rest of `dsec sandbox` lives in
 * its own files: exec/shell/ps/kill (sandbox-exec.ts), acquire/release
 * (sandbox-claims.ts), read/write (sandbox-files.ts), density.
 */
import type { Command } from 'commander';
import { action, collect, parseKeyValues } from '../command.js';
import { colors, printJson, table } from '../output.js';
import { registerSandboxClaimCommands } from './sandbox-claims.js';
import { registerSandboxDensityCommands } from './sandbox-density.js';
import { registerSandboxExecCommands } from './sandbox-exec.js';
import { registerSandboxFileCommands } from './sandbox-files.js';
import { LABEL_FLEET, type SandboxInfo } from '../../live.js';
import type { LayerKind } from '../../model.js';

export function registerSandboxCommands(program: Command): void {
  const sandbox = program.command('sandbox').description('List sandboxes, run commands in them, acquire and release them, pause and resume them.');

  sandbox
    .command('ls')
    .description('List the sandboxes on this project\'s node agent: status (running, paused...) and who claimed each.')
    .option('--fleet <name>', 'only this fleet\'s sandboxes')
    .option('-l, --label <key=value>', 'only sandboxes with this label, their own or their claim\'s (repeatable)', (v: string, p: string[] = []) => [...p, v])
    .option('--holder <name>', 'only the sandboxes this holder has (a preempted trainer finds its rollouts again)')
    .option('--json', 'print a JSON array of sandboxes')
    .action(
      action<{ fleet?: string; label?: string[]; holder?: string; json?: boolean; color: boolean }, []>(async (ctx, flags) => {
        const provider = await ctx.connect();
        const labels = { ...parseKeyValues(flags.label, '--label'), ...(flags.fleet ? { [LABEL_FLEET]: flags.fleet } : {}) };
        const sandboxes = await provider.listSandboxes(Object.keys(labels).length ? labels : undefined, flags.holder !== undefined ? { holder: flags.holder } : {});
        sandboxes.sort((a, b) => a.id.localeCompare(b.id));
        if (flags.json) {
          printJson(sandboxes);
          return 0;
        }
        if (sandboxes.length === 0) {
          process.stdout.write('No sandboxes.\n');
          return 0;
        }
        const c = colors(flags.color);
        const paint = (s: SandboxInfo) => (s.status === 'running' ? c.green : s.status === 'failed' ? c.red : c.yellow)(s.status);
        const rows = [['ID', 'FLEET', 'STATUS', 'CLAIMED BY', 'BACKEND', 'CPU', 'MEMORY', 'CREATED']];
        for (const s of sandboxes) {
          rows.push([
            s.id,
            s.labels[LABEL_FLEET] ?? '-',
            s.status,
            s.claim ? `${s.claim.holder}${s.claim.expiresAt ? ` until ${s.claim.expiresAt}` : ''}` : s.kept ? `(kept: ${s.kept.holder})` : '-',
            s.backend,
            String(s.resources.cpu),
            `${s.resources.memoryMiB}Mi`,
            s.createdAt,
          ]);
        }
        // Colour after padding, so escape codes do not break the columns.
        const text = table(rows);
        process.stdout.write(
          text.replace(/ (running|failed|stopped|paused|creating) /g, (m, status: string) => ` ${paint({ status } as SandboxInfo)} `),
        );
        return 0;
      }),
    );

  sandbox
    .command('snapshot')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .description(
      'Publish the sandbox\'s writable layer (what it wrote and deleted) as a new layer, frozen while it is copied; ' +
        'an environment uses it at once with source: { published: {} }.',
    )
    .requiredOption('--as <name@version>', 'the new layer\'s name and version (immutable once published)')
    .option('--kind <kind>', 'base, workspace or toolkit', 'workspace')
    .option('--exclude <path>', 'an absolute path inside the sandbox to leave out, with all below it (repeatable): secrets, build residue', collect)
    .option('--json', 'print the published layer record as JSON')
    .action(
      action<{ as: string; kind: string; exclude?: string[]; json?: boolean }, [string]>(async (ctx, flags, id) => {
        const client = await ctx.agent();
        const record = await client.snapshotSandbox(id, { as: flags.as, kind: flags.kind as LayerKind, exclude: flags.exclude ?? [] });
        if (flags.json) {
          printJson(record);
          return 0;
        }
        const excluded = flags.exclude?.length ? `, without ${flags.exclude.join(', ')}` : '';
        process.stdout.write(
          `Published ${record.name}@${record.version} (${record.kind}) from sandbox ${id}${excluded}: ${record.digest}, ${record.files} entries, ${record.sizeBytes} bytes.\n` +
            `Use it with:  ${record.name}: { kind: ${record.kind}, version: ${record.version}, source: { published: {} } }\n`,
        );
        return 0;
      }),
    );

  registerSandboxExecCommands(sandbox);
  registerSandboxDensityCommands(sandbox);
  registerSandboxClaimCommands(sandbox);
  registerSandboxFileCommands(sandbox);
}
