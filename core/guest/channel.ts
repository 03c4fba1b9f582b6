/**
 * The byte stream to one guest agent (a unix socket: qemu's chardev for the
 * virtio-serial port, or a socket dsec-guest listens on): QGA framing (one
 * JSON object per line), one request at a time in order, a timeout on each,
 * and guest-sync-delimited to find the stream's true position again after a
 * timeout or on a fresh connection (an answer to an old request may still
 * be on its way). Everything the guest sends is untrusted: lines are capped,
 * and anything that is not a QGA answer is DSEC_GUEST_UNREACHABLE, never a
 * crash of the caller.
 */
import { randomInt } from 'node:crypto';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { DsecError } from '../errors.js';
import { openSocket } from './socket.js';

/** The longest answer line accepted: two streams of 32 MiB of exec output, base64, and room. */
export const MAX_ANSWER_LINE = 128 * 1024 * 1024;
const SENTINEL = 0xff;
/** setTimeout's largest delay (a larger one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** The guest answered {"error": {...}}: a command that ran and failed (not an unreachable guest). */
export class GuestCommandError extends Error {
  constructor(
    readonly command: string,
    readonly errorClass: string,
    readonly desc: string,
  ) {
    super(`${command}: ${desc}`);
    this.name = 'GuestCommandError';
  }
}

type LineWaiter = (line: Buffer) => void;

export class GuestChannel {
  private readonly chunks: Buffer[] = [];
  private buffered = 0;
  /** Drop everything until a 0xFF (the answer to guest-sync-delimited starts with one). */
  private awaitingSentinel = false;
  private waiter: LineWaiter | undefined;
  private failWaiter: ((error: Error) => void) | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  /** The stream may hold stale answers: sync before the next request. */
  private needsSync = true;
  private closeReason: string | undefined;
  private readonly closeListeners: ((reason: string) => void)[] = [];

  private constructor(
    private readonly socket: Socket,
    readonly sandboxId: string,
  ) {
    socket.on('data', (chunk: Buffer) => this.receive(chunk));
    socket.on('error', (error) => this.closed(`the connection failed: ${error.message}`));
    socket.on('close', () => this.closed('the connection was closed'));
  }

  /** Connect, retrying while the socket is not there or refuses (qemu or the agent still starting). */
  static async connect(socketPath: string, sandboxId: string, timeoutMs: number): Promise<GuestChannel> {
    const deadline = Date.now() + timeoutMs;
    let delay = 20;
    for (;;) {
      try {
        return new GuestChannel(await openSocket(socketPath, Math.max(1, deadline - Date.now())), sandboxId);
      } catch (error) {
        const left = deadline - Date.now();
        if (left <= 0) {
          throw new DsecError('DSEC_GUEST_UNREACHABLE', {
            id: sandboxId,
            message: `could not connect to ${socketPath} within ${timeoutMs} ms: ${(error as Error).message}`,
          }, { cause: error });
        }
        await sleep(Math.min(delay, left));
        delay = Math.min(delay * 2, 250);
      }
    }
  }

  get isClosed(): boolean {
    return this.closeReason !== undefined;
  }

  onClose(listener: (reason: string) => void): void {
    if (this.closeReason !== undefined) listener(this.closeReason);
    else this.closeListeners.push(listener);
  }

  close(): void {
    this.socket.destroy();
    this.closed('the client closed the connection');
  }

  /**
   * Run one command (queued behind any in flight) and return its "return"
   * value. A guest error answer is a GuestCommandError; no answer in time,
   * a closed stream or garbage is DSEC_GUEST_UNREACHABLE.
   */
  call(command: string, args: Record<string, unknown> | undefined, timeoutMs: number): Promise<unknown> {
    return this.enqueue(async () => {
      if (this.needsSync) await this.syncNow(Math.min(timeoutMs, 10_000));
      return this.request(command, args, timeoutMs);
    });
  }

  /** guest-sync-delimited now (queued), e.g. to check the agent is there. */
  sync(timeoutMs: number): Promise<void> {
    return this.enqueue(() => this.syncNow(timeoutMs));
  }

  private enqueue<T>(run: () => Promise<T>): Promise<T> {
    const result = this.queue.then(run, run);
    this.queue = result.catch(() => undefined);
    return result;
  }

  private unreachable(message: string, cause?: unknown): DsecError {
    return new DsecError('DSEC_GUEST_UNREACHABLE', { id: this.sandboxId, message }, cause === undefined ? {} : { cause });
  }

  private async request(command: string, args: Record<string, unknown> | undefined, timeoutMs: number): Promise<unknown> {
    const line = await this.exchange(`${JSON.stringify(args === undefined ? { execute: command } : { execute: command, arguments: args })}\n`, command, timeoutMs, () => true);
    return this.answerOf(command, line);
  }

  /** Send guest-sync-delimited with a fresh id and drop everything until its answer. */
  private async syncNow(timeoutMs: number): Promise<void> {
    const id = randomInt(1, 2 ** 47);
    this.chunks.length = 0;
    this.buffered = 0;
    this.awaitingSentinel = true;
    // The leading 0xFF makes the agent drop any half-sent request of an earlier client.
    const request = Buffer.concat([Buffer.from([SENTINEL]), Buffer.from(`${JSON.stringify({ execute: 'guest-sync-delimited', arguments: { id } })}\n`)]);
    await this.exchange(request, 'guest-sync-delimited', timeoutMs, (line) => {
      const parsed = parseJson(line);
      if (isObject(parsed) && parsed.return === id) return true;
      this.awaitingSentinel = true; // a stale answer: the real one comes after another 0xFF
      return false;
    });
    this.needsSync = false;
  }

  /** Write `data` and wait for the first line `accept` takes. */
  private exchange(data: string | Buffer, command: string, timeoutMs: number, accept: (line: Buffer) => boolean): Promise<Buffer> {
    if (this.closeReason !== undefined) return Promise.reject(this.unreachable(`${command}: ${this.closeReason}`));
    return new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => {
        finish();
        this.needsSync = true; // its answer may still come: never take it for the next one's
        reject(this.unreachable(`no answer to ${command} within ${timeoutMs} ms`));
      }, Math.min(Math.max(timeoutMs, 1), MAX_TIMER_MS));
      const finish = () => {
        clearTimeout(timer);
        this.waiter = undefined;
        this.failWaiter = undefined;
      };
      this.waiter = (line) => {
        if (!accept(line)) return;
        finish();
        resolve(line);
      };
      this.failWaiter = (error) => {
        finish();
        reject(error);
      };
      this.socket.write(data);
    });
  }

  private answerOf(command: string, line: Buffer): unknown {
    const parsed = parseJson(line);
    if (isObject(parsed) && 'return' in parsed) return parsed.return;
    if (isObject(parsed) && isObject(parsed.error)) {
      const { class: errorClass, desc } = parsed.error;
      throw new GuestCommandError(command, typeof errorClass === 'string' ? errorClass : 'GenericError', typeof desc === 'string' ? desc.slice(0, 4096) : 'failed');
    }
    this.needsSync = true;
    const shown = line.subarray(0, 120).toString('utf8').replace(/[^\x20-\x7e]/g, '?');
    throw this.unreachable(`answered ${command} with something that is not a guest agent answer: ${shown}${line.length > 120 ? '...' : ''}`);
  }

  private receive(chunk: Buffer): void {
    if (this.awaitingSentinel) {
      const at = chunk.indexOf(SENTINEL);
      if (at < 0) return;
      this.awaitingSentinel = false;
      chunk = chunk.subarray(at + 1);
    }
    let start = 0;
    for (let newline = chunk.indexOf(0x0a); newline >= 0; newline = chunk.indexOf(0x0a, start)) {
      const piece = chunk.subarray(start, newline);
      const line = this.chunks.length === 0 ? piece : Buffer.concat([...this.chunks, piece]);
      this.chunks.length = 0;
      this.buffered = 0;
      start = newline + 1;
      this.deliver(line);
      if (this.awaitingSentinel) return this.receive(chunk.subarray(start));
    }
    if (start < chunk.length) {
      this.chunks.push(chunk.subarray(start));
      this.buffered += chunk.length - start;
      if (this.buffered > MAX_ANSWER_LINE) {
        this.socket.destroy();
        this.closed(`it sent a line longer than ${MAX_ANSWER_LINE} bytes`);
      }
    }
  }

  private deliver(line: Buffer): void {
    const text = line.length > 0 && line[line.length - 1] === 0x0d ? line.subarray(0, -1) : line;
    if (text.length === 0) return;
    // A line nobody waits for is a late answer to a request that timed out: dropped.
    this.waiter?.(text);
  }

  private closed(reason: string): void {
    if (this.closeReason !== undefined) return;
    this.closeReason = reason;
    this.failWaiter?.(this.unreachable(reason));
    for (const listener of this.closeListeners.splice(0)) listener(reason);
  }
}

function parseJson(line: Buffer): unknown {
  try {
    return JSON.parse(line.toString('utf8'));
  } catch {
    return undefined;
  }
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
