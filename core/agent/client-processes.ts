/**
 * The agent's process and session routes, as typed calls on an AgentClient
 * (local socket or TCP): streamed execs, background commands by handle,
 * persistent shell sessions. Streamed answers are NDJSON events (see
 * routes.ts Streamed); their output arrives as bytes.
 */
import { DsecError, ERRORS, type ErrorCode } from '../errors.js';
import type {
  ExecRequest,
  ExecResult,
  OutputEncoding,
  OutputStream,
  ProcessSnapshotJson,
  ProcessSummary,
  SessionInfo,
  SessionOptions,
  SessionRunRequest,
  SessionRunResult,
} from '../live.js';
import type { AgentClient } from './client.js';

export interface StreamHandlers {
  /** The command started: its handle (for stdin, signals, resizes) and pid. */
  readonly onStart?: (handle: string, pid: number) => void;
  /** Output as it comes, as bytes. */
  readonly onOutput?: (stream: OutputStream, chunk: Buffer) => void;
}

const sandboxPath = (id: string, rest = '') => `/v1/sandboxes/${encodeURIComponent(id)}${rest}`;

/** Read one streamed answer: dispatch start and output, resolve with the end's result, reject with an error event. */
async function streamed<T>(client: AgentClient, path: string, body: unknown, handlers: StreamHandlers, signal?: AbortSignal): Promise<T> {
  let result: T | undefined;
  let failure: DsecError | undefined;
  await client.stream('POST', path, body, (raw) => {
    const event = raw as { event?: unknown; handle?: unknown; pid?: unknown; data?: unknown; result?: unknown; error?: { code?: unknown; message?: unknown; params?: unknown } };
    switch (event.event) {
      case 'start':
        if (typeof event.handle === 'string' && typeof event.pid === 'number') handlers.onStart?.(event.handle, event.pid);
        return;
      case 'stdout':
      case 'stderr':
        if (typeof event.data === 'string') handlers.onOutput?.(event.event, Buffer.from(event.data, 'base64'));
        return;
      case 'exit':
        result = event.result as T;
        return;
      case 'error': {
        const code = typeof event.error?.code === 'string' && event.error.code in ERRORS ? (event.error.code as ErrorCode) : 'DSEC_AGENT_INTERNAL';
        failure = new DsecError(code, (event.error?.params as Record<string, unknown>) ?? { message: String(event.error?.message) });
        if (typeof event.error?.message === 'string') failure.message = event.error.message;
        return;
      }
    }
  }, signal);
  if (failure) throw failure;
  if (result === undefined) {
    if (signal?.aborted) throw new DsecError('DSEC_AGENT_REQUEST', { message: 'the call was given up (aborted) before its end' });
    throw new DsecError('DSEC_AGENT_BAD_ANSWER', { address: client.address, message: `${path}: the stream ended without its result` });
  }
  return result;
}

export class ProcessClient {
  constructor(private readonly client: AgentClient) {}

  /** Run a command to its end, its output streamed to `handlers` as it comes (not repeated in the result). */
  execStream(id: string, request: ExecRequest, handlers: StreamHandlers, signal?: AbortSignal): Promise<ExecResult> {
    return streamed(this.client, sandboxPath(id, '/exec'), { ...request, stream: true }, handlers, signal);
  }

  /** Start a background command; it runs on past this call. */
  start(id: string, request: ExecRequest): Promise<{ handle: string; pid: number }> {
    return this.client.request('POST', sandboxPath(id, '/processes'), request);
  }

  /** Start a background command and stream its output until it exits (or `signal` gives up: it runs on). */
  startStream(id: string, request: ExecRequest, handlers: StreamHandlers, signal?: AbortSignal): Promise<ExecResult & { handle: string }> {
    return streamed(this.client, sandboxPath(id, '/processes'), { ...request, stream: true }, handlers, signal);
  }

  async input(id: string, handle: string, data?: Buffer, eof = false): Promise<void> {
    await this.client.request('POST', sandboxPath(id, `/processes/${encodeURIComponent(handle)}/stdin`), { ...(data ? { data: data.toString('base64') } : {}), ...(eof ? { eof: true } : {}) });
  }

  async signal(id: string, handle: string, signal: string): Promise<void> {
    await this.client.request('POST', sandboxPath(id, `/processes/${encodeURIComponent(handle)}/signal`), { signal });
  }

  async resize(id: string, handle: string, rows: number, cols: number): Promise<void> {
    await this.client.request('POST', sandboxPath(id, `/processes/${encodeURIComponent(handle)}/resize`), { rows, cols });
  }

  /** Its result once it exited (with the output kept), or `{running: true}` at `timeoutMs`. */
  wait(id: string, handle: string, options: { timeoutMs?: number; encoding?: OutputEncoding; signal?: AbortSignal } = {}): Promise<ExecResult | { running: true }> {
    const { signal, ...body } = options;
    return this.client.request('POST', sandboxPath(id, `/processes/${encodeURIComponent(handle)}/wait`), body, 0, signal);
  }

  get(id: string, handle: string, encoding: OutputEncoding = 'utf8'): Promise<ProcessSnapshotJson> {
    return this.client.request('GET', sandboxPath(id, `/processes/${encodeURIComponent(handle)}?encoding=${encoding}`));
  }

  list(id: string): Promise<ProcessSummary[]> {
    return this.client.request('GET', sandboxPath(id, '/processes'));
  }

  async forget(id: string, handle: string): Promise<void> {
    await this.client.request('DELETE', sandboxPath(id, `/processes/${encodeURIComponent(handle)}`));
  }

  openSession(id: string, options: SessionOptions & { id?: string } = {}): Promise<SessionInfo> {
    return this.client.request('POST', sandboxPath(id, '/sessions'), options);
  }

  /** One command in the session, to its end; with handlers its output streams. */
  run(id: string, session: string, request: SessionRunRequest & { encoding?: OutputEncoding }, handlers?: StreamHandlers, signal?: AbortSignal): Promise<SessionRunResult> {
    const path = sandboxPath(id, `/sessions/${encodeURIComponent(session)}/run`);
    if (handlers) return streamed(this.client, path, { ...request, stream: true }, handlers, signal);
    return this.client.request('POST', path, request, 0, signal);
  }

  async interrupt(id: string, session: string): Promise<void> {
    await this.client.request('POST', sandboxPath(id, `/sessions/${encodeURIComponent(session)}/interrupt`));
  }

  async closeSession(id: string, session: string): Promise<void> {
    await this.client.request('DELETE', sandboxPath(id, `/sessions/${encodeURIComponent(session)}`));
  }

  sessions(id: string): Promise<SessionInfo[]> {
    return this.client.request('GET', sandboxPath(id, '/sessions'));
  }
}
