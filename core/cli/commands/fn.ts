/**
 * `dsec fn invoke FLEET`: run one stateless task on an FnCall fleet's pool
 * (`backend: fncall`) and print what it printed; the exit code is the
 * task's, 124 when it timed out (as timeout(1) does).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { durationSeconds } from '../../config/units.js';
import { DsecError } from '../../errors.js';
import type { FunctionTask } from '../../live.js';
import { action, collect, parseKeyValues } from '../command.js';
import { printJson } from '../output.js';
import { readAll } from './sandbox-files.js';

interface InvokeFlags {
  runtime: string;
  code?: string;
  codeFile?: string;
  inputFile?: string[];
  stdin?: string;
  env?: string[];
  timeout?: number;
  json?: boolean;
}

export function registerFunctionCommands(program: Command): void {
  const fn = program.command('fn').description('Run stateless tasks on FnCall fleets (backend: fncall).');
  fn.command('invoke')
    .argument('<fleet>', 'an FnCall fleet of the config (its workers run the task)')
    .argument('[args...]', 'arguments after the program; put them after --')
    .description('Run code with an interpreter in a pooled worker and print its stdout and stderr; exits with the task\'s exit code (124 on a timeout).')
    .requiredOption('-r, --runtime <runtime>', 'bash, sh, python3 (when the environment has it), or an interpreter\'s absolute path')
    .option('-c, --code <code>', 'the program text')
    // Not --file: that is the global option naming the config file.
    .option('--code-file <file>', 'a local file holding the program (instead of -c)')
    .option('--input-file <path=local>', 'a local file the task finds at this path in its working folder (repeatable)', collect)
    .option('--stdin <text>', 'standard input of the task; "-" passes this command\'s own stdin')
    .option('-e, --env <key=value>', 'an environment variable of the task (repeatable)', collect)
    .option('-t, --timeout <seconds>', 'kill the task after this long: seconds (0.5, 30) or 90s, 2m', parseTimeout)
    .option('--json', 'print the whole result (stdout, stderr, exit code, timing, worker) as JSON')
    .action(
      action<InvokeFlags, [string, string[]]>(async (ctx, flags, fleet, args) => {
        const task = await buildTask(flags, args);
        const provider = await ctx.connect();
        const result = await provider.invokeFunction(fleet, task);
        if (flags.json) printJson(result);
        else {
          process.stdout.write(result.stdout);
          process.stderr.write(result.stderr);
          if (result.truncated) process.stderr.write('dsec: the output was cut at the pool\'s capture limit\n');
          if (result.timedOut) process.stderr.write(`dsec: the task timed out after ${(task.timeoutMs ?? 30_000) / 1000} s and was killed (worker ${result.worker})\n`);
        }
        if (result.timedOut) return 124;
        return result.exitCode ?? 137;
      }),
    );
}

async function buildTask(flags: InvokeFlags, args: readonly string[]): Promise<FunctionTask> {
  if ((flags.code === undefined) === (flags.codeFile === undefined)) {
    throw new DsecError('DSEC_USAGE', { message: 'dsec fn invoke needs the program: either -c CODE or --code-file FILE' });
  }
  const code = flags.code ?? (await readFile(flags.codeFile!, 'utf8'));
  const files: Record<string, string> = {};
  for (const entry of flags.inputFile ?? []) {
    const eq = entry.indexOf('=');
    if (eq < 1 || eq === entry.length - 1) throw new DsecError('DSEC_USAGE', { message: `--input-file expects path=local-file, got '${entry}'` });
    const target = entry.slice(0, eq);
    files[target] = (await readFile(path.resolve(entry.slice(eq + 1)))).toString('base64');
  }
  const stdin = flags.stdin === '-' ? (await readAll(process.stdin)).toString('utf8') : flags.stdin;
  const env = parseKeyValues(flags.env, '--env');
  return {
    runtime: flags.runtime,
    code,
    ...(Object.keys(files).length > 0 ? { files } : {}),
    ...(stdin !== undefined ? { stdin } : {}),
    ...(args.length > 0 ? { args: [...args] } : {}),
    ...(env ? { env } : {}),
    ...(flags.timeout !== undefined ? { timeoutMs: flags.timeout } : {}),
  };
}

/** Seconds (fractions allowed) or a duration like 90s, 2m; in milliseconds. */
export function parseTimeout(value: string): number {
  const seconds = /^[0-9]+(\.[0-9]+)?$/.test(value) ? Number(value) : durationSeconds(value);
  if (seconds === undefined || !(seconds > 0)) throw new InvalidArgumentError(`expected seconds (like 30 or 0.5) or a duration like 90s or 2m, got '${value}'`);
  return Math.max(1, Math.round(seconds * 1000));
}
