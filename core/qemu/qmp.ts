/**
 * A client of QMP, qemu's JSON control protocol, over the unix socket of
 * `-qmp unix:PATH,server=on,wait=off`: the greeting, capabilities
 * negotiation, commands matched to their answers by id (each with a
 * timeout), and asynchronous events (STOP, RESUME, MIGRATION, SHUTDOWN...)
 * emitted as 'event' and awaitable with waitForEvent.
 */
import { EventEmitter } from 'node:events';
import net from 'node:net';

export interface QmpEvent {
  readonly event: string;
  readonly data?: Record<string, unknown>;
  readonly timestamp?: { readonly seconds: number; readonly microseconds: number };
}

/** qemu answered a command with an error. */
export class QmpError extends Error {
  constructor(
    readonly command: string,
    /** QMP's error class: GenericError, CommandNotFound, DeviceNotActive... */
    readonly errorClass: string,
    desc: string,
  ) {
    super(`qmp ${command}: ${desc}`);
    this.name = 'QmpError';
  }
}

export interface QmpOptions {
  /** How long to wait for the connection, the greeting and the capabilities answer. @default 5000 */
  readonly timeoutMs?: number;
}

/** A line longer than this is no QMP answer: the connection is dropped rather than buffered without end. */
const MAX_LINE_BYTES = 16 * 1024 * 1024;
const DEFAULT_COMMAND_TIMEOUT_MS = 10_000;

interface Pending {
  readonly command: string;
  resolve(value: unknown): void;
  reject(error: Error): void;
  readonly timer: NodeJS.Timeout;
}

export class QmpClient extends EventEmitter<{ event: [QmpEvent]; close: [Error | undefined] }> {
  private buffered = '';
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();
  private closedWith: Error | undefined;
  private closed = false;
  private greeting: ((line: Record<string, unknown>) => void) | undefined;

  private constructor(private readonly socket: net.Socket) {
    super();
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => this.onData(chunk));
    socket.on('error', (error) => this.shutDown(error));
    socket.on('close', () => this.shutDown(new Error('qmp connection closed')));
  }

  /** Connect, read the greeting and negotiate capabilities. */
  static async connect(socketPath: string, options: QmpOptions = {}): Promise<QmpClient> {
    const timeoutMs = options.timeoutMs ?? 5000;
    const socket = net.createConnection(socketPath);
    const client = new QmpClient(socket);
    const deadline = setTimeout(() => client.shutDown(new Error(`qmp ${socketPath}: no greeting within ${timeoutMs} ms`)), timeoutMs);
    try {
      await new Promise<void>((resolve, reject) => {
        client.greeting = (line) => (line.QMP ? resolve() : reject(new Error(`qmp ${socketPath}: unexpected greeting ${JSON.stringify(line)}`)));
        client.once('close', (error) => reject(error ?? new Error('qmp connection closed')));
      });
      await client.execute('qmp_capabilities', undefined, { timeoutMs });
      return client;
    } catch (error) {
      client.close();
      throw error;
    } finally {
      clearTimeout(deadline);
    }
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Run a command; its `return` value, or QmpError with qemu's error, or a timeout. */
  execute<T = unknown>(command: string, args?: Record<string, unknown>, options: { timeoutMs?: number } = {}): Promise<T> {
    if (this.closed) return Promise.reject(this.closedWith ?? new Error('qmp connection closed'));
    const id = `dsec-${this.nextId++}`;
    const timeoutMs = options.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`qmp ${command}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { command, resolve: resolve as (value: unknown) => void, reject, timer });
      this.socket.write(`${JSON.stringify({ execute: command, ...(args ? { arguments: args } : {}), id })}\n`);
    });
  }

  /** The next event named `name` (that `matches`, if given), or a timeout error. */
  waitForEvent(name: string, timeoutMs: number, matches: (event: QmpEvent) => boolean = () => true): Promise<QmpEvent> {
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.off('event', onEvent);
        this.off('close', onClose);
      };
      const onEvent = (event: QmpEvent) => {
        if (event.event !== name || !matches(event)) return;
        done();
        resolve(event);
      };
      const onClose = (error: Error | undefined) => {
        done();
        reject(error ?? new Error('qmp connection closed'));
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`qmp: no ${name} event within ${timeoutMs} ms`));
      }, timeoutMs);
      this.on('event', onEvent);
      this.on('close', onClose);
    });
  }

  close(): void {
    this.socket.destroy();
    this.shutDown(undefined);
  }

  private onData(chunk: string): void {
    this.buffered += chunk;
    if (this.buffered.length > MAX_LINE_BYTES && !this.buffered.includes('\n')) {
      this.shutDown(new Error('qmp: an answer longer than 16 MiB'));
      this.socket.destroy();
      return;
    }
    let newline: number;
    while ((newline = this.buffered.indexOf('\n')) >= 0) {
      const line = this.buffered.slice(0, newline).trim();
      this.buffered = this.buffered.slice(newline + 1);
      if (line) this.onLine(line);
    }
  }

  private onLine(text: string): void {
    let line: Record<string, unknown>;
    try {
      line = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return; // not JSON: nothing a command waits for
    }
    if (this.greeting) {
      const greeted = this.greeting;
      this.greeting = undefined;
      greeted(line);
      return;
    }
    if (typeof line.event === 'string') {
      this.emit('event', line as unknown as QmpEvent);
      return;
    }
    const pending = typeof line.id === 'string' ? this.pending.get(line.id) : undefined;
    if (!pending) return;
    this.pending.delete(line.id as string);
    clearTimeout(pending.timer);
    const error = line.error as { class?: string; desc?: string } | undefined;
    if (error) pending.reject(new QmpError(pending.command, String(error.class ?? 'GenericError'), String(error.desc ?? 'failed')));
    else pending.resolve(line.return);
  }

  private shutDown(error: Error | undefined): void {
    if (this.closed) return;
    this.closed = true;
    this.closedWith = error;
    for (const pending of this.pending.values()) {
      clearTimeout(pending.timer);
      pending.reject(error ?? new Error(`qmp ${pending.command}: connection closed`));
    }
    this.pending.clear();
    this.emit('close', error);
  }
}
