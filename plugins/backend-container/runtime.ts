/**
 * Finding the OCI runtime and running it. Every runtime call goes through
 * `runRuntime`, which captures output through pipes: that is only safe for
 * commands that exit on their own and leave nothing running that inherited
 * the pipes (state, kill, delete, update). `runc run` starts a long-lived
 * container init, which would inherit a pipe and keep the reader waiting for
 * ever, so `startDetached` hands it a log file instead.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants, openSync, closeSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { DsecError } from '../../core/plugin-api.js';

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
export function runRuntime(runtime: Runtime, args: readonly string[]): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(runtime.path, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
    child.on('error', reject);
    child.on('close', (code, signal) =>
      resolve({
        code,
        signal,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      }),
    );
  });
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
 * Start a container detached. Its stdio (and so the container init's) goes to
 * `logFile`, never to a pipe. Rejects with the tail of the log on failure.
 */
export async function startDetached(runtime: Runtime, args: readonly string[], logFile: string): Promise<void> {
  const fd = openSync(logFile, 'a', 0o600);
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(runtime.path, args, { stdio: ['ignore', fd, fd] });
      child.on('error', reject);
      child.on('exit', (exitCode) => resolve(exitCode));
    });
    if (code !== 0) {
      throw new Error(`${runtime.name} ${args[0]} exited ${code}: ${cleanRuntimeMessage(tail(logFile))}`);
    }
  } finally {
    closeSync(fd);
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
