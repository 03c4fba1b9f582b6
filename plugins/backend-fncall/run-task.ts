/**
 * One task on one worker, through its guest agent: find the interpreter,
 * write the program and files into /work, run `<interpreter> /work/main.<ext>
 * args...` with the task's stdin, env, timeout and output cap, then reset the
 * worker (every other process killed, the scratch dirs emptied) so the next
 * task finds it as new. What the worker must become afterwards (kept, or
 * replaced) is part of the outcome.
 */
import { posix } from 'node:path';
import { DsecError, isDsecError, type SandboxSpec } from '../../core/plugin-api.js';
import { RESET_PATHS, WORK_DIR } from './shape.js';
import type { PreparedTask } from './task.js';

/** The guest agent calls a worker needs (core/guest's client, behind guest-channel.ts). */
export interface WorkerChannel {
  exec(request: WorkerExecRequest): Promise<WorkerExecResult>;
  /** Create or replace a file, its parent folders created. */
  writeFile(path: string, data: Buffer, mode: number): Promise<void>;
  /** What is at `path`, symlinks followed. */
  stat(path: string): Promise<'file' | 'dir' | 'other' | 'missing'>;
  /** Kill every other process of the worker and empty `paths`; resolves to how many processes were killed. */
  reset(paths: readonly string[]): Promise<number>;
  close(): void;
  readonly isClosed: boolean;
}

export interface WorkerExecRequest {
  readonly path: string;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly cwd: string;
  readonly stdin?: Buffer;
  readonly timeoutMs: number;
  readonly maxOutputBytes: number;
}

export interface WorkerExecResult {
  readonly exitCode: number | null;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  readonly truncated: boolean;
  readonly timedOut: boolean;
  readonly durationMs: number;
}

/** What a task's run gave: the answer (or the error to throw), and whether the worker must go. */
export interface TaskOutcome {
  readonly result?: { stdout: string; stderr: string; exitCode: number | null; timedOut: boolean; truncated: boolean; durationMs: number };
  readonly error?: Error;
  /** Why the worker must be replaced rather than take the next task; undefined: it is clean and free. */
  readonly replaceBecause?: string;
}

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Where each environment has each interpreter: looked up once (a stat per
 * PATH folder over the guest socket), then known. An environment is its
 * layers and PATH, which a worker never changes (its root is read-only).
 */
export class InterpreterCache {
  private readonly found = new Map<string, Promise<string | undefined>>();

  resolve(channel: WorkerChannel, spec: SandboxSpec, interpreter: string): Promise<string | undefined> {
    const searchPath = spec.env.PATH ?? DEFAULT_PATH;
    const key = JSON.stringify([spec.layers.map((layer) => layer.digest), searchPath, interpreter]);
    let answer = this.found.get(key);
    if (!answer) {
      answer = lookUp(channel, searchPath, interpreter);
      this.found.set(key, answer);
      // A failed look-up (the worker went away) is asked again next time.
      answer.catch(() => this.found.delete(key));
    }
    return answer;
  }
}

async function lookUp(channel: WorkerChannel, searchPath: string, interpreter: string): Promise<string | undefined> {
  if (interpreter.startsWith('/')) return (await channel.stat(interpreter)) === 'file' ? interpreter : undefined;
  for (const dir of searchPath.split(':').filter((entry) => entry.startsWith('/'))) {
    const candidate = posix.join(dir, interpreter);
    if ((await channel.stat(candidate)) === 'file') return candidate;
  }
  return undefined;
}

export interface RunContext {
  readonly fleet: string;
  readonly workerId: string;
  readonly spec: SandboxSpec;
  readonly outputCapBytes: number;
  readonly interpreters: InterpreterCache;
}

export async function runTask(channel: WorkerChannel, task: PreparedTask, context: RunContext): Promise<TaskOutcome> {
  let interpreter: string | undefined;
  try {
    interpreter = await context.interpreters.resolve(channel, context.spec, task.interpreter);
  } catch (error) {
    return { error: unreachable(context.workerId, error), replaceBecause: `its guest agent failed: ${(error as Error).message}` };
  }
  if (!interpreter) {
    const where = task.interpreter.startsWith('/') ? 'there' : `in PATH (${context.spec.env.PATH ?? DEFAULT_PATH})`;
    // Nothing ran and nothing was written: the worker stays as it was.
    return { error: new DsecError('DSEC_FUNCTION_INVALID', { fleet: context.fleet, message: `runtime ${task.interpreter} is not in the fleet's environment (not found ${where})` }) };
  }

  let outcome: TaskOutcome;
  try {
    for (const file of task.files) await channel.writeFile(file.path, file.data, 0o644);
    const ran = await channel.exec({
      path: interpreter,
      args: [task.program, ...task.args],
      env: { ...context.spec.env, ...task.env },
      cwd: WORK_DIR,
      ...(task.stdin ? { stdin: task.stdin } : {}),
      timeoutMs: task.timeoutMs,
      maxOutputBytes: context.outputCapBytes,
    });
    outcome = {
      result: {
        stdout: ran.stdout.toString('utf8'),
        stderr: ran.stderr.toString('utf8'),
        exitCode: ran.timedOut ? null : ran.exitCode,
        timedOut: ran.timedOut,
        truncated: ran.truncated,
        durationMs: ran.durationMs,
      },
      // A task that ran out of time may have left the worker in any state: it is not trusted again.
      ...(ran.timedOut ? { replaceBecause: `a task ran past its timeout of ${task.timeoutMs} ms` } : {}),
    };
  } catch (error) {
    if (!isGuestRefusal(error)) return { error: unreachable(context.workerId, error), replaceBecause: `its guest agent failed: ${(error as Error).message}` };
    // The guest answered but refused (a file it could not write: /work full): the worker is fine once reset.
    outcome = { error: new DsecError('DSEC_FUNCTION_INVALID', { fleet: context.fleet, message: (error as Error).message }, { cause: error }) };
  }
  if (outcome.replaceBecause) return outcome;
  try {
    await channel.reset(RESET_PATHS);
  } catch (error) {
    return { ...outcome, replaceBecause: `resetting it after a task failed: ${(error as Error).message}` };
  }
  return outcome;
}

/**
 * The guest answered and refused (a DsecError about the call: a file it
 * could not write), as opposed to a guest that does not answer or a stream
 * that broke (DSEC_GUEST_UNREACHABLE, or anything unexpected).
 */
function isGuestRefusal(error: unknown): boolean {
  return isDsecError(error) && error.code !== 'DSEC_GUEST_UNREACHABLE';
}

function unreachable(workerId: string, error: unknown): DsecError {
  if (isDsecError(error, 'DSEC_GUEST_UNREACHABLE')) return error as DsecError;
  return new DsecError('DSEC_GUEST_UNREACHABLE', { id: workerId, message: (error as Error).message }, { cause: error });
}
