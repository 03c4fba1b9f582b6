/**
 * Calls into a container sandbox through its exec server (exec-server.ts):
 * exec, background commands, sessions and files, each mapped onto one
 * GuestSession request with the sandbox's environment, working directory
 * and user (numeric ids resolved on the host at create time, so a
 * sandbox's own /etc/passwd never decides who a command runs as).
 */
import { randomBytes } from 'node:crypto';
import { constants } from 'node:os';
import {
  DsecError,
  stdinBytes,
  type ExecIO,
  type ExecOutput,
  type ExecRequest,
  type FileContent,
  type GuestSession,
  type OutputStream,
  type ProcessAnswers,
  type ProcessCall,
  type ReadFileRequest,
  type SandboxContext,
  type SessionAnswers,
  type SessionCall,
  type WriteFileRequest,
} from '../../core/plugin-api.js';
import { DEFAULT_PATH } from './bundle.js';
import { DEFAULT_EXEC_TIMEOUT_MS, DEFAULT_OUTPUT_CAP_BYTES } from './exec.js';
import type { SandboxUser } from './exec-server.js';

const SIGNALS = constants.signals as Record<string, number>;
const SIGNAL_NAMES = new Map(Object.entries(SIGNALS).map(([name, number]) => [number, name]));
const DEFAULT_READ_BYTES = 16 * 1024 * 1024;

interface Target {
  readonly sandbox: SandboxContext;
  readonly session: GuestSession;
  readonly user: SandboxUser;
  readonly defaultCap: number;
}

/** Who and where: the sandbox's user, its environment (PATH by default, HOME from its passwd entry) under the request's, its workdir. */
function placeOf(target: Target, request: { readonly env?: Readonly<Record<string, string>>; readonly workdir?: string }) {
  const { sandbox, user } = target;
  return {
    uid: user.uid,
    gid: user.gid,
    groups: [...user.groups],
    home: user.home,
    env: { PATH: DEFAULT_PATH, HOME: user.home, ...sandbox.spec.env, ...request.env },
    cwd: request.workdir ?? (sandbox.spec.workdir || '/'),
  };
}

function processRequest(target: Target, request: ExecRequest, handle?: string) {
  const [path, ...args] = request.cmd;
  const stdin = stdinBytes(request);
  return {
    ...(handle ? { handle } : {}),
    ...placeOf(target, request),
    path: path!,
    args,
    ...(stdin !== undefined ? { stdin } : {}),
    ...(request.openStdin || request.tty ? { stdinPipe: true } : {}),
    ...(request.tty ? { tty: request.tty } : {}),
    maxOutputBytes: request.maxOutputBytes ?? target.defaultCap,
  };
}

/**
 * The signal that ended a command: the one the server saw, SIGKILL at a
 * timeout, or (as a shell reports a child killed by signal N as 128+N) the
 * one its exit status names, the way `runc exec` results read too.
 */
function signalOf(number: number | undefined, timedOut: boolean, exitCode?: number | null): string | null {
  if (number !== undefined) return SIGNAL_NAMES.get(number) ?? `SIG${number}`;
  if (timedOut) return 'SIGKILL';
  if (typeof exitCode === 'number' && exitCode > 128 && exitCode <= 128 + 64) return SIGNAL_NAMES.get(exitCode - 128) ?? null;
  return null;
}

/**
 * Collects what a command streams, for a caller that does not stream
 * itself. The server always streams (and caps) output rather than keep it:
 * what it holds is charged to the sandbox's memory, and a command's whole
 * output held in a small sandbox's server (plus its base64 answer) would
 * get the server OOM-killed with the sandbox; the agent holds it instead,
 * as it did for runc exec.
 */
class Collected {
  private readonly parts: Record<OutputStream, Buffer[]> = { stdout: [], stderr: [] };
  readonly listener = (stream: OutputStream, chunk: Buffer): void => void this.parts[stream].push(chunk);
  bytes(stream: OutputStream): Buffer {
    return Buffer.concat(this.parts[stream]);
  }
}

/**
 * A command to its end, as one request to the server, under a handle this
 * side chooses: the caller learns it at once (`io.onStart`, pid 0 until the
 * answer says), so stdin, resizes and signals reach a command with an open
 * stdin or a terminal through the `process` hook while it runs. Its output
 * is streamed to the caller's listener, or collected here. A caller that
 * goes away kills it.
 */
export async function execThroughServer(target: Target, request: ExecRequest, io: ExecIO): Promise<ExecOutput> {
  const { session } = target;
  const timeoutMs = request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS;
  const handle = `x${randomBytes(8).toString('hex')}`;
  const collected = io.onOutput ? undefined : new Collected();
  io.onStart?.(handle, 0);
  const result = await session.exec(
    { ...processRequest(target, request, handle), timeoutMs },
    { onOutput: io.onOutput ?? collected!.listener, ...(io.signal ? { signal: io.signal } : {}) },
  );
  return {
    exitCode: result.exitCode,
    signal: signalOf(result.signal, result.timedOut, result.exitCode),
    stdout: collected ? collected.bytes('stdout') : Buffer.alloc(0),
    stderr: collected ? collected.bytes('stderr') : Buffer.alloc(0),
    truncated: result.truncated,
    timedOut: result.timedOut,
    durationMs: result.durationMs,
  };
}

function signalNumber(name: string): number {
  const number = SIGNALS[name];
  if (number === undefined) throw new DsecError('DSEC_AGENT_REQUEST', { message: `unknown signal ${name}` });
  return number;
}

/** The `process` hook's ops on the exec server. */
export async function processThroughServer(target: Target, call: ProcessCall): Promise<ProcessAnswers[ProcessCall['op']]> {
  const { session } = target;
  switch (call.op) {
    case 'start': {
      // A background command has no timeout unless it asks for one.
      const request = { ...processRequest(target, call.request), timeoutMs: call.request.timeoutMs ?? 0 };
      return session.spawn(request, call.onOutput ? { onOutput: call.onOutput } : {});
    }
    case 'input':
      await session.input(call.handle, call.data ?? Buffer.alloc(0), call.eof === true);
      return true;
    case 'signal':
      await session.signal(call.handle, signalNumber(call.signal));
      return true;
    case 'resize':
      await session.resize(call.handle, call.rows, call.cols);
      return true;
    case 'wait': {
      const result = await waitAborted(session.wait(call.handle, call.timeoutMs), call.signal);
      if (!result) return { running: true };
      return {
        exitCode: result.exitCode,
        signal: signalOf(result.signal, result.timedOut, result.exitCode),
        stdout: result.stdout,
        stderr: result.stderr,
        truncated: result.truncated,
        timedOut: result.timedOut,
        durationMs: result.durationMs,
      };
    }
    case 'get': {
      const snapshot = await session.output(call.handle);
      return {
        handle: call.handle,
        pid: snapshot.pid,
        running: snapshot.running,
        stdout: snapshot.stdout,
        stderr: snapshot.stderr,
        truncated: snapshot.stdoutTruncated || snapshot.stderrTruncated,
        ...(snapshot.running
          ? {}
          : { exitCode: snapshot.exitCode ?? null, signal: signalOf(snapshot.signal, snapshot.timedOut === true), timedOut: snapshot.timedOut === true, durationMs: snapshot.durationMs ?? 0 }),
      };
    }
    case 'list':
      return (await session.processes()).map((entry) => ({
        handle: entry.handle,
        pid: entry.pid,
        running: entry.running,
        ...(entry.running ? {} : { exitCode: entry.exitCode ?? null, signal: signalOf(entry.signal, false) }),
        command: [entry.path, ...entry.args],
        ageMs: entry.ageMs,
      }));
    case 'forget':
      await session.forget(call.handle);
      return true;
  }
}

/** A wait the caller gave up on resolves to undefined at once (the process runs on). */
function waitAborted<T>(waiting: Promise<T>, signal?: AbortSignal): Promise<T | undefined> {
  if (!signal) return waiting;
  return new Promise<T | undefined>((resolve, reject) => {
    if (signal.aborted) return resolve(undefined);
    const onAbort = () => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    waiting.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** The `session` hook's ops on the exec server. */
export async function sessionThroughServer(target: Target, call: SessionCall): Promise<SessionAnswers[SessionCall['op']]> {
  const { session } = target;
  switch (call.op) {
    case 'open': {
      const place = placeOf(target, { env: call.options.env ?? {}, ...(call.options.cwd ? { workdir: call.options.cwd } : {}) });
      const opened = await session.openSession({ handle: call.id, ...place, ...(call.options.shell ? { shell: call.options.shell } : {}) });
      return { id: opened.handle, pid: opened.pid, shell: opened.shell };
    }
    case 'run': {
      // Streamed always, collected here unless the caller streams (see Collected).
      const collected = call.onOutput ? undefined : new Collected();
      const result = await session.runInSession(call.id, call.request.command, {
        timeoutMs: call.request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
        maxOutputBytes: call.request.maxOutputBytes ?? target.defaultCap,
        onOutput: call.onOutput ?? collected!.listener,
        ...(call.signal ? { signal: call.signal } : {}),
      });
      return {
        exitCode: result.exitCode,
        stdout: collected ? collected.bytes('stdout') : Buffer.alloc(0),
        stderr: collected ? collected.bytes('stderr') : Buffer.alloc(0),
        truncated: result.truncated,
        timedOut: result.timedOut,
        interrupted: result.interrupted,
        ended: result.ended,
        durationMs: result.durationMs,
      };
    }
    case 'interrupt':
      await session.interruptSession(call.id);
      return true;
    case 'close':
      await session.closeSession(call.id);
      return true;
    case 'list':
      return (await session.sessions()).map((entry) => ({
        id: entry.handle,
        pid: entry.pid,
        shell: entry.shell,
        busy: entry.busy,
        ended: entry.ended,
        ...(entry.cwd !== undefined ? { cwd: entry.cwd } : {}),
      }));
  }
}

export async function readThroughServer(target: Target, request: ReadFileRequest): Promise<FileContent> {
  const data = await target.session.readFile(request.path, request.maxBytes ?? DEFAULT_READ_BYTES);
  return { path: request.path, data: data.toString('base64'), size: data.length };
}

/** The file and the folders made for it belong to the sandbox's user. */
export async function writeThroughServer(target: Target, request: WriteFileRequest): Promise<true> {
  await target.session.writeFile(request.path, Buffer.from(request.data, 'base64'), { mode: request.mode ?? 0o644, uid: target.user.uid, gid: target.user.gid });
  return true;
}

export { DEFAULT_OUTPUT_CAP_BYTES };
