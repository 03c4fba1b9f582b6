/**
 * Finding the OCI runtime and running it. Every runtime call is started by
 * the launcher (launcher.ts: a small shell, so the agent is never forked),
 * with its output in files rather than pipes: `runc run --detach` leaves a
 * long-lived container init behind that inherits the runtime's stdio, and a
 * pipe held by it would keep a reader waiting for as long as it runs. So
 * `runRuntime` is for commands whose (short) output is read back, and
 * `startDetached` appends everything to a log file.
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import path from 'node:path';
import { DsecError } from '../../core/plugin-api.js';
import { launcher } from './launcher.js';

export type RuntimeName = 'runc' | 'crun';

export interface Runtime {
  readonly name: RuntimeName;
  /** Absolute path of the runtime binary. */
  readonly path: string;
}

export interface RunResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Look the runtime up on PATH (or take the given path); missing -> DSEC_RUNTIME_MISSING. */
export function findRuntime(name: RuntimeName, explicitPath?: string): Runtime {
  const candidates = explicitPath
    ? [explicitPath]
    : [...(process.env.PATH ?? '').split(':').filter(Boolean), '/usr/sbin', '/usr/bin', '/sbin', '/usr/local/sbin']
        .map((dir) => path.join(dir, name));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return { name, path: path.resolve(candidate) };
    } catch {
      // not here; try the next one
    }
  }
  throw new DsecError('DSEC_RUNTIME_MISSING', { looked: explicitPath ?? `${name} on PATH` });
}

/** Run the runtime to completion, capturing its (short) output. Never throws for a non-zero exit. */
export async function runRuntime(runtime: Runtime, args: readonly string[]): Promise<RunResult> {
  const { code, signal, stdout, stderr } = await launcher().run(runtime.path, args);
  return { code, signal, stdout, stderr };
}

/** Like runRuntime, but a non-zero exit becomes an Error carrying the runtime's own words. */
export async function runRuntimeOk(runtime: Runtime, args: readonly string[]): Promise<RunResult> {
  const result = await runRuntime(runtime, args);
  if (result.code !== 0) {
    throw new Error(`${runtime.name} ${args[0]} exited ${result.code ?? result.signal}: ${cleanRuntimeMessage(result.stderr || result.stdout)}`);
  }
  return result;
}

/**
 * The command line that runs the runtime with `args`, behind `prefix` (the
 * native helper's `spawn ... --`, which gives it the sandbox's process traits
 * and then execs it; see core/native.ts): `[file, ...args]`. No prefix, no
 * extra process.
 */
export function runtimeCommand(runtime: Runtime, args: readonly string[], prefix: readonly string[] = []): [string, string[]] {
  const [file, ...rest] = [...prefix, runtime.path, ...args];
  return [file!, rest];
}

/**
 * Start a container detached, behind `prefix` (see runtimeCommand). Its stdio
 * (and so the container init's) goes to `logFile`, never to a pipe; `fds`
 * are opened read-write as fds 3, 4, ... for `--preserve-fds`. Rejects
 * with the tail of the log on failure.
 */
export async function startDetached(runtime: Runtime, args: readonly string[], logFile: string, prefix: readonly string[] = [], fds: readonly string[] = []): Promise<void> {
  const [file, words] = runtimeCommand(runtime, args, prefix);
  const { code, signal } = await launcher().run(file, words, { logFile, ...(fds.length > 0 ? { fds } : {}) });
  if (code !== 0) {
    throw new Error(`${runtime.name} ${args[0]} exited ${code ?? signal}: ${cleanRuntimeMessage(tail(logFile))}`);
  }
}

/** runc logs as `time="..." level=error msg="..."`; keep the message part. */
export function cleanRuntimeMessage(text: string): string {
  const messages = [...text.matchAll(/msg="((?:[^"\\]|\\.)*)"/g)].map((match) => match[1].replace(/\\"/g, '"'));
  const chosen = messages.length > 0 ? messages.join('; ') : text;
  return chosen.trim().slice(-2000) || '(no output)';
}

function tail(file: string, bytes = 4096): string {
  try {
    const text = readFileSync(file, 'utf8');
    return text.slice(-bytes);
  } catch {
    return '';
  }
}

/** Make FIFOs (mode 0600), for the exec server's channel; through the launcher, so the agent is not forked. */
export async function makeFifos(paths: readonly string[]): Promise<void> {
  const { code, stderr } = await launcher().run('mkfifo', ['-m', '600', ...paths]);
  if (code !== 0) throw new Error(`mkfifo ${paths.join(' ')} exited ${code}: ${stderr.trim()}`);
}
