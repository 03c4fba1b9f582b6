/**
 * exec, readFile and writeFile in a microVM, through its guest agent's
 * session (guest.ts: dsec-guest's async mode over the virtio-serial port),
 * mapped onto GuestSession requests the way the container backend maps
 * them onto its exec server. A command runs with the sandbox's environment
 * (PATH by default, the spec's env, then the request's), working directory
 * and user (a name the guest resolves in its own /etc/passwd: the VM's
 * users are its own business). Background commands and sessions are in
 * processes.ts.
 */
import { constants } from 'node:os';
import {
  DEFAULT_READ_FILE_BYTES,
  DsecError,
  stdinBytes,
  type ExecIO,
  type ExecOutput,
  type ExecRequest,
  type FileContent,
  type GuestProcessRequest,
  type GuestProcessResult,
  type GuestSession,
  type ReadFileRequest,
  type SandboxContext,
  type WriteFileRequest,
} from '../../core/plugin-api.js';
import { DEFAULT_PATH } from './guest-init.js';
import { guestOf } from './vm.js';

export const DEFAULT_EXEC_TIMEOUT_MS = 60_000;
const SIGNALS = constants.signals as Record<string, number>;
const SIGNAL_NAMES = new Map(Object.entries(SIGNALS).map(([name, number]) => [number, name]));
/** /etc/passwd is read to give a written file to the sandbox's user: at most this much of it. */
const MAX_PASSWD_BYTES = 1024 * 1024;

/** One sandbox's calls: its VM's guest session, and the exec output cap when a request gives none. */
export interface Target {
  readonly sandbox: SandboxContext;
  readonly session: GuestSession;
  readonly defaultCap: number;
}

export async function targetOf(sandbox: SandboxContext, defaultCap: number): Promise<Target> {
  return { sandbox, session: await guestOf(sandbox), defaultCap };
}

/** Who and where: the sandbox's user (resolved by the guest), its environment under the request's, its workdir. */
export function placeOf(sandbox: SandboxContext, request: { readonly env?: Readonly<Record<string, string>>; readonly workdir?: string }) {
  return {
    user: sandbox.spec.user || 'root',
    env: { PATH: DEFAULT_PATH, ...sandbox.spec.env, ...request.env },
    cwd: request.workdir || sandbox.spec.workdir || '/',
  };
}

export function processRequest(target: Target, request: ExecRequest): GuestProcessRequest {
  const [path, ...args] = request.cmd;
  if (!path) throw new Error('the command is empty');
  const stdin = stdinBytes(request);
  return {
    ...placeOf(target.sandbox, request),
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
 * one its exit status names, as the container backend reads it.
 */
export function signalOf(number: number | undefined, timedOut: boolean, exitCode?: number | null): string | null {
  if (number !== undefined) return SIGNAL_NAMES.get(number) ?? `SIG${number}`;
  if (timedOut) return 'SIGKILL';
  if (typeof exitCode === 'number' && exitCode > 128 && exitCode <= 128 + 64) return SIGNAL_NAMES.get(exitCode - 128) ?? null;
  return null;
}

export function signalNumber(name: string): number {
  const number = SIGNALS[name];
  if (number === undefined) throw new DsecError('DSEC_AGENT_REQUEST', { message: `unknown signal ${name}` });
  return number;
}

/** A finished process as the exec hook answers it; `streamed`: its output went to the caller already and is not sent twice. */
export function execOutput(result: GuestProcessResult, streamed = false): ExecOutput {
  return {
    exitCode: result.exitCode,
    signal: signalOf(result.signal, result.timedOut, result.exitCode),
    stdout: streamed ? Buffer.alloc(0) : result.stdout,
    stderr: streamed ? Buffer.alloc(0) : result.stderr,
    truncated: result.truncated,
    timedOut: result.timedOut,
    durationMs: result.durationMs,
  };
}

/**
 * A command to its end. A plain one is one request (output streamed to
 * `io.onOutput` as the guest sends it, killed on `io.signal`). One with a
 * terminal, an open stdin or a caller that wants its handle is started
 * under a handle the caller learns at once (`io.onStart`: stdin and resizes
 * reach it through the `process` hook), waited for, then forgotten.
 */
export async function execInVm(target: Target, request: ExecRequest, io: ExecIO = {}): Promise<ExecOutput> {
  const { session } = target;
  const timeoutMs = request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS;
  if (!request.openStdin && !request.tty && !io.onStart) {
    const result = await session.exec({ ...processRequest(target, request), timeoutMs }, { ...(io.onOutput ? { onOutput: io.onOutput } : {}), ...(io.signal ? { signal: io.signal } : {}) });
    return execOutput(result);
  }
  io.signal?.throwIfAborted();
  const started = await session.spawn({ ...processRequest(target, request), timeoutMs }, io.onOutput ? { onOutput: io.onOutput } : {});
  const kill = () => void session.signal(started.handle, SIGNALS.SIGKILL!).catch(() => undefined);
  io.signal?.addEventListener('abort', kill, { once: true });
  try {
    if (io.signal?.aborted) kill();
    io.onStart?.(started.handle, started.pid);
    const result = await session.wait(started.handle);
    if (!result) throw new Error(`the guest stopped waiting for ${started.handle} before it exited`);
    return execOutput(result, io.onOutput !== undefined);
  } finally {
    io.signal?.removeEventListener('abort', kill);
    void session.forget(started.handle).catch(() => undefined);
  }
}

export async function readFileInVm(target: Target, request: ReadFileRequest): Promise<FileContent> {
  const data = await target.session.readFile(request.path, request.maxBytes ?? DEFAULT_READ_FILE_BYTES);
  return { path: request.path, data: data.toString('base64'), size: data.length };
}

/** The file, and the folders made for it, belong to the sandbox's user, as in a container. */
export async function writeFileInVm(target: Target, request: WriteFileRequest): Promise<true> {
  const owner = await ownerOf(target);
  await target.session.writeFile(request.path, Buffer.from(request.data, 'base64'), { mode: request.mode ?? 0o644, ...owner });
  return true;
}

/**
 * The numeric owner of the sandbox's user, resolved as the guest agent
 * resolves a user for exec (native/guest/users.c): `UID:GID` as given, a
 * bare UID with its passwd group (else the UID), a name from the guest's
 * /etc/passwd. Root (or no user) needs no chown: undefined.
 */
async function ownerOf(target: Target): Promise<{ uid: number; gid: number } | undefined> {
  const user = target.sandbox.spec.user;
  if (!user || user === 'root' || user === '0' || user === '0:0') return undefined;
  const numeric = /^(\d+)(?::(\d+))?$/.exec(user);
  if (numeric?.[2] !== undefined) return { uid: Number(numeric[1]), gid: Number(numeric[2]) };
  const passwd = await target.session.readFile('/etc/passwd', MAX_PASSWD_BYTES).catch(() => Buffer.alloc(0));
  for (const line of passwd.toString('utf8').split('\n')) {
    const [name, , uid, gid] = line.split(':');
    if (uid === undefined || gid === undefined || !/^\d+$/.test(uid) || !/^\d+$/.test(gid)) continue;
    if (numeric ? uid === numeric[1] : name === user) return { uid: Number(uid), gid: Number(gid) };
  }
  if (numeric) return { uid: Number(numeric[1]), gid: Number(numeric[1]) };
  throw new DsecError('DSEC_GUEST_COMMAND_FAILED', { id: target.sandbox.spec.id, command: 'dsec-write-file', message: `no user '${user}' in the guest's /etc/passwd to give the file to` });
}
