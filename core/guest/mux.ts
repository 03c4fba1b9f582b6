/**
 * GuestSession: the host side of dsec-guest's async mode (protocol 2,
 * docs/guest-agent.md), over a unix socket or a FIFO pair (mux-transport.ts).
 * One session carries any number of requests at once (answers matched by
 * id: mux-wire.ts), output and exit events dispatched by handle, processes
 * in the foreground or background with stdin, terminals and streaming,
 * persistent shells, and whole-file reads and writes.
 *
 * Everything the guest sends is untrusted and checked (mux-parse.ts). A
 * guest that does not answer in time, sends garbage or closes the stream
 * fails every pending call with DSEC_GUEST_UNREACHABLE naming the sandbox
 * and closes the session: open a new one (a new hello: the agent then kills
 * the foreground processes of the old one; background processes and
 * sessions stay).
 *
 *   const session = await GuestSession.open(await openFifoTransport(inFifo, outFifo), { id: sandboxId });
 *   const { exitCode, stdout } = await session.exec({ path: 'python3', args: ['-c', 'print(1)'], uid: 1000, gid: 1000 });
 */
import { randomBytes } from 'node:crypto';
import { DsecError } from '../errors.js';
import { AnswerReader } from './answers.js';
import { GuestCommandError } from './channel.js';
import { execTimeout } from './client.js';
import type { GuestTransport } from './mux-transport.js';
import {
  GUEST_CALL_TIMEOUT_MS,
  GUEST_FILE_CHUNK,
  MAX_GUEST_INPUT_CHUNK,
  MAX_GUEST_READ_BYTES,
  type GuestExitEvent,
  type GuestOutputListener,
  type GuestProcessRequest,
  type GuestProcessResult,
  type GuestProcessSnapshot,
  type GuestProcessSummary,
  type GuestSessionRequest,
  type GuestSessionRunResult,
  type GuestSessionSummary,
} from './mux-types.js';
import { envList, parseExitEvent, parseOutputEvent, parseProcessResult, parseRunResult, parseSessionSummaries, parseSnapshot, parseSummaries, processArguments, userArguments } from './mux-parse.js';
import { MuxWire } from './mux-wire.js';
import { DEFAULT_EXEC_TIMEOUT_MS, DEFAULT_MAX_OUTPUT_BYTES, EXEC_ANSWER_MARGIN_MS, MAX_GUEST_OUTPUT_BYTES } from './types.js';

const PROTOCOL = 2;
const DEFAULT_OPEN_TIMEOUT_MS = 30_000;
/** A session run's interrupt takes up to 4 s (SIGINT, SIGKILL 2 s later, the shell 2 s after that) past its timeout. */
const INTERRUPT_ESCALATION_MS = 4_000;

export interface GuestSessionOptions {
  /** The sandbox, named in every error. */
  readonly id: string;
  /** How long the sync and the hello may take. @default 30000 */
  readonly timeoutMs?: number;
}

export class GuestSession {
  private readonly outputListeners = new Map<string, GuestOutputListener>();
  private readonly exitListeners: ((event: GuestExitEvent) => void)[] = [];
  /** dsec-input calls per handle, one at a time (the agent takes the next after the answer). */
  private readonly inputs = new Map<string, Promise<unknown>>();

  private constructor(
    private readonly wire: MuxWire,
    /** The agent's version string (`dsec-guest 2.0.0`). */
    readonly version: string,
    /** The agent's count of hellos: this session's number. */
    readonly generation: number,
    /** How many foreground processes of the previous host the hello killed. */
    readonly killed: number,
  ) {
    wire.onEvent((name, data) => this.event(name, data));
  }

  /** guest-sync-delimited, then dsec-hello: the connection is in async mode from its answer. */
  static async open(transport: GuestTransport, options: GuestSessionOptions): Promise<GuestSession> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_OPEN_TIMEOUT_MS;
    const deadline = Date.now() + timeoutMs;
    const wire = new MuxWire(transport, options.id);
    try {
      await wire.sync(timeoutMs);
      const reader = new ClosingReader(wire, 'dsec-hello');
      let value: unknown;
      try {
        value = await wire.call('dsec-hello', { client: randomBytes(12).toString('hex') }, Math.max(1, deadline - Date.now()));
      } catch (error) {
        if (error instanceof GuestCommandError) throw wire.unreachable(`it does not speak protocol ${PROTOCOL} (dsec-hello: ${error.desc})`, error);
        throw error;
      }
      const answer = reader.object(value);
      const protocol = reader.integer(answer.protocol, 'protocol');
      if (protocol !== PROTOCOL) throw reader.invalid(`it speaks protocol ${protocol}, not ${PROTOCOL}`);
      return new GuestSession(wire, reader.string(answer.version, 'version').slice(0, 200), reader.integer(answer.generation, 'generation', 1), reader.integer(answer.killed, 'killed'));
    } catch (error) {
      wire.close('the session could not be opened');
      throw error;
    }
  }

  get closed(): boolean {
    return this.wire.closed;
  }

  /** Called once when the session ends (closed by either side, or failed), with the reason. */
  onClose(listener: (reason: string) => void): void {
    this.wire.onClose(listener);
  }

  close(): void {
    this.wire.close();
  }

  // processes ----------------------------------------------------------------

  /** Run a process and wait for it. With onOutput its output is streamed there (stdout and stderr in the result are then empty). */
  async exec(request: GuestProcessRequest, options: { onOutput?: GuestOutputListener; signal?: AbortSignal } = {}): Promise<GuestProcessResult> {
    const { signal, onOutput } = options;
    signal?.throwIfAborted();
    const handle = request.handle ?? newHandle();
    const timeoutMs = request.timeoutMs === 0 ? 0 : execTimeout(request.timeoutMs);
    const maxOutput = outputLimit(request.maxOutputBytes);
    // On abort the process group is killed; its answer then comes at once and is awaited, so the handle is free when this settles.
    const abort = () => void this.signal(handle, 9, true).catch(() => undefined);
    if (onOutput) this.outputListeners.set(handle, onOutput);
    signal?.addEventListener('abort', abort, { once: true });
    try {
      const value = await this.call('dsec-exec', processArguments(request, handle, { background: false, stream: onOutput !== undefined, timeoutMs, maxOutput }), timeoutMs === 0 ? undefined : timeoutMs + EXEC_ANSWER_MARGIN_MS);
      signal?.throwIfAborted();
      return parseProcessResult(this.reader('dsec-exec'), value, maxOutput);
    } finally {
      signal?.removeEventListener('abort', abort);
      if (onOutput) this.outputListeners.delete(handle);
    }
  }

  /** Start a background process: it outlives this call (and this session); wait(), output(), forget() reach it by handle. */
  async spawn(request: GuestProcessRequest, options: { onOutput?: GuestOutputListener } = {}): Promise<{ handle: string; pid: number }> {
    const handle = request.handle ?? newHandle();
    const timeoutMs = request.timeoutMs === undefined || request.timeoutMs <= 0 ? 0 : execTimeout(request.timeoutMs);
    if (options.onOutput) this.outputListeners.set(handle, options.onOutput);
    try {
      const args = processArguments(request, handle, { background: true, stream: options.onOutput !== undefined, timeoutMs, maxOutput: outputLimit(request.maxOutputBytes) });
      const reader = this.reader('dsec-exec');
      const answer = reader.object(await this.call('dsec-exec', args, GUEST_CALL_TIMEOUT_MS));
      return { handle: reader.string(answer.handle, 'handle'), pid: reader.integer(answer.pid, 'pid', 1) };
    } catch (error) {
      this.outputListeners.delete(handle);
      throw error;
    }
  }

  /** Write to a process's stdin (its terminal for a tty); resolves once the process took it all. eof closes stdin (a tty gets ^D). */
  input(handle: string, data: Buffer = Buffer.alloc(0), eof = false): Promise<void> {
    const previous = this.inputs.get(handle) ?? Promise.resolve();
    const next = previous.catch(() => undefined).then(async () => {
      for (let offset = 0; offset < data.length || offset === 0; offset += MAX_GUEST_INPUT_CHUNK) {
        const chunk = data.subarray(offset, offset + MAX_GUEST_INPUT_CHUNK);
        const last = offset + MAX_GUEST_INPUT_CHUNK >= data.length;
        // Its answer waits on the process reading: no timeout of its own (the wire's heartbeat watches the guest).
        await this.call('dsec-input', { handle, ...(chunk.length > 0 ? { data: chunk.toString('base64') } : {}), ...(last && eof ? { eof: true } : {}) }, undefined);
        if (last) break;
      }
    });
    this.inputs.set(handle, next);
    void next.finally(() => {
      if (this.inputs.get(handle) === next) this.inputs.delete(handle);
    }).catch(() => undefined);
    return next;
  }

  /** Send a signal (1..64) to the process group (or only the process). A process that has exited is left alone. */
  async signal(handle: string, signal: number, group = true): Promise<void> {
    await this.call('dsec-signal', { handle, signal, group }, GUEST_CALL_TIMEOUT_MS);
  }

  /** A tty process's terminal size (its programs get SIGWINCH). */
  async resize(handle: string, rows: number, cols: number): Promise<void> {
    await this.call('dsec-resize', { handle, rows, cols }, GUEST_CALL_TIMEOUT_MS);
  }

  /** A background process's result once it exited (the output kept); undefined when timeoutMs passed first. */
  async wait(handle: string, timeoutMs?: number): Promise<GuestProcessResult | undefined> {
    const bounded = timeoutMs !== undefined && timeoutMs > 0;
    const value = await this.call('dsec-wait', { handle, ...(bounded ? { 'timeout-ms': Math.ceil(timeoutMs) } : {}) }, bounded ? Math.ceil(timeoutMs) + EXEC_ANSWER_MARGIN_MS : undefined);
    const reader = this.reader('dsec-wait');
    if (reader.object(value).exited === false) return undefined;
    return parseProcessResult(reader, value, MAX_GUEST_OUTPUT_BYTES);
  }

  /** A process's output kept so far and its state. */
  async output(handle: string): Promise<GuestProcessSnapshot> {
    return parseSnapshot(this.reader('dsec-output'), await this.call('dsec-output', { handle }, GUEST_CALL_TIMEOUT_MS));
  }

  /** The background processes (running or finished, not yet forgotten). */
  async processes(): Promise<GuestProcessSummary[]> {
    return parseSummaries(this.reader('dsec-procs'), await this.call('dsec-procs', undefined, GUEST_CALL_TIMEOUT_MS));
  }

  /** Kill a background process if it runs and drop its record. */
  async forget(handle: string): Promise<void> {
    await this.call('dsec-forget', { handle }, GUEST_CALL_TIMEOUT_MS);
    this.outputListeners.delete(handle);
  }

  /** Called for every background process that exits while this session is the agent's current one. */
  onExit(listener: (event: GuestExitEvent) => void): void {
    this.exitListeners.push(listener);
  }

  // sessions -----------------------------------------------------------------

  /** Start a persistent shell (cwd, variables and functions carry from one run to the next). */
  async openSession(request: GuestSessionRequest = {}): Promise<{ handle: string; pid: number; shell: string }> {
    const args = {
      handle: request.handle ?? newHandle(),
      ...(request.shell !== undefined ? { shell: request.shell } : {}),
      ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
      env: envList(request.env),
      ...userArguments(request),
    };
    const reader = this.reader('dsec-session-open');
    const answer = reader.object(await this.call('dsec-session-open', args, GUEST_CALL_TIMEOUT_MS));
    return { handle: reader.string(answer.handle, 'handle'), pid: reader.integer(answer.pid, 'pid', 1), shell: reader.string(answer.shell, 'shell') };
  }

  /**
   * Run a command in the shell and wait until it finished. timeoutMs
   * (@default 60000; 0: none) interrupts it; an abort interrupts it too (its
   * answer is awaited, then the abort's reason thrown). A second run while
   * one is in flight is DSEC_SANDBOX_BUSY.
   */
  async runInSession(
    handle: string,
    command: string,
    options: { timeoutMs?: number; maxOutputBytes?: number; onOutput?: GuestOutputListener; signal?: AbortSignal } = {},
  ): Promise<GuestSessionRunResult> {
    const { signal, onOutput } = options;
    signal?.throwIfAborted();
    const timeoutMs = options.timeoutMs === 0 ? 0 : execTimeout(options.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS);
    const maxOutput = outputLimit(options.maxOutputBytes);
    const abort = () => void this.interruptSession(handle).catch(() => undefined);
    if (onOutput) this.outputListeners.set(handle, onOutput);
    signal?.addEventListener('abort', abort, { once: true });
    try {
      const args = { handle, command, 'timeout-ms': timeoutMs, 'max-output': maxOutput, ...(onOutput ? { stream: true } : {}) };
      const value = await this.call('dsec-session-run', args, timeoutMs === 0 ? undefined : timeoutMs + INTERRUPT_ESCALATION_MS + EXEC_ANSWER_MARGIN_MS);
      signal?.throwIfAborted();
      return parseRunResult(this.reader('dsec-session-run'), value, maxOutput);
    } finally {
      signal?.removeEventListener('abort', abort);
      if (onOutput) this.outputListeners.delete(handle);
    }
  }

  /** Interrupt the run in flight (SIGINT to what it started, then SIGKILL; the shell itself only if it is stuck). */
  async interruptSession(handle: string): Promise<void> {
    await this.call('dsec-session-interrupt', { handle }, GUEST_CALL_TIMEOUT_MS);
  }

  /** Kill the shell and everything it started; the session is gone. */
  async closeSession(handle: string): Promise<void> {
    await this.call('dsec-session-close', { handle }, GUEST_CALL_TIMEOUT_MS);
  }

  async sessions(): Promise<GuestSessionSummary[]> {
    return parseSessionSummaries(this.reader('dsec-sessions'), await this.call('dsec-sessions', undefined, GUEST_CALL_TIMEOUT_MS));
  }

  // files --------------------------------------------------------------------

  /** A regular file's bytes: DSEC_FILE_NOT_FOUND, DSEC_FILE_TOO_LARGE (over maxBytes, at most 32 MiB) or DSEC_FILE_INVALID (not a regular file). */
  async readFile(path: string, maxBytes: number): Promise<Buffer> {
    this.checkPath(path);
    const limit = Math.max(0, Math.min(Math.floor(maxBytes), MAX_GUEST_READ_BYTES));
    const maxArg = Number.isFinite(limit) ? limit : MAX_GUEST_READ_BYTES;
    // In parts of GUEST_FILE_CHUNK: what the guest holds at once is charged to the sandbox's memory.
    const parts: Buffer[] = [];
    let total = 0;
    for (;;) {
      const reader = this.reader('dsec-read-file');
      const answer = reader.object(await this.fileCall(path, 'dsec-read-file', { path, 'max-bytes': maxArg, offset: total, length: GUEST_FILE_CHUNK }, limit));
      const size = reader.integer(answer.size, 'size');
      const { data, cut } = reader.bytes(answer.data, 'data', GUEST_FILE_CHUNK);
      if (cut) throw reader.invalid(`it sent more than the ${GUEST_FILE_CHUNK} bytes asked for`);
      parts.push(data);
      total += data.length;
      if (total > limit) throw new DsecError('DSEC_FILE_TOO_LARGE', { id: this.wire.sandboxId, path, size: `more than ${limit}`, limit });
      // A short part is the end; so is reaching the size the file had (it may shrink or grow meanwhile).
      if (data.length < GUEST_FILE_CHUNK || total >= size) break;
    }
    return Buffer.concat(parts, total);
  }

  /**
   * Create or replace a regular file (parents created, owned by uid/gid when
   * given). Above GUEST_FILE_CHUNK it goes in chunks, each appended to the
   * last. The last component must not be a symlink (DSEC_FILE_INVALID).
   */
  async writeFile(path: string, data: Buffer, options: { mode?: number; uid?: number; gid?: number } = {}): Promise<void> {
    this.checkPath(path);
    const mode = options.mode ?? 0o644;
    if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw new DsecError('DSEC_FILE_INVALID', { id: this.wire.sandboxId, path, message: `mode ${mode} is not a permission mode` });
    for (let offset = 0; offset < data.length || offset === 0; offset += GUEST_FILE_CHUNK) {
      const chunk = data.subarray(offset, offset + GUEST_FILE_CHUNK);
      const args = { path, data: chunk.toString('base64'), mode, ...(offset > 0 ? { append: true } : {}), ...(options.uid !== undefined ? { uid: options.uid } : {}), ...(options.gid !== undefined ? { gid: options.gid } : {}) };
      const reader = this.reader('dsec-write-file');
      const written = reader.integer(reader.object(await this.fileCall(path, 'dsec-write-file', args, 0)).size, 'size');
      if (written !== chunk.length) throw new DsecError('DSEC_FILE_INVALID', { id: this.wire.sandboxId, path, message: `the guest wrote ${written} of ${chunk.length} bytes` });
      if (offset + GUEST_FILE_CHUNK >= data.length) break;
    }
  }

  // internals ----------------------------------------------------------------

  private reader(command: string): AnswerReader {
    return new ClosingReader(this.wire, command);
  }

  /** A call whose guest error answer becomes a DsecError: NotFound (a handle), Busy, or DSEC_GUEST_COMMAND_FAILED. */
  private async call(command: string, args: Record<string, unknown> | undefined, timeoutMs: number | undefined): Promise<unknown> {
    try {
      return await this.wire.call(command, args, timeoutMs);
    } catch (error) {
      if (!(error instanceof GuestCommandError)) throw error;
      const id = this.wire.sandboxId;
      const handle = typeof args?.handle === 'string' ? args.handle : '';
      if (error.errorClass === 'NotFound') throw new DsecError('DSEC_GUEST_UNKNOWN_HANDLE', { id, handle, message: error.desc }, { cause: error });
      if (error.errorClass === 'Busy') throw new DsecError('DSEC_SANDBOX_BUSY', { id, operation: `${command} ${handle}`.trim(), reason: error.desc }, { cause: error });
      throw new DsecError('DSEC_GUEST_COMMAND_FAILED', { id, command, message: error.desc }, { cause: error });
    }
  }

  /** A file command, its guest error class turned into the file errors naming the path. */
  private async fileCall(path: string, command: string, args: Record<string, unknown>, limit: number): Promise<unknown> {
    try {
      return await this.wire.call(command, args, GUEST_CALL_TIMEOUT_MS);
    } catch (error) {
      if (!(error instanceof GuestCommandError)) throw error;
      const id = this.wire.sandboxId;
      if (error.errorClass === 'NotFound') throw new DsecError('DSEC_FILE_NOT_FOUND', { id, path }, { cause: error });
      if (error.errorClass === 'TooLarge') {
        const size = /\bis (\d+) bytes\b/.exec(error.desc)?.[1];
        throw new DsecError('DSEC_FILE_TOO_LARGE', { id, path, size: size !== undefined ? Number(size) : `more than ${limit}`, limit }, { cause: error });
      }
      throw new DsecError('DSEC_FILE_INVALID', { id, path, message: error.desc.replace(`${path}: `, '') }, { cause: error });
    }
  }

  private checkPath(path: string): void {
    if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0')) {
      throw new DsecError('DSEC_FILE_INVALID', { id: this.wire.sandboxId, path: String(path), message: 'the path must be absolute' });
    }
  }

  /** Events by handle (checked: an invalid one fails the session, see mux-wire.ts). */
  private event(name: string, data: Record<string, unknown>): void {
    if (name === 'dsec-output') {
      const { handle, stream, chunk } = parseOutputEvent(this.reader('the dsec-output event'), data);
      const listener = this.outputListeners.get(handle);
      if (listener) callSafely(() => listener(stream, chunk));
    } else if (name === 'dsec-exit') {
      const event = parseExitEvent(this.reader('the dsec-exit event'), data);
      this.outputListeners.delete(event.handle);
      for (const listener of this.exitListeners) callSafely(() => listener(event));
    }
    // Other events (a newer agent's) are not for this client.
  }
}

/** An answer of the wrong shape is garbage: it also closes the session (every pending call fails), as a line that is not JSON does. */
class ClosingReader extends AnswerReader {
  constructor(
    private readonly wire: MuxWire,
    command: string,
  ) {
    super(wire.sandboxId, command);
  }

  override invalid(what: string): DsecError {
    const error = super.invalid(what);
    this.wire.close(String(error.params.message ?? what));
    return error;
  }
}

/** `h` + 12 random hex digits. */
function newHandle(): string {
  return `h${randomBytes(6).toString('hex')}`;
}

function outputLimit(maxOutputBytes: number | undefined): number {
  const limit = Math.max(0, Math.min(Math.floor(maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES), MAX_GUEST_OUTPUT_BYTES));
  return Number.isFinite(limit) ? limit : DEFAULT_MAX_OUTPUT_BYTES;
}

/** A listener's exception must not break the dispatch of the next event: it becomes a process warning. */
function callSafely(run: () => void): void {
  try {
    run();
  } catch (error) {
    process.emitWarning(`a GuestSession event listener threw: ${(error as Error)?.stack ?? String(error)}`);
  }
}
