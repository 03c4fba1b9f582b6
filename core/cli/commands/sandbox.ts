/**
 * `dsec sandbox ls|exec|snapshot` (read and write: sandbox-files.ts): look at the sandboxes on the agent, run
 * commands in them, and turn one's writable layer into a published layer.
 * exec's exit code is the command's, so scripts can use it directly.
 */
import type { Command } from 'commander';
import { action, collect, parseKeyValues, parsePositiveInt } from '../command.js';
import { colors, printJson, table } from '../output.js';
import { registerSandboxClaimCommands } from './sandbox-claims.js';
import { registerSandboxDensityCommands } from './sandbox-density.js';
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
    .command('exec')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .argument('<command...>', 'the command and its arguments; put them after --')
    .description('Run a command in a sandbox, in its persistent state. Exits with the command\'s exit code.')
    .option('-t, --timeout <ms>', 'kill the command after this many milliseconds', parsePositiveInt, 60_000)
    .option('-w, --workdir <dir>', 'working directory inside the sandbox')
    .option('-e, --env <key=value>', 'extra environment variable (repeatable)', (v: string, p: string[] = []) => [...p, v])
    .option('--max-output <bytes>', 'cap on captured stdout and stderr, each', parsePositiveInt)
    .option('-i, --stdin', 'pass this command\'s standard input to the sandbox command')
    .option('--json', 'print the result (stdout, stderr, exit code, truncation) as JSON')
    .action(
      action<{ timeout: number; workdir?: string; env?: string[]; maxOutput?: number; stdin?: boolean; json?: boolean }, [string, string[]]>(
        async (ctx, flags, id, command) => {
          const provider = await ctx.connect();
          const stdin = flags.stdin ? await readStdin() : undefined;
          const result = await provider.exec(id, {
            cmd: command,
            timeoutMs: flags.timeout,
            workdir: flags.workdir,
            env: parseKeyValues(flags.env, '--env'),
            maxOutputBytes: flags.maxOutput,
            stdin,
          });
          if (flags.json) {
            printJson(result);
          } else {
            process.stdout.write(result.stdout);
            process.stderr.write(result.stderr);
            if (result.truncated) process.stderr.write(`dsec: output was cut at the capture limit\n`);
            if (result.timedOut) process.stderr.write(`dsec: the command timed out after ${flags.timeout} ms and was killed\n`);
          }
          return result.exitCode ?? (result.timedOut ? 124 : 137);
        },
      ),
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

  registerSandboxDensityCommands(sandbox);
  registerSandboxClaimCommands(sandbox);
  registerSandboxFileCommands(sandbox);
}

async function readStdin(): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return chunks.length ? Buffer.concat(chunks).toString('utf8') : undefined;
}
