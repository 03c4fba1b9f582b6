/**
 * The host side of a guest agent: GuestAgentClient talks to dsec-guest
 * (native/dsec-guest.c) or to a plain QEMU guest agent over a unix socket,
 * with the same calls for both. With dsec-guest it uses the dsec-*
 * extensions (blocking exec with cwd, user and timeout in the guest, reset,
 * stat, mkdirs); with qemu-ga it emulates them with standard commands.
 * Which one it is comes from guest-info, asked once on connect.
 *
 * Every call has a timeout, requests go one at a time in order, and anything
 * wrong with the guest or the stream is DSEC_GUEST_UNREACHABLE naming the
 * sandbox: see channel.ts.
 */
import { DsecError } from '../errors.js';
import { AnswerReader } from './answers.js';
import { GuestChannel, GuestCommandError } from './channel.js';
import { execWithQga } from './exec-qga.js';
import { readGuestFile, statGuestPath, writeGuestFile, type GuestFileStat } from './files.js';
import {
  DEFAULT_EXEC_TIMEOUT_MS,
  DEFAULT_MAX_OUTPUT_BYTES,
  EXEC_ANSWER_MARGIN_MS,
  MAX_EXEC_TIMEOUT_MS,
  MAX_GUEST_OUTPUT_BYTES,
  type GuestAgentInfo,
  type GuestConnectOptions,
  type GuestExecRequest,
  type GuestExecResult,
} from './types.js';

const DEFAULT_CONNECT_TIMEOUT_MS = 30_000;
const CALL_TIMEOUT_MS = 30_000;
/** The commands that make an agent dsec-guest: the client uses them only when all are there. */
const DSEC_COMMANDS = ['dsec-exec', 'dsec-reset', 'dsec-stat', 'dsec-mkdirs', 'dsec-chmod'];

export class GuestAgentClient {
  private agentInfo: GuestAgentInfo | undefined;

  private constructor(private readonly channel: GuestChannel) {}

  /**
   * Connect to the agent's socket and wait until it answers: the socket may
   * not exist yet and the agent may not be up (a booting VM), so both are
   * retried until `timeoutMs`.
   */
  static async connect(socketPath: string, options: GuestConnectOptions = {}): Promise<GuestAgentClient> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    const id = options.id ?? socketPath;
    const deadline = Date.now() + timeoutMs;
    const channel = await GuestChannel.connect(socketPath, id, timeoutMs);
    const client = new GuestAgentClient(channel);
    try {
      // A sync sent before the agent opened its port can be lost: ask again, each time waiting longer.
      for (let attempt = 500; ; attempt = Math.min(attempt * 2, 5_000)) {
        const left = deadline - Date.now();
        try {
          await channel.sync(Math.max(1, Math.min(attempt, left)));
          break;
        } catch (error) {
          if (channel.isClosed || deadline - Date.now() <= 0) throw error;
        }
      }
      await client.info();
      return client;
    } catch (error) {
      channel.close();
      if (error instanceof DsecError) throw error;
      throw new DsecError('DSEC_GUEST_UNREACHABLE', { id, message: (error as Error).message }, { cause: error });
    }
  }

  /** The sandbox id errors name. */
  get id(): string {
    return this.channel.sandboxId;
  }

  get closed(): boolean {
    return this.channel.isClosed;
  }

  /** Called once when the connection ends (closed by either side or failed), with the reason. */
  onClose(listener: (reason: string) => void): void {
    this.channel.onClose(listener);
  }

  close(): void {
    this.channel.close();
  }

  /** guest-sync-delimited: resynchronise the stream (drops any stale answer). */
  sync(timeoutMs = CALL_TIMEOUT_MS): Promise<void> {
    return this.channel.sync(timeoutMs);
  }

  async ping(timeoutMs = CALL_TIMEOUT_MS): Promise<void> {
    await this.call('guest-ping', undefined, timeoutMs);
  }

  /** guest-info, asked once and kept. */
  async info(): Promise<GuestAgentInfo> {
    if (this.agentInfo) return this.agentInfo;
    const reader = new AnswerReader(this.id, 'guest-info');
    const answer = reader.object(await this.call('guest-info', undefined, CALL_TIMEOUT_MS));
    const listed = Array.isArray(answer.supported_commands) ? answer.supported_commands : [];
    const commands = listed
      .filter((entry): entry is { name: string; enabled?: unknown } => typeof (entry as { name?: unknown })?.name === 'string')
      .filter((entry) => entry.enabled !== false)
      .map((entry) => entry.name);
    this.agentInfo = {
      version: typeof answer.version === 'string' ? answer.version.slice(0, 200) : 'unknown',
      commands,
      dsec: DSEC_COMMANDS.every((name) => commands.includes(name)),
    };
    return this.agentInfo;
  }

  async exec(request: GuestExecRequest): Promise<GuestExecResult> {
    const info = await this.info();
    const limit = Math.max(0, Math.min(Math.floor(request.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES), MAX_GUEST_OUTPUT_BYTES));
    const checked = { ...request, maxOutputBytes: Number.isFinite(limit) ? limit : DEFAULT_MAX_OUTPUT_BYTES, timeoutMs: execTimeout(request.timeoutMs) };
    try {
      return await (info.dsec ? this.execWithDsec(checked) : execWithQga(this.channel, checked));
    } catch (error) {
      throw commandFailed(this.id, error);
    }
  }

  /** A file's bytes: DSEC_FILE_NOT_FOUND, DSEC_FILE_TOO_LARGE (over maxBytes) or DSEC_FILE_INVALID (a directory, no access). */
  async readFile(path: string, maxBytes: number): Promise<Buffer> {
    return readGuestFile({ channel: this.channel, dsec: (await this.info()).dsec }, path, maxBytes);
  }

  /** What a path is (file, dir, other, missing; symlinks followed) and a file's size. */
  async stat(path: string): Promise<GuestFileStat> {
    return statGuestPath({ channel: this.channel, dsec: (await this.info()).dsec }, path);
  }

  /** Create or replace a file, its parent directories created, with permission bits `mode`. */
  async writeFile(path: string, data: Buffer, mode = 0o644): Promise<void> {
    return writeGuestFile({ channel: this.channel, dsec: (await this.info()).dsec }, path, data, mode);
  }

  /**
   * Kill every process in the guest but the agent, empty each directory and,
   * when the agent is the guest's PID 1, remove the SysV IPC objects
   * (dsec-guest only: how a FnCall worker is made clean between tasks).
   * Returns how many processes were killed and IPC objects removed (0 from
   * an older dsec-guest that does not report it).
   */
  async reset(paths: readonly string[], timeoutMs = CALL_TIMEOUT_MS): Promise<{ killed: number; ipcRemoved: number }> {
    const info = await this.info();
    if (!info.dsec) {
      throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: `guest agent ${info.version} of sandbox ${this.id}`, operation: 'reset (it is not dsec-guest)' });
    }
    const reader = new AnswerReader(this.id, 'dsec-reset');
    const answer = reader.object(await this.call('dsec-reset', { paths: [...paths] }, timeoutMs));
    return { killed: reader.integer(answer.killed, 'killed'), ipcRemoved: answer.ipcRemoved === undefined ? 0 : reader.integer(answer.ipcRemoved, 'ipcRemoved') };
  }

  private async execWithDsec(request: GuestExecRequest & { maxOutputBytes: number; timeoutMs: number }): Promise<GuestExecResult> {
    const { timeoutMs } = request;
    const stdin = request.stdin === undefined ? undefined : Buffer.from(request.stdin);
    const answer = await this.call('dsec-exec', {
      path: request.path,
      arg: [...(request.args ?? [])],
      env: Object.entries(request.env ?? {}).map(([key, value]) => `${key}=${value}`),
      ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
      ...(request.user !== undefined ? { user: request.user } : {}),
      ...(stdin && stdin.length > 0 ? { 'input-data': stdin.toString('base64') } : {}),
      'timeout-ms': timeoutMs,
      'max-output': request.maxOutputBytes,
    }, timeoutMs + EXEC_ANSWER_MARGIN_MS);
    const reader = new AnswerReader(this.id, 'dsec-exec');
    const result = reader.object(answer);
    const out = reader.bytes(result['out-data'], 'out-data', request.maxOutputBytes);
    const err = reader.bytes(result['err-data'], 'err-data', request.maxOutputBytes);
    const exitCode = reader.optionalInteger(result.exitcode, 'exitcode');
    const signal = reader.optionalInteger(result.signal, 'signal');
    return {
      exitCode: exitCode ?? null,
      ...(signal !== undefined ? { signal } : {}),
      stdout: out.data,
      stderr: err.data,
      truncated: out.cut || err.cut || reader.boolean(result['out-truncated'], 'out-truncated', false) || reader.boolean(result['err-truncated'], 'err-truncated', false),
      timedOut: reader.boolean(result['timed-out'], 'timed-out', false),
      durationMs: reader.integer(result['duration-ms'] ?? 0, 'duration-ms'),
    };
  }

  private async call(command: string, args: Record<string, unknown> | undefined, timeoutMs: number): Promise<unknown> {
    try {
      return await this.channel.call(command, args, timeoutMs);
    } catch (error) {
      throw commandFailed(this.id, error);
    }
  }
}

/** The exec's own timeout: the default when absent or not positive, at most what a timer can wait. */
export function execTimeout(timeoutMs: number | undefined): number {
  if (timeoutMs === undefined || !Number.isFinite(timeoutMs) || timeoutMs <= 0) return DEFAULT_EXEC_TIMEOUT_MS;
  return Math.min(Math.ceil(timeoutMs), MAX_EXEC_TIMEOUT_MS);
}

/** A guest's error answer (bad arguments, a user or cwd it lacks) as DSEC_GUEST_COMMAND_FAILED; other errors as they are. */
function commandFailed(id: string, error: unknown): unknown {
  if (!(error instanceof GuestCommandError)) return error;
  return new DsecError('DSEC_GUEST_COMMAND_FAILED', { id, command: error.command, message: error.desc }, { cause: error });
}
