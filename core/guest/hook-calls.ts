/**
 * The backend hooks `exec`, `process` and `session` answered over a
 * GuestSession: what the container backend (its exec server) and the
 * microVM backend (its guest agent) share. A backend says only how to reach
 * the guest and who and where a command runs (GuestCallTarget); the mapping
 * of each call onto dsec-guest's protocol is here.
 *
 * Output always streams from the guest and is collected on the host when
 * the caller does not stream: what the guest holds is charged to the
 * sandbox's memory (a container's cgroup, a VM's RAM), and a command's whole
 * output kept there (plus its base64 answer) could get the guest agent
 * OOM-killed with the sandbox. The host caps it per stream as it comes.
 */
import { randomBytes } from 'node:crypto';
import { constants } from 'node:os';
import { DsecError } from '../errors.js';
import type { ExecRequest } from '../live.js';
import { stdinBytes, type ExecIO, type ExecOutput, type OutputStream, type ProcessAnswers, type ProcessCall, type SessionAnswers, type SessionCall } from '../live-process.js';
import type { GuestSession } from './mux.js';
import type { GuestProcessRequest, GuestUserFields } from './mux-types.js';
import { DEFAULT_EXEC_TIMEOUT_MS } from './types.js';

const SIGNALS = constants.signals as Record<string, number>;
const SIGNAL_NAMES = new Map(Object.entries(SIGNALS).map(([name, number]) => [number, name]));

/** Who a command runs as, with what environment, where. */
export type GuestPlace = GuestUserFields & { readonly env: Readonly<Record<string, string>>; readonly cwd: string };

/** One sandbox's guest, as a backend hands it to these calls. */
export interface GuestCallTarget {
  readonly session: GuestSession;
  /** The sandbox's user, its environment under the request's, its working directory (or the request's). */
  place(request: { readonly env?: Readonly<Record<string, string>>; readonly workdir?: string }): GuestPlace;
  /** The per-stream output cap when a request names none. */
  readonly defaultCap: number;
}

/** An exec request as dsec-guest takes it: the command, its place, stdin, terminal and cap. */
export function guestProcessRequest(target: GuestCallTarget, request: ExecRequest, handle?: string): GuestProcessRequest {
  const [path, ...args] = request.cmd;
  if (!path) throw new DsecError('DSEC_AGENT_REQUEST', { message: 'the command is empty' });
  const stdin = stdinBytes(request);
  return {
    ...(handle ? { handle } : {}),
    ...target.place(request),
    path,
    args,
    ...(stdin !== undefined ? { stdin } : {}),
    ...(request.openStdin || request.tty ? { stdinPipe: true } : {}),
    ...(request.tty ? { tty: request.tty } : {}),
    maxOutputBytes: request.maxOutputBytes ?? target.defaultCap,
  };
}

/**
 * The signal that ended a command: the one the guest saw, SIGKILL at a
 * timeout, or (as a shell reports a child killed by signal N as 128+N) the
 * one its exit status names, the way `runc exec` results read too.
 */
export function signalOf(number: number | undefined, timedOut: boolean, exitCode?: number | null): string | null {
  if (number !== undefined) return SIGNAL_NAMES.get(number) ?? `SIG${number}`;
  if (timedOut) return 'SIGKILL';
  if (typeof exitCode === 'number' && exitCode > 128 && exitCode <= 128 + 64) return SIGNAL_NAMES.get(exitCode - 128) ?? null;
  return null;
}

function signalNumber(name: string): number {
  const number = SIGNALS[name];
  if (number === undefined) throw new DsecError('DSEC_AGENT_REQUEST', { message: `unknown signal ${name}` });
  return number;
}

/** What a command streams, kept for a caller that does not stream itself. */
class Collected {
  private readonly parts: Record<OutputStream, Buffer[]> = { stdout: [], stderr: [] };
  readonly listener = (stream: OutputStream, chunk: Buffer): void => void this.parts[stream].push(chunk);
  bytes(stream: OutputStream): Buffer {
    return Buffer.concat(this.parts[stream]);
  }
}

/**
 * The `exec` hook: a command to its end, as one request, under a handle
 * this side chooses. The caller learns it at once (`io.onStart`, pid 0 until
 * the answer says), so stdin, resizes and signals reach a command with an
 * open stdin or a terminal through the `process` hook while it runs. Its
 * output goes to the caller's listener, or is collected here. A caller that
 * goes away (`io.signal`) kills it.
 */
export async function execOnGuest(target: GuestCallTarget, request: ExecRequest, io: ExecIO = {}): Promise<ExecOutput> {
  const handle = `x${randomBytes(8).toString('hex')}`;
  const collected = io.onOutput ? undefined : new Collected();
  io.onStart?.(handle, 0);
  const result = await target.session.exec(
    { ...guestProcessRequest(target, request, handle), timeoutMs: request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS },
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

/** The `process` hook: background commands, kept (and their output, up to its cap) by the guest until forgotten. */
export async function processOnGuest(target: GuestCallTarget, call: ProcessCall): Promise<ProcessAnswers[ProcessCall['op']]> {
  const { session } = target;
  switch (call.op) {
    case 'start': {
      // A background command has no timeout unless it asks for one.
      const request = { ...guestProcessRequest(target, call.request), timeoutMs: call.request.timeoutMs ?? 0 };
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
      const timedOut = snapshot.timedOut === true;
      return {
        handle: call.handle,
        pid: snapshot.pid,
        running: snapshot.running,
        stdout: snapshot.stdout,
        stderr: snapshot.stderr,
        truncated: snapshot.stdoutTruncated || snapshot.stderrTruncated,
        ...(snapshot.running
          ? {}
          : { exitCode: snapshot.exitCode ?? null, signal: signalOf(snapshot.signal, timedOut, snapshot.exitCode), timedOut, durationMs: snapshot.durationMs ?? 0 }),
      };
    }
    case 'list':
      return (await session.processes()).map((entry) => ({
        handle: entry.handle,
        pid: entry.pid,
        running: entry.running,
        ...(entry.running ? {} : { exitCode: entry.exitCode ?? null, signal: signalOf(entry.signal, false, entry.exitCode) }),
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

/** The `session` hook: persistent shells in the guest, a run's output streamed (and collected here unless the caller streams). */
export async function sessionOnGuest(target: GuestCallTarget, call: SessionCall): Promise<SessionAnswers[SessionCall['op']]> {
  const { session } = target;
  switch (call.op) {
    case 'open': {
      const place = target.place({ env: call.options.env ?? {}, ...(call.options.cwd ? { workdir: call.options.cwd } : {}) });
      const opened = await session.openSession({ handle: call.id, ...place, ...(call.options.shell ? { shell: call.options.shell } : {}) });
      return { id: opened.handle, pid: opened.pid, shell: opened.shell };
    }
    case 'run': {
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
