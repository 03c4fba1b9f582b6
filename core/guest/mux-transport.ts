/**
 * Byte streams to one guest agent for GuestSession (mux.ts): a unix socket
 * (dsec-guest --listen, or qemu's chardev for a virtio-serial port) or a
 * FIFO pair (dsec-guest --fds in a container sandbox: the node agent made
 * the FIFOs in the sandbox's host folder, the launcher holds both open
 * read-write for the agent).
 *
 * The FIFOs are opened non-blocking (reading OUT: an open that never waits
 * for a writer; writing IN: fails at once with ENXIO when nobody holds it,
 * instead of hanging) and each fd is wrapped in a net.Socket: libuv treats
 * a FIFO as a pipe, so reads and writes are asynchronous like a socket's.
 */
import { constants, fstat, open, close as closeFd } from 'node:fs';
import { Socket } from 'node:net';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { DsecError } from '../errors.js';
import { openSocket } from './socket.js';

/** Bytes to and from one guest agent: a unix socket, or a FIFO pair. */
export interface GuestTransport {
  /** What it is connected to, for messages. */
  readonly description: string;
  write(data: Buffer): void;
  /** Where received bytes go (one listener: the session's). */
  onData(listener: (chunk: Buffer) => void): void;
  /** Called once when the stream ends or fails (also after close()). */
  onClose(listener: (reason: string) => void): void;
  close(): void;
}

const openFile = promisify(open);
const statFd = promisify(fstat);

/**
 * The FIFO pair of a `dsec-guest --fds IN,OUT`: requests are written to
 * `inPath`, answers and events read from `outPath`. DSEC_GUEST_UNREACHABLE
 * (naming the paths) when either is not a FIFO or nobody holds IN open.
 */
export async function openFifoTransport(inPath: string, outPath: string): Promise<GuestTransport> {
  const fds: number[] = [];
  try {
    // (libuv opens every file close-on-exec.)
    for (const [path, flags] of [
      [outPath, constants.O_RDONLY | constants.O_NONBLOCK],
      [inPath, constants.O_WRONLY | constants.O_NONBLOCK],
    ] as const) {
      const fd = await openFile(path, flags);
      fds.push(fd);
      if (!(await statFd(fd)).isFIFO()) throw new Error(`${path} is not a FIFO`);
    }
  } catch (error) {
    for (const fd of fds) closeFd(fd, () => undefined);
    const why = (error as NodeJS.ErrnoException).code === 'ENXIO' ? `nobody holds ${inPath} open (is the agent running?)` : (error as Error).message;
    throw new DsecError('DSEC_GUEST_UNREACHABLE', { id: inPath, message: `cannot open the FIFOs ${inPath} and ${outPath}: ${why}` }, { cause: error });
  }
  const reader = new Socket({ fd: fds[0]!, readable: true, writable: false });
  const writer = new Socket({ fd: fds[1]!, readable: false, writable: true });
  return new SocketTransport(`${inPath} and ${outPath}`, reader, writer);
}

/** A unix socket, retried until `timeoutMs` while it is not there or refuses (the agent still starting). */
export async function openSocketTransport(path: string, timeoutMs: number): Promise<GuestTransport> {
  const deadline = Date.now() + timeoutMs;
  let delay = 20;
  for (;;) {
    try {
      const socket = await openSocket(path, Math.max(1, deadline - Date.now()));
      return new SocketTransport(path, socket, socket);
    } catch (error) {
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new DsecError('DSEC_GUEST_UNREACHABLE', { id: path, message: `could not connect to ${path} within ${timeoutMs} ms: ${(error as Error).message}` }, { cause: error });
      }
      await sleep(Math.min(delay, left));
      delay = Math.min(delay * 2, 250);
    }
  }
}

class SocketTransport implements GuestTransport {
  private closeReason: string | undefined;
  private readonly closeListeners: ((reason: string) => void)[] = [];

  constructor(
    readonly description: string,
    private readonly reader: Socket,
    private readonly writer: Socket,
  ) {
    for (const socket of new Set([reader, writer])) {
      socket.on('error', (error) => this.closed(`the connection failed: ${error.message}`));
      socket.on('close', () => this.closed('the connection was closed'));
    }
    reader.on('end', () => this.closed('the guest closed the stream'));
  }

  write(data: Buffer): void {
    if (this.closeReason === undefined) this.writer.write(data);
  }

  onData(listener: (chunk: Buffer) => void): void {
    this.reader.on('data', listener);
  }

  onClose(listener: (reason: string) => void): void {
    if (this.closeReason !== undefined) listener(this.closeReason);
    else this.closeListeners.push(listener);
  }

  close(): void {
    this.closed('the client closed the connection');
  }

  private closed(reason: string): void {
    if (this.closeReason !== undefined) return;
    this.closeReason = reason;
    this.reader.destroy();
    this.writer.destroy();
    for (const listener of this.closeListeners.splice(0)) listener(reason);
  }
}
