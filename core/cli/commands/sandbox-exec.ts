/**
 * `dsec sandbox exec|shell|ps|kill`: run a command with its output printed
 * as it comes (its exit code passed through), an interactive terminal like
 * `docker exec -it` (raw mode, the window size followed, the exit code
 * passed through), and the background commands of a sandbox.
 */
import type { Command } from 'commander';
import { ProcessClient } from '../../agent/client-processes.js';
import { MAX_EXEC_OUTPUT_BYTES, MAX_EXEC_TIMEOUT_MS, type ExecResult } from '../../live.js';
import { streamExec } from '../../sdk/processes.js';
import { action, parseKeyValues, parsePositiveInt } from '../command.js';
import { printJson, table } from '../output.js';

interface ExecFlags {
  timeout: number;
  workdir?: string;
  env?: string[];
  maxOutput?: number;
  stdin?: boolean;
  json?: boolean;
  holder?: string;
  background?: boolean;
}

/** The exit code a command's end maps to: its own, 124 after a timeout (as timeout(1)), else 128 + the signal's number. */
function exitCodeOf(result: Pick<ExecResult, 'exitCode' | 'timedOut'>): number {
  return result.exitCode ?? (result.timedOut ? 124 : 137);
}

export function registerSandboxExecCommands(sandbox: Command): void {
  sandbox
    .command('exec')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .argument('<command...>', 'the command and its arguments; put them after --')
    .description("Run a command in a sandbox, in its persistent state, printing its output as it comes. Exits with the command's exit code.")
    .option('-t, --timeout <ms>', 'kill the command after this many milliseconds', parsePositiveInt, 60_000)
    .option('-w, --workdir <dir>', 'working directory inside the sandbox')
    .option('-e, --env <key=value>', 'extra environment variable (repeatable)', (v: string, p: string[] = []) => [...p, v])
    .option('--max-output <bytes>', 'cap on the output of stdout and stderr, each', parsePositiveInt)
    .option('-i, --stdin', "stream this command's standard input to the sandbox command, as it comes")
    .option('--holder <name>', 'only if this holder has the sandbox')
    .option('--background', 'start it in the background and print its handle (see dsec sandbox ps)')
    .option('--json', 'print the result (stdout, stderr, exit code, truncation) as JSON, once it ended')
    .action(
      action<ExecFlags, [string, string[]]>(async (ctx, flags, id, command) => {
        const provider = await ctx.connect();
        const options = {
          timeoutMs: flags.timeout,
          ...(flags.workdir ? { workdir: flags.workdir } : {}),
          ...(flags.env ? { env: parseKeyValues(flags.env, '--env') } : {}),
          ...(flags.maxOutput !== undefined ? { maxOutputBytes: flags.maxOutput } : {}),
          ...(flags.holder ? { holder: flags.holder } : {}),
        };
        if (flags.background) {
          const started = await new ProcessClient(await provider.sandboxAgent(id)).start(id, { cmd: command, ...options, background: true });
          if (flags.json) printJson(started);
          else process.stdout.write(`${started.handle}\n`);
          return 0;
        }
        // Ctrl-C gives up: the caller goes away, and the agent kills the command.
        const giveUp = new AbortController();
        const onInterrupt = () => giveUp.abort();
        process.once('SIGINT', onInterrupt);
        try {
          const result = (await streamExec(provider, id, command, {
            ...options,
            signal: giveUp.signal,
            ...(flags.stdin ? { stdin: process.stdin } : {}),
            ...(flags.json ? {} : { onStdout: (chunk: Buffer) => process.stdout.write(chunk), onStderr: (chunk: Buffer) => process.stderr.write(chunk) }),
          })) as ExecResult;
          if (flags.json) printJson(result);
          if (!flags.json && result.truncated) process.stderr.write('dsec: output was cut at the capture limit\n');
          if (!flags.json && result.timedOut) process.stderr.write(`dsec: the command timed out after ${flags.timeout} ms and was killed\n`);
          return exitCodeOf(result);
        } catch (error) {
          if (!giveUp.signal.aborted) throw error;
          // As a shell does for a job stopped with Ctrl-C: 128 + SIGINT.
          process.stderr.write('dsec: interrupted; the command was killed in the sandbox\n');
          return 130;
        } finally {
          process.off('SIGINT', onInterrupt);
        }
      }),
    );

  sandbox
    .command('shell')
    .argument('<id>', 'the sandbox id (see dsec sandbox ls)')
    .argument('[command...]', 'what to run on the terminal (default: the sandbox\'s bash if it has one, else sh)')
    .description('An interactive terminal in a sandbox, like docker exec -it: a pseudo-terminal of your window\'s size, followed as it changes. Exits with the shell\'s exit code.')
    .option('-w, --workdir <dir>', 'working directory inside the sandbox')
    .option('-e, --env <key=value>', 'extra environment variable (repeatable)', (v: string, p: string[] = []) => [...p, v])
    .option('--holder <name>', 'only if this holder has the sandbox')
    .action(
      action<{ workdir?: string; env?: string[]; holder?: string }, [string, string[]]>(async (ctx, flags, id, command) => {
        const provider = await ctx.connect();
        const cmd = command.length > 0 ? command : ['/bin/sh', '-c', 'if [ -x /bin/bash ]; then exec /bin/bash -i; else exec /bin/sh -i; fi'];
        const size = () => ({ rows: process.stdout.rows || 24, cols: process.stdout.columns || 80 });
        const raw = process.stdin.isTTY === true;
        const client = new ProcessClient(await provider.sandboxAgent(id));
        let handle: string | undefined;
        const onResize = () => {
          const { rows, cols } = size();
          if (handle) void client.resize(id, handle, rows, cols).catch(() => undefined);
        };
        if (raw) process.stdin.setRawMode(true);
        process.stdout.on('resize', onResize);
        try {
          const result = (await streamExec(provider, id, cmd, {
            tty: size(),
            stdin: process.stdin,
            // An interactive shell runs as long as its user wants, and prints as much.
            timeoutMs: MAX_EXEC_TIMEOUT_MS,
            maxOutputBytes: MAX_EXEC_OUTPUT_BYTES,
            ...(flags.workdir ? { workdir: flags.workdir } : {}),
            ...(flags.env ? { env: parseKeyValues(flags.env, '--env') } : {}),
            ...(flags.holder ? { holder: flags.holder } : {}),
            onStart: (started) => {
              handle = started;
            },
            onStdout: (chunk) => process.stdout.write(chunk),
            onStderr: (chunk) => process.stderr.write(chunk),
          })) as ExecResult;
          if (result.truncated) process.stderr.write('\r\ndsec: the session printed more than the 32 MiB a call carries; the rest was cut\r\n');
          return exitCodeOf(result);
        } finally {
          process.stdout.off('resize', onResize);
          if (raw) process.stdin.setRawMode(false);
          // The terminal's stdin stream would keep the process alive.
          process.stdin.destroy();
        }
      }),
    );

  sandbox
    .command('ps')
    .argument('<id>', 'the sandbox id')
    .description('List the background commands of a sandbox (started with exec --background or the SDK): handle, pid, state, command.')
    .option('--json', 'print them as JSON')
    .action(
      action<{ json?: boolean }, [string]>(async (ctx, flags, id) => {
        const list = await new ProcessClient(await (await ctx.connect()).sandboxAgent(id)).list(id);
        if (flags.json) {
          printJson(list);
          return 0;
        }
        if (list.length === 0) {
          process.stdout.write('No background commands.\n');
          return 0;
        }
        const rows = [['HANDLE', 'PID', 'STATE', 'AGE', 'COMMAND']];
        for (const entry of list) {
          const state = entry.running ? 'running' : entry.signal ? `killed (${entry.signal})` : `exited ${entry.exitCode}`;
          rows.push([entry.handle, String(entry.pid), state, `${Math.round(entry.ageMs / 1000)}s`, entry.command.join(' ')]);
        }
        process.stdout.write(table(rows));
        return 0;
      }),
    );

  sandbox
    .command('kill')
    .argument('<id>', 'the sandbox id')
    .argument('<handle>', 'the background command (see dsec sandbox ps)')
    .description('Signal a background command (its process group), or with --forget kill it and drop its record and output.')
    .option('-s, --signal <name>', 'the signal', 'SIGTERM')
    .option('--forget', 'SIGKILL it if it runs, and forget it')
    .action(
      action<{ signal: string; forget?: boolean }, [string, string]>(async (ctx, flags, id, handle) => {
        const client = new ProcessClient(await (await ctx.connect()).sandboxAgent(id));
        if (flags.forget) await client.forget(id, handle);
        else await client.signal(id, handle, flags.signal);
        return 0;
      }),
    );
}
