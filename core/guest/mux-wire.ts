/**
 * The wire of a GuestSession (mux.ts): QGA framing (one JSON object per
 * line) in dsec-guest's async mode, where requests carry ids, answers come
 * in any order and events ({"event", "data"}) arrive between them.
 *
 * - sync(): guest-sync-delimited after a 0xFF, dropping everything the
 *   stream held before its answer (what an earlier host left unread).
 * - call(): one request; its answer is matched by id. Every call has a
 *   timeout, except those whose answer waits on the sandbox's processes
 *   (dsec-input, dsec-wait without a timeout): while one of those is
 *   pending, a guest-ping every HEARTBEAT_MS checks the guest instead.
 * - Anything wrong (no answer in time, a line that is not a QGA answer or
 *   event, a line over MAX_ANSWER_LINE, the stream closing) fails every
 *   pending call with DSEC_GUEST_UNREACHABLE naming the sandbox and closes
 *   the wire for good: callers open a new session.
 */
import { randomInt } from 'node:crypto';
import { DsecError } from '../errors.js';
import { GuestCommandError, isObject, MAX_ANSWER_LINE } from './channel.js';
import type { GuestTransport } from './mux-transport.js';
import { GUEST_CALL_TIMEOUT_MS } from './mux-types.js';

const SENTINEL = 0xff;
/** setTimeout's largest delay (a larger one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;
const HEARTBEAT_MS = 10_000;

interface Pending {
  readonly command: string;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: Error) => void;
  readonly timer: NodeJS.Timeout | undefined;
}

export type EventListener = (name: string, data: Record<string, unknown>) => void;

export class MuxWire {
  private readonly pending = new Map<number, Pending>();
  /** Random start: ids never collide with a stale answer to another host's small ones. */
  private nextId = randomInt(1, 2 ** 40);
  private readonly chunks: Buffer[] = [];
  private buffered = 0;
  /** Drop everything until a 0xFF (the sync answer's first byte). */
  private awaitingSentinel = true;
  private syncWaiter: { id: number; resolve: () => void } | undefined;
  private eventListener: EventListener | undefined;
  private unbounded = 0;
  private heartbeat: NodeJS.Timeout | undefined;
  private pinging = false;
  private closeReason: string | undefined;
  private readonly closeListeners: ((reason: string) => void)[] = [];

  constructor(
    private readonly transport: GuestTransport,
    readonly sandboxId: string,
  ) {
    transport.onData((chunk) => this.receive(chunk));
    transport.onClose((reason) => this.fail(reason));
  }

  get closed(): boolean {
    return this.closeReason !== undefined;
  }

  onEvent(listener: EventListener): void {
    this.eventListener = listener;
  }

  onClose(listener: (reason: string) => void): void {
    if (this.closeReason !== undefined) listener(this.closeReason);
    else this.closeListeners.push(listener);
  }

  close(reason = 'the client closed the session'): void {
    this.fail(reason);
  }

  unreachable(message: string, cause?: unknown): DsecError {
    return new DsecError('DSEC_GUEST_UNREACHABLE', { id: this.sandboxId, message }, cause === undefined ? {} : { cause });
  }

  /** guest-sync-delimited until answered (sent again, each time waiting longer: one sent before the agent listened may be lost). */
  async sync(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (let attempt = 500; ; attempt = Math.min(attempt * 2, 5_000)) {
      if (this.closeReason !== undefined) throw this.unreachable(this.closeReason);
      const id = randomInt(1, 2 ** 47);
      this.awaitingSentinel = true;
      this.chunks.length = 0;
      this.buffered = 0;
      const answered = new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), Math.max(1, Math.min(attempt, deadline - Date.now())));
        this.syncWaiter = { id, resolve: () => { clearTimeout(timer); resolve(true); } };
        this.onClose(() => { clearTimeout(timer); resolve(false); });
      });
      // The leading 0xFF makes the agent drop any half-sent request of an earlier host.
      this.transport.write(Buffer.concat([Buffer.from([SENTINEL]), Buffer.from(`${JSON.stringify({ execute: 'guest-sync-delimited', arguments: { id } })}\n`)]));
      if (await answered) return;
      this.syncWaiter = undefined;
      if (this.closeReason !== undefined) throw this.unreachable(this.closeReason);
      if (Date.now() >= deadline) throw this.fail(`no answer to guest-sync-delimited within ${timeoutMs} ms`);
    }
  }

  /** One request; `timeoutMs` undefined: its answer waits on the sandbox (the heartbeat watches the guest meanwhile). */
  call(command: string, args: Record<string, unknown> | undefined, timeoutMs: number | undefined): Promise<unknown> {
    if (this.closeReason !== undefined) return Promise.reject(this.unreachable(`${command}: ${this.closeReason}`));
    const id = this.nextId++;
    const line = `${JSON.stringify(args === undefined ? { execute: command, id } : { execute: command, arguments: args, id })}\n`;
    return new Promise((resolve, reject) => {
      const timer = timeoutMs === undefined ? undefined : setTimeout(() => this.fail(`no answer to ${command} within ${timeoutMs} ms`), Math.min(Math.max(timeoutMs, 1), MAX_TIMER_MS));
      if (timer === undefined) this.watch(1);
      const settle = (done: () => void) => {
        if (!this.pending.delete(id)) return;
        if (timer !== undefined) clearTimeout(timer);
        else this.watch(-1);
        done();
      };
      this.pending.set(id, { command, timer, resolve: (value) => settle(() => resolve(value)), reject: (error) => settle(() => reject(error)) });
      this.transport.write(Buffer.from(line));
    });
  }

  /** Count open-ended calls; ping the guest while there are any. */
  private watch(delta: number): void {
    this.unbounded += delta;
    if (this.unbounded > 0 && this.heartbeat === undefined && this.closeReason === undefined) {
      this.heartbeat = setInterval(() => {
        if (this.pinging) return;
        this.pinging = true;
        this.call('guest-ping', undefined, GUEST_CALL_TIMEOUT_MS).then(
          () => (this.pinging = false),
          () => (this.pinging = false),
        );
      }, HEARTBEAT_MS);
      this.heartbeat.unref();
    } else if (this.unbounded === 0 && this.heartbeat !== undefined) {
      clearInterval(this.heartbeat);
      this.heartbeat = undefined;
    }
  }

  private receive(chunk: Buffer): void {
    if (this.closeReason !== undefined) return;
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
      if (this.closeReason !== undefined) return;
      if (this.awaitingSentinel) return this.receive(chunk.subarray(start));
    }
    if (start < chunk.length) {
      this.chunks.push(chunk.subarray(start));
      this.buffered += chunk.length - start;
      if (this.buffered > MAX_ANSWER_LINE) this.fail(`it sent a line longer than ${MAX_ANSWER_LINE} bytes`);
    }
  }

  private deliver(raw: Buffer): void {
    const line = raw.length > 0 && raw[raw.length - 1] === 0x0d ? raw.subarray(0, -1) : raw;
    if (line.length === 0) return;
    const message = parseJson(line);
    if (this.syncWaiter !== undefined) {
      if (isObject(message) && message.return === this.syncWaiter.id) {
        const { resolve } = this.syncWaiter;
        this.syncWaiter = undefined;
        resolve();
      } else {
        this.awaitingSentinel = true; // a stale answer: the real one comes after another 0xFF
      }
      return;
    }
    if (!isObject(message)) return void this.fail(`it sent something that is not a guest agent answer: ${shown(line)}`);
    if (typeof message.event === 'string' && isObject(message.data) && !('id' in message)) {
      try {
        this.eventListener?.(message.event, message.data);
      } catch (error) {
        this.fail(error instanceof DsecError ? String(error.params.message ?? error.message) : `its ${message.event} event is not valid: ${(error as Error).message}`);
      }
      return;
    }
    if ('id' in message && ('return' in message || isObject(message.error))) {
      const pending = typeof message.id === 'number' ? this.pending.get(message.id) : undefined;
      if (pending === undefined) return; // an answer to a call given up on (an aborted exec's)
      if ('return' in message) return pending.resolve(message.return);
      const { class: errorClass, desc } = message.error as Record<string, unknown>;
      return pending.reject(new GuestCommandError(pending.command, typeof errorClass === 'string' ? errorClass.slice(0, 100) : 'GenericError', typeof desc === 'string' ? desc.slice(0, 4096) : 'failed'));
    }
    if (isObject(message.error)) {
      // Only a request it could not read at all is answered without its id: the stream is out of step.
      const desc = typeof message.error.desc === 'string' ? message.error.desc.slice(0, 300) : 'no reason given';
      return void this.fail(`it could not read a request: ${desc}`);
    }
    this.fail(`it sent something that is not a guest agent answer: ${shown(line)}`);
  }

  /** Close for good: every pending call fails. Returns the error (for throw). */
  private fail(reason: string): DsecError {
    if (this.closeReason === undefined) {
      this.closeReason = reason;
      if (this.heartbeat !== undefined) clearInterval(this.heartbeat);
      this.heartbeat = undefined;
      this.transport.close();
      for (const [, pending] of [...this.pending]) pending.reject(this.unreachable(`${pending.command}: ${reason}`));
      for (const listener of this.closeListeners.splice(0)) listener(reason);
    }
    return this.unreachable(this.closeReason);
  }
}

function parseJson(line: Buffer): unknown {
  try {
    return JSON.parse(line.toString('utf8'));
  } catch {
    return undefined;
  }
}

function shown(line: Buffer): string {
  return `${line.subarray(0, 120).toString('utf8').replace(/[^\x20-\x7e]/g, '?')}${line.length > 120 ? '...' : ''}`;
}
