/**
 * Exec and files inside a VM, through the guest agent on its virtio-serial
 * port (the plugin API's GuestAgentClient, which speaks to a plain qemu-ga
 * as well as to dsec-guest). One connection per VM, kept open between calls:
 * qemu's chardev takes one client at a time, and the client sends one
 * request at a time in order.
 */
import { constants } from 'node:os';
import {
  DsecError,
  GuestAgentClient,
  stdinBytes,
  type ExecIO,
  type ExecOutput,
  type ExecRequest,
  type FileContent,
  type ReadFileRequest,
  type SandboxSpec,
  type WriteFileRequest,
} from '../../core/plugin-api.js';

export type GuestConnection = GuestAgentClient;

/** Connect and wait until the agent answers a sync (retrying while qemu or the guest are still starting). */
export function connectGuest(socket: string, id: string, timeoutMs: number): Promise<GuestConnection> {
  return GuestAgentClient.connect(socket, { timeoutMs, id });
}

/** The open connection of each VM, by sandbox id, made again when it dropped (qemu restarted by a resume, say). */
export class GuestConnections {
  private readonly open = new Map<string, Promise<GuestConnection>>();

  /** Use `connection` for `id` (the one provision waited on). */
  adopt(id: string, connection: GuestConnection): void {
    this.forget(id);
    this.open.set(id, Promise.resolve(connection));
  }

  async get(id: string, socket: string, timeoutMs = 10_000): Promise<GuestConnection> {
    const pending = this.open.get(id);
    if (pending) {
      const connection = await pending.catch(() => undefined);
      if (connection && !connection.closed) return connection;
      if (this.open.get(id) === pending) this.open.delete(id);
    }
    const connecting = connectGuest(socket, id, timeoutMs);
    this.open.set(id, connecting);
    connecting.catch(() => {
      if (this.open.get(id) === connecting) this.open.delete(id);
    });
    return connecting;
  }

  /** Close and drop `id`'s connection (pause, destroy). */
  forget(id: string): void {
    const pending = this.open.get(id);
    this.open.delete(id);
    void pending?.then((connection) => connection.close(), () => undefined);
  }

  closeAll(): void {
    for (const id of [...this.open.keys()]) this.forget(id);
  }
}

const SIGNAL_NAMES = new Map<number, string>(Object.entries(constants.signals).map(([name, number]) => [number, name]));

/**
 * Run `request` in the guest as the sandbox's spec says (its env under the
 * request's, its workdir unless the request names one, its user), output
 * capped at `defaultCap` per stream unless the request says.
 */
export async function execInGuest(guest: GuestConnection, spec: SandboxSpec, request: ExecRequest, defaultCap: number, io: ExecIO = {}): Promise<ExecOutput> {
  // The QEMU guest agent takes stdin up front and gives output at the end: no open stdin, no terminal.
  if (request.openStdin || request.tty) {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'vm', operation: `exec with ${request.tty ? 'a terminal' : 'an open stdin'} (the QEMU guest agent takes stdin up front)` });
  }
  const [path, ...args] = request.cmd;
  const user = spec.user && spec.user !== 'root' && spec.user !== '0' ? spec.user : undefined;
  const stdin = stdinBytes(request);
  const result = await guest.exec({
    path: path!,
    args,
    env: { ...spec.env, ...request.env },
    cwd: request.workdir ?? (spec.workdir || '/'),
    ...(user ? { user } : {}),
    ...(stdin !== undefined ? { stdin } : {}),
    ...(request.timeoutMs !== undefined ? { timeoutMs: request.timeoutMs } : {}),
    maxOutputBytes: request.maxOutputBytes ?? defaultCap,
  });
  // Streamed callers get the output when the guest gives it: at the end.
  const streamed = io.onOutput !== undefined;
  if (streamed) {
    if (result.stdout.length > 0) io.onOutput!('stdout', result.stdout);
    if (result.stderr.length > 0) io.onOutput!('stderr', result.stderr);
  }
  return {
    exitCode: result.exitCode,
    signal: result.signal !== undefined ? (SIGNAL_NAMES.get(result.signal) ?? String(result.signal)) : result.timedOut ? 'SIGKILL' : null,
    stdout: streamed ? Buffer.alloc(0) : result.stdout,
    stderr: streamed ? Buffer.alloc(0) : result.stderr,
    truncated: result.truncated,
    timedOut: result.timedOut,
    durationMs: result.durationMs,
  };
}

/** The default read cap when the request gives none (the agent fills it; this is the backend's own fallback). */
const DEFAULT_READ_BYTES = 16 * 1024 * 1024;

export async function readGuestFile(guest: GuestConnection, request: ReadFileRequest): Promise<FileContent> {
  const data = await guest.readFile(request.path, request.maxBytes ?? DEFAULT_READ_BYTES);
  return { path: request.path, data: data.toString('base64'), size: data.length };
}

export async function writeGuestFile(guest: GuestConnection, request: WriteFileRequest): Promise<true> {
  await guest.writeFile(request.path, Buffer.from(request.data, 'base64'), request.mode ?? 0o644);
  return true;
}
