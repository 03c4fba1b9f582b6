/**
 * Commands that stream, outlive their call, or keep their shell: what the
 * exec, `process` and `session` HookMaps take and answer (bytes, as Buffers:
 * the agent encodes them for its callers), and the JSON shapes the agent's
 * API carries them in.
 */
import type { ExecRequest, OutputEncoding } from './live-sandboxes.js';


export type OutputStream = 'stdout' | 'stderr';
export type OutputListener = (stream: OutputStream, chunk: Buffer) => void;

/** What a backend's exec tap answers: the output as bytes. */
export interface ExecOutput {
  readonly exitCode: number | null;
  /** Set when the process was killed by a signal (including on timeout). */
  readonly signal: string | null;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  /** Either stream went over the cap (in a stream too): cut, and flagged. */
  readonly truncated: boolean;
  readonly timedOut: boolean;
  readonly durationMs: number;
}

/** The exec tap's third argument: how its caller is attached. */
export interface ExecIO {
  /** Aborted when the caller went away: the backend kills the command, never leaves it running. */
  readonly signal?: AbortSignal;
  /** Output as it comes, when the caller streams; what went here is not repeated in the result. */
  readonly onOutput?: OutputListener;
  /** The command started: its handle (for the `process` hook's input, signal and resize) and pid. */
  readonly onStart?: (handle: string, pid: number) => void;
}

/** A background process, or a foreground one with a handle: its state and the output kept so far. */
export interface ProcessSnapshot {
  readonly handle: string;
  readonly pid: number;
  readonly running: boolean;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  readonly truncated: boolean;
  /** Once it exited. */
  readonly exitCode?: number | null;
  readonly signal?: string | null;
  readonly timedOut?: boolean;
  readonly durationMs?: number;
}

/** One background process, as listed. */
export interface ProcessSummary {
  readonly handle: string;
  readonly pid: number;
  readonly running: boolean;
  readonly exitCode?: number | null;
  readonly signal?: string | null;
  readonly command: readonly string[];
  /** How long ago it started. */
  readonly ageMs: number;
}

/** What the `process` HookMap is asked; ProcessAnswers says what each op answers. */
export type ProcessCall =
  /** Start a command that outlives the call (ExecRequest.background); output kept up to its cap, and streamed to `onOutput`. */
  | { readonly op: 'start'; readonly request: ExecRequest; readonly onOutput?: OutputListener }
  /** Bytes into its stdin (a pipe, or a terminal); `eof` closes it. Resolves once written. */
  | { readonly op: 'input'; readonly handle: string; readonly data?: Buffer; readonly eof?: boolean }
  /** A signal to its process group (`SIGTERM`, `SIGINT`, `SIGKILL`...). */
  | { readonly op: 'signal'; readonly handle: string; readonly signal: string }
  /** A terminal process's window size. */
  | { readonly op: 'resize'; readonly handle: string; readonly rows: number; readonly cols: number }
  /** Until it exits, with the output kept; `{ running: true }` when `timeoutMs` came first (never undefined: that means no tap answered). */
  | { readonly op: 'wait'; readonly handle: string; readonly timeoutMs?: number; readonly signal?: AbortSignal }
  | { readonly op: 'get'; readonly handle: string }
  | { readonly op: 'list' }
  /** Kill it if it runs, and drop its record and output. */
  | { readonly op: 'forget'; readonly handle: string };

export interface ProcessAnswers {
  readonly start: { readonly handle: string; readonly pid: number };
  readonly input: true;
  readonly signal: true;
  readonly resize: true;
  readonly wait: ExecOutput | { readonly running: true };
  readonly get: ProcessSnapshot;
  readonly list: ProcessSummary[];
  readonly forget: true;
}

/** How to open a session: a persistent shell. */
export interface SessionOptions {
  /** Where it starts. @default the sandbox's workdir */
  readonly cwd?: string;
  /** On top of the sandbox's environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** An absolute path inside the sandbox. @default its bash if it has one, else sh */
  readonly shell?: string;
}

/** One command in a session. */
export interface SessionRunRequest {
  /** Shell text: it runs in the session's shell, so `cd`, `export` and variables carry over. */
  readonly command: string;
  /** @default 60000 */
  readonly timeoutMs?: number;
  /** Per stream. @default 1 MiB */
  readonly maxOutputBytes?: number;
}

export interface SessionRunOutput {
  readonly exitCode: number | null;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  readonly truncated: boolean;
  readonly timedOut: boolean;
  /** Stopped by `interrupt` (or its timeout): the session keeps its state. */
  readonly interrupted: boolean;
  /** The shell is gone (the command ran `exit`, or had to be killed): the session cannot run more. */
  readonly ended: boolean;
  readonly durationMs: number;
}

export interface SessionInfo {
  readonly id: string;
  readonly pid: number;
  readonly shell: string;
  readonly busy?: boolean;
  readonly ended?: boolean;
  readonly cwd?: string;
}

export type SessionCall =
  | { readonly op: 'open'; readonly id: string; readonly options: SessionOptions }
  | { readonly op: 'run'; readonly id: string; readonly request: SessionRunRequest; readonly onOutput?: OutputListener; readonly signal?: AbortSignal }
  | { readonly op: 'interrupt'; readonly id: string }
  | { readonly op: 'close'; readonly id: string }
  | { readonly op: 'list' };

export interface SessionAnswers {
  readonly open: SessionInfo;
  readonly run: SessionRunOutput;
  readonly interrupt: true;
  readonly close: true;
  readonly list: SessionInfo[];
}

// ------------------------------------------------------------- on the wire

/** A process snapshot in JSON: output in the encoding asked for. */
export type ProcessSnapshotJson = Omit<ProcessSnapshot, 'stdout' | 'stderr'> & { readonly stdout: string; readonly stderr: string };
export type SessionRunResult = Omit<SessionRunOutput, 'stdout' | 'stderr'> & { readonly stdout: string; readonly stderr: string };

/**
 * One line of a streamed call's answer (NDJSON, `POST .../exec` with
 * `stream: true`, a session run with `stream: true`): the start, output as
 * it comes (base64), then the end (the result, without what was streamed)
 * or an error.
 */
export type StreamEvent =
  | { readonly event: 'start'; readonly handle: string; readonly pid: number }
  | { readonly event: 'stdout' | 'stderr'; readonly data: string }
  | { readonly event: 'exit'; readonly result: Record<string, unknown> }
  | { readonly event: 'error'; readonly error: { readonly code: string; readonly message: string; readonly params?: Record<string, unknown> } };

export function encodeOutput(bytes: Buffer, encoding: OutputEncoding = 'utf8'): string {
  return bytes.toString(encoding);
}

/** An exec request's standard input as bytes (`stdinBase64`, else `stdin` as UTF-8), or undefined when it has none. */
export function stdinBytes(request: { readonly stdin?: string; readonly stdinBase64?: string }): Buffer | undefined {
  if (request.stdinBase64 !== undefined) return Buffer.from(request.stdinBase64, 'base64');
  return request.stdin === undefined ? undefined : Buffer.from(request.stdin, 'utf8');
}
