/**
 * Calls into a live sandbox beyond exec, as the agent's routes, the providers
 * and the SDK carry them: the operations a backend may support (its
 * capabilities), file calls, and FnCall tasks with their results.
 */

/**
 * The operations a backend may support, each one a HookMap tap keyed by the
 * backend's kind. The agent derives a backend's capabilities from the taps it
 * has (never a separate list that could drift) and reports them per node; a
 * call a backend lacks is DSEC_BACKEND_UNSUPPORTED naming the backend.
 */
export type BackendOperation = 'exec' | 'process' | 'session' | 'readFile' | 'writeFile' | 'update' | 'pause' | 'resume' | 'snapshot' | 'usage' | 'invoke';

export const BACKEND_OPERATIONS: readonly BackendOperation[] = Object.freeze([
  'exec',
  'process',
  'session',
  'readFile',
  'writeFile',
  'update',
  'pause',
  'resume',
  'snapshot',
  'usage',
  'invoke',
]);

/**
 * The biggest file a `readFile` or `writeFile` carries: the bytes travel
 * base64 in one JSON document held in memory by the agent and the caller.
 */
export const MAX_FILE_BYTES = 32 * 1024 * 1024;
/** `readFile`'s `maxBytes` when the caller names none. */
export const DEFAULT_READ_FILE_BYTES = 16 * 1024 * 1024;

/** `readFile`: one file's content from inside a sandbox. */
export interface ReadFileRequest {
  /** Absolute path inside the sandbox. */
  readonly path: string;
  /** Refuse (DSEC_FILE_TOO_LARGE) a file bigger than this. @default 16 MiB */
  readonly maxBytes?: number;
}

export interface FileContent {
  readonly path: string;
  /** The bytes, base64 (JSON carries them to the CLI and SDK unchanged). */
  readonly data: string;
  readonly size: number;
}

/** `writeFile`: create or replace one file inside a sandbox (parent directories are created). */
export interface WriteFileRequest {
  /** Absolute path inside the sandbox. */
  readonly path: string;
  /** The bytes, base64. */
  readonly data: string;
  /** Permission bits. @default 0o644 */
  readonly mode?: number;
}

/** One FnCall task: code to run with an interpreter in a pooled worker, stateless. */
export interface FunctionTask {
  /** `bash`, `sh`, `python3` (when the environment has it), or an interpreter's absolute path. */
  readonly runtime: string;
  /** The program, passed to the runtime as a file (`<runtime> /work/main.<ext>`). */
  readonly code: string;
  /** Extra files for the task, relative to its working directory -> content (base64). */
  readonly files?: Readonly<Record<string, string>>;
  /** Standard input (utf-8). */
  readonly stdin?: string;
  readonly args?: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  /** Killed after this long; its worker is then replaced. @default 30000 */
  readonly timeoutMs?: number;
}

export interface FunctionResult {
  readonly stdout: string;
  readonly stderr: string;
  /** null when it was killed (a timeout). */
  readonly exitCode: number | null;
  readonly timedOut: boolean;
  /** stdout or stderr went past the cap and was cut. */
  readonly truncated: boolean;
  /** Run time inside the worker. */
  readonly durationMs: number;
  /** Time spent waiting for a free worker. */
  readonly queuedMs: number;
  /** The worker sandbox that ran it. */
  readonly worker: string;
}
