/**
 * exec, readFile and writeFile in a microVM, through its guest agent
 * (core/guest's GuestAgentClient over the virtio-serial port). An exec runs
 * with the sandbox's environment, working directory and user, as the
 * container backend's do: PATH by default, the spec's env, then the
 * request's on top.
 */
import { constants } from 'node:os';
import type { ExecIO, ExecOutput, ExecRequest, FileContent, ReadFileRequest, SandboxContext, WriteFileRequest } from '../../core/plugin-api.js';
import { DEFAULT_READ_FILE_BYTES, DsecError, stdinBytes } from '../../core/plugin-api.js';
import { DEFAULT_PATH } from './guest-init.js';
import { guestOf } from './vm.js';

const DEFAULT_EXEC_TIMEOUT_MS = 60_000;

export async function execInVm(sandbox: SandboxContext, request: ExecRequest, defaultCap: number, io: ExecIO = {}): Promise<ExecOutput> {
  const [path, ...args] = request.cmd;
  if (!path) throw new Error('the command is empty');
  if (request.openStdin || request.tty) {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'microvm', operation: `exec with ${request.tty ? 'a terminal' : 'an open stdin'}` });
  }
  const guest = await guestOf(sandbox);
  const stdin = stdinBytes(request);
  const result = await guest.exec({
    path,
    args,
    env: { PATH: DEFAULT_PATH, ...sandbox.spec.env, ...request.env },
    cwd: request.workdir || sandbox.spec.workdir || '/',
    user: sandbox.spec.user || 'root',
    ...(stdin !== undefined ? { stdin } : {}),
    timeoutMs: request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
    maxOutputBytes: request.maxOutputBytes ?? defaultCap,
  });
  const streamed = io.onOutput !== undefined;
  if (streamed) {
    if (result.stdout.length > 0) io.onOutput!('stdout', result.stdout);
    if (result.stderr.length > 0) io.onOutput!('stderr', result.stderr);
  }
  return {
    exitCode: result.exitCode,
    signal: result.signal !== undefined ? signalName(result.signal) : result.timedOut ? 'SIGKILL' : null,
    stdout: streamed ? Buffer.alloc(0) : result.stdout,
    stderr: streamed ? Buffer.alloc(0) : result.stderr,
    truncated: result.truncated,
    timedOut: result.timedOut,
    durationMs: result.durationMs,
  };
}

export async function readFileInVm(sandbox: SandboxContext, request: ReadFileRequest): Promise<FileContent> {
  const guest = await guestOf(sandbox);
  const data = await guest.readFile(request.path, request.maxBytes ?? DEFAULT_READ_FILE_BYTES);
  return { path: request.path, data: data.toString('base64'), size: data.length };
}

/** The file is written by the agent (root); for a sandbox running as another user it is then given to that user, as in a container. */
export async function writeFileInVm(sandbox: SandboxContext, request: WriteFileRequest): Promise<true> {
  const guest = await guestOf(sandbox);
  await guest.writeFile(request.path, Buffer.from(request.data, 'base64'), request.mode ?? 0o644);
  const user = sandbox.spec.user;
  if (user && user !== 'root' && user !== '0' && user !== '0:0') {
    const chown = await guest.exec({ path: 'chown', args: [user, request.path], env: { PATH: DEFAULT_PATH }, timeoutMs: 10_000, maxOutputBytes: 4096 });
    if (chown.exitCode !== 0) throw new Error(`cannot give ${request.path} to user ${user}: ${chown.stderr.toString('utf8').trim()}`);
  }
  return true;
}

const SIGNAL_NAMES = new Map(Object.entries(constants.signals).map(([name, number]) => [number, name]));

function signalName(signal: number): string {
  return SIGNAL_NAMES.get(signal) ?? `SIG${signal}`;
}
