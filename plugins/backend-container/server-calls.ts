/**
 * Calls into a container sandbox through its exec server (exec-server.ts):
 * exec, background commands, sessions and files, each mapped onto one
 * GuestSession request with the sandbox's environment, working directory
 * and user (numeric ids resolved on the host at create time, so a
 * sandbox's own /etc/passwd never decides who a command runs as).
 */
import { constants } from 'node:os';
import {
  DsecError,
  stdinBytes,
  type ExecIO,
  type ExecOutput,
  type ExecRequest,
  type FileContent,
  type GuestSession,
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
 * A command to its end. A plain one is one request (the exec answer). One
 * with a terminal or an open stdin is started under a handle the caller
 * learns at once (`io.onStart`: stdin and resizes reach it by the `process`
 * hook), waited for, then forgotten. A caller that goes away kills it.
 */
export async function execThroughServer(target: Target, request: ExecRequest, io: ExecIO): Promise<ExecOutput> {
  const { session } = target;
  const timeoutMs = request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS;
  if (!request.openStdin && !request.tty && !io.onStart) {
    const result = await session.exec({ ...processRequest(target, request), timeoutMs }, { ...(io.onOutput ? { onOutput: io.onOutput } : {}), ...(io.signal ? { signal: io.signal } : {}) });
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
  const started = await session.spawn({ ...processRequest(target, request), timeoutMs }, io.onOutput ? { onOutput: io.onOutput } : {});
  const kill = () => void session.signal(started.handle, SIGNALS.SIGKILL!).catch(() => undefined);
  io.signal?.addEventListener('abort', kill, { once: true });
  try {
    if (io.signal?.aborted) kill();
    io.onStart?.(started.handle, started.pid);
    const result = (await session.wait(started.handle))!;
    const streamed = io.onOutput !== undefined;
    return {
      exitCode: result.exitCode,
      signal: signalOf(result.signal, result.timedOut, result.exitCode),
      // Streamed output went to the caller already; the server's kept copy is not sent twice.
      stdout: streamed ? Buffer.alloc(0) : result.stdout,
      stderr: streamed ? Buffer.alloc(0) : result.stderr,
      truncated: result.truncated,
      timedOut: result.timedOut,
      durationMs: result.durationMs,
    };
  } finally {
    io.signal?.removeEventListener('abort', kill);
    void session.forget(started.handle).catch(() => undefined);
  }
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
      if (!result) return undefined;
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
      const result = await session.runInSession(call.id, call.request.command, {
        timeoutMs: call.request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
        maxOutputBytes: call.request.maxOutputBytes ?? target.defaultCap,
        ...(call.onOutput ? { onOutput: call.onOutput } : {}),
        ...(call.signal ? { signal: call.signal } : {}),
      });
      return {
        exitCode: result.exitCode,
        stdout: result.stdout,
        stderr: result.stderr,
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
