/**
 * The SDK's streamed execs, background commands and sessions, over the
 * agent that holds the sandbox (Provider.sandboxAgent): what `exec` does
 * when the caller streams output or stdin, `ProcessHandle` for a command
 * that outlives its call, `Session` for a persistent shell.
 */
import { DsecError } from '../errors.js';
import type { ExecRequest, ExecResult, OutputStream, ProcessSnapshotJson, SessionInfo, SessionRunResult } from '../live.js';
import type { Provider } from '../provider.js';
import { ProcessClient } from '../agent/client-processes.js';

/** Bytes or text for stdin, or a stream of them (fed to the command as they come). */
export type StdinSource = string | Buffer | Uint8Array | AsyncIterable<Buffer | Uint8Array | string>;

/** What `exec` takes besides the command. */
export interface ExecOptions extends Omit<ExecRequest, 'cmd' | 'stdin' | 'stdinBase64' | 'openStdin' | 'encoding' | 'background'> {
  /** Standard input: text, bytes, or a stream (an async iterable, a Readable) fed as it comes. */
  readonly stdin?: StdinSource;
  /** Each chunk of stdout as it comes (the result then holds it too, up to the cap). */
  readonly onStdout?: (chunk: Buffer) => void;
  readonly onStderr?: (chunk: Buffer) => void;
  /** `buffer`: stdout and stderr as Buffers, the bytes unchanged. @default 'text' (UTF-8) */
  readonly output?: 'text' | 'buffer';
  /** Give up: the command is killed. */
  readonly signal?: AbortSignal;
  /** Only if this holder has the sandbox (DSEC_SANDBOX_CLAIMED / DSEC_SANDBOX_NOT_CLAIMED otherwise). */
  readonly holder?: string;
  /** Told its handle and pid once it started (a streamed exec). */
  readonly onStart?: (handle: string, pid: number) => void;
  /** Start it in the background: `exec` then answers a ProcessHandle at once. */
  readonly background?: boolean;
}

/** An exec's result with its output as bytes (`output: 'buffer'`). */
export type ExecBytesResult = Omit<ExecResult, 'stdout' | 'stderr'> & { readonly stdout: Buffer; readonly stderr: Buffer };

const isStream = (stdin: StdinSource | undefined): stdin is AsyncIterable<Buffer | Uint8Array | string> =>
  stdin !== undefined && typeof stdin !== 'string' && !(stdin instanceof Uint8Array) && Symbol.asyncIterator in (stdin as object);

const toBuffer = (chunk: Buffer | Uint8Array | string): Buffer => (typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk));

/** The request the agent takes: stdin inline when it is bytes or text, kept open when it streams. */
export function execRequestOf(cmd: readonly string[], options: ExecOptions): ExecRequest {
  const { stdin, onStdout: _o, onStderr: _e, output, signal: _s, onStart: _t, ...rest } = options;
  return {
    ...rest,
    cmd: [...cmd],
    ...(typeof stdin === 'string' ? { stdin } : stdin instanceof Uint8Array ? { stdinBase64: Buffer.from(stdin).toString('base64') } : {}),
    ...(isStream(stdin) ? { openStdin: true } : {}),
    encoding: output === 'buffer' ? 'base64' : 'utf8',
  };
}

/** Does this exec need the streamed route (output as it comes, stdin as it comes, a terminal, a start notice)? */
export function needsStream(options: ExecOptions): boolean {
  return Boolean(options.onStdout || options.onStderr || options.onStart || options.tty || isStream(options.stdin));
}

/** A streamed exec: output to the callbacks (and kept for the result), stdin pumped once the command started. */
export async function streamExec(provider: Provider, id: string, cmd: readonly string[], options: ExecOptions): Promise<ExecResult | ExecBytesResult> {
  const client = new ProcessClient(await provider.sandboxAgent(id));
  const request = execRequestOf(cmd, { ...options, output: 'buffer' });
  const kept: Record<OutputStream, Buffer[]> = { stdout: [], stderr: [] };
  let pumping: Promise<void> | undefined;
  const result = await client.execStream(
    id,
    request,
    {
      onStart: (handle, pid) => {
        options.onStart?.(handle, pid);
        if (isStream(options.stdin)) pumping = pump(client, id, handle, options.stdin);
      },
      onOutput: (stream, chunk) => {
        kept[stream].push(chunk);
        (stream === 'stdout' ? options.onStdout : options.onStderr)?.(chunk);
      },
    },
    options.signal,
  );
  // A command that exited before reading all its input: what is left of the stream is not an error.
  await pumping?.catch(() => undefined);
  const stdout = Buffer.concat([...kept.stdout, Buffer.from(result.stdout, 'base64')]);
  const stderr = Buffer.concat([...kept.stderr, Buffer.from(result.stderr, 'base64')]);
  return options.output === 'buffer' ? { ...result, stdout, stderr } : { ...result, stdout: stdout.toString('utf8'), stderr: stderr.toString('utf8') };
}

async function pump(client: ProcessClient, id: string, handle: string, stdin: AsyncIterable<Buffer | Uint8Array | string>): Promise<void> {
  for await (const chunk of stdin) {
    const bytes = toBuffer(chunk);
    // The agent takes at most 4 MiB a call.
    for (let at = 0; at < bytes.length; at += 4 * 1024 * 1024) await client.input(id, handle, bytes.subarray(at, at + 4 * 1024 * 1024));
  }
  await client.input(id, handle, undefined, true);
}

/** A command running in the background (`exec(id, cmd, { background: true })`): it outlives the call, and dies with its sandbox. */
export class ProcessHandle {
  constructor(
    private readonly client: ProcessClient,
    readonly sandboxId: string,
    readonly handle: string,
    readonly pid: number,
  ) {}

  /** Until it exits: its result, with the output kept (up to its cap). `timeoutMs`: undefined if it still runs then. */
  async wait(options: { timeoutMs?: number; output?: 'text' | 'buffer'; signal?: AbortSignal } = {}): Promise<ExecResult | undefined> {
    const result = await this.client.wait(this.sandboxId, this.handle, {
      ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
      encoding: options.output === 'buffer' ? 'base64' : 'utf8',
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return 'running' in result ? undefined : result;
  }

  /** Its state and the output it wrote so far. */
  output(options: { output?: 'text' | 'buffer' } = {}): Promise<ProcessSnapshotJson> {
    return this.client.get(this.sandboxId, this.handle, options.output === 'buffer' ? 'base64' : 'utf8');
  }

  /** A signal to its process group. @default SIGKILL */
  kill(signal = 'SIGKILL'): Promise<void> {
    return this.client.signal(this.sandboxId, this.handle, signal);
  }

  /** Bytes into its stdin (it must have been started with a streamed stdin or a terminal). */
  sendStdin(data: string | Buffer): Promise<void> {
    return this.client.input(this.sandboxId, this.handle, toBuffer(data));
  }

  closeStdin(): Promise<void> {
    return this.client.input(this.sandboxId, this.handle, undefined, true);
  }

  resize(rows: number, cols: number): Promise<void> {
    return this.client.resize(this.sandboxId, this.handle, rows, cols);
  }

  /** Kill it if it runs, and drop what the sandbox keeps of it. */
  forget(): Promise<void> {
    return this.client.forget(this.sandboxId, this.handle);
  }
}

export async function startBackground(provider: Provider, id: string, cmd: readonly string[], options: ExecOptions): Promise<ProcessHandle> {
  if (options.onStdout || options.onStderr || isStream(options.stdin)) {
    throw new DsecError('DSEC_USAGE', { message: 'a background command keeps its output (read it with handle.output() or handle.wait()); onStdout, onStderr and a stdin stream are for a command in the foreground' });
  }
  const client = new ProcessClient(await provider.sandboxAgent(id));
  const started = await client.start(id, { ...execRequestOf(cmd, options), background: true });
  return new ProcessHandle(client, id, started.handle, started.pid);
}

/** What a session run takes. */
export interface SessionRunOptions {
  /** @default 60000 */
  readonly timeoutMs?: number;
  /** Per stream. @default 1 MiB */
  readonly maxOutputBytes?: number;
  readonly onStdout?: (chunk: Buffer) => void;
  readonly onStderr?: (chunk: Buffer) => void;
  /** Give up: the command is interrupted, the session stays. */
  readonly signal?: AbortSignal;
}

/** A persistent shell in a sandbox (`session(id)`): cwd, exported and shell variables carry from one run to the next. */
export class Session {
  constructor(
    private readonly client: ProcessClient,
    readonly sandboxId: string,
    readonly info: SessionInfo,
  ) {}

  get id(): string {
    return this.info.id;
  }

  /** One command in the shell, to its end: its exit code, capped output, timeout (`interrupted`, the session kept). */
  async run(command: string, options: SessionRunOptions = {}): Promise<SessionRunResult> {
    const request = {
      command,
      ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
      ...(options.maxOutputBytes !== undefined ? { maxOutputBytes: options.maxOutputBytes } : {}),
    };
    if (!options.onStdout && !options.onStderr) return this.client.run(this.sandboxId, this.id, request, undefined, options.signal);
    const kept: Record<OutputStream, Buffer[]> = { stdout: [], stderr: [] };
    const result = await this.client.run(
      this.sandboxId,
      this.id,
      { ...request, encoding: 'base64' },
      {
        onOutput: (stream, chunk) => {
          kept[stream].push(chunk);
          (stream === 'stdout' ? options.onStdout : options.onStderr)?.(chunk);
        },
      },
      options.signal,
    );
    const text = (stream: OutputStream, rest: string) => Buffer.concat([...kept[stream], Buffer.from(rest, 'base64')]).toString('utf8');
    return { ...result, stdout: text('stdout', result.stdout), stderr: text('stderr', result.stderr) };
  }

  /** Stop the command in flight (SIGINT, then SIGKILL); the shell and its state stay. */
  interrupt(): Promise<void> {
    return this.client.interrupt(this.sandboxId, this.id);
  }

  close(): Promise<void> {
    return this.client.closeSession(this.sandboxId, this.id);
  }
}

export async function openSession(provider: Provider, id: string, options: { cwd?: string; env?: Readonly<Record<string, string>>; shell?: string } = {}): Promise<Session> {
  const client = new ProcessClient(await provider.sandboxAgent(id));
  return new Session(client, id, await client.openSession(id, options));
}
