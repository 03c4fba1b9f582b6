/**
 * The request and answer types of GuestSession (mux.ts): dsec-guest's async
 * mode, protocol 2 (docs/guest-agent.md).
 */
import type { GuestExecResult } from './types.js';

/** Who a process or session runs as: a `user` the guest resolves, or numeric ids that bypass its /etc/passwd. */
export interface GuestUserFields {
  /** `root`, a uid, `uid:gid`, or a user name of the guest's /etc/passwd. Not with `uid`. @default the agent's user (root) */
  readonly user?: string;
  /** Numeric uid (the container backend resolves users on the host); `gid` is then required. */
  readonly uid?: number;
  readonly gid?: number;
  /** Supplementary groups, at most 64. @default just gid */
  readonly groups?: readonly number[];
  /** HOME. @default / (/root for uid 0) */
  readonly home?: string;
}

export interface GuestProcessRequest extends GuestUserFields {
  /** Unique among the agent's live processes and sessions: `[A-Za-z0-9_-]{1,64}`. @default `h` + 12 random hex digits */
  readonly handle?: string;
  /** The program: an absolute path, or a name looked up in the request's PATH (else the default PATH). */
  readonly path: string;
  readonly args?: readonly string[];
  /** Laid over a base environment of PATH and HOME. */
  readonly env?: Readonly<Record<string, string>>;
  /** @default / */
  readonly cwd?: string;
  /** Written to stdin first (inline in the request: keep it under about 20 MiB). Closes stdin after it unless `stdinPipe`. */
  readonly stdin?: Buffer | string;
  /** Keep stdin open for input() until it sends eof. @default false (stdin is /dev/null, or closed after `stdin`) */
  readonly stdinPipe?: boolean;
  /** Run on a new pseudo-terminal (stdin, stdout and stderr; output arrives as stdout; input() writes to it). */
  readonly tty?: { readonly rows: number; readonly cols: number };
  /**
   * SIGKILL to the process group after this long, `timedOut` then set. For
   * exec: @default 60000; 0 means none. For spawn: @default none.
   */
  readonly timeoutMs?: number;
  /** Per stream, kept or streamed; past it output is dropped and flagged. @default 1 MiB, at most 32 MiB */
  readonly maxOutputBytes?: number;
}

export type GuestOutputStream = 'stdout' | 'stderr';
export type GuestOutputListener = (stream: GuestOutputStream, chunk: Buffer) => void;

/** A finished process (exec's answer, wait's). With onOutput, stdout and stderr are empty: the output went to the listener. */
export interface GuestProcessResult extends GuestExecResult {
  readonly pid: number;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
}

/** A process's state and the output kept so far (output()). */
export interface GuestProcessSnapshot {
  readonly running: boolean;
  readonly pid: number;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  /** Once it has exited. */
  readonly exitCode?: number | null;
  readonly signal?: number;
  readonly timedOut?: boolean;
  readonly durationMs?: number;
}

/** One background process (processes()). */
export interface GuestProcessSummary {
  readonly handle: string;
  readonly pid: number;
  readonly running: boolean;
  readonly exitCode?: number;
  readonly signal?: number;
  readonly path: string;
  readonly args: readonly string[];
  readonly ageMs: number;
}

/** A background process exited (sent whether or not it streams). */
export interface GuestExitEvent {
  readonly handle: string;
  readonly pid: number;
  readonly exitCode: number | null;
  readonly signal?: number;
  readonly timedOut: boolean;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  readonly durationMs: number;
}

export interface GuestSessionRequest extends GuestUserFields {
  /** Same namespace as processes. @default `h` + 12 random hex digits */
  readonly handle?: string;
  /** An absolute path. @default /bin/bash when the guest has it, else /bin/sh */
  readonly shell?: string;
  readonly cwd?: string;
  readonly env?: Readonly<Record<string, string>>;
}

export interface GuestSessionRunResult {
  /** The command's status; null when the shell was killed. After `exit N` (ended) the shell's own exit code. */
  readonly exitCode: number | null;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  readonly truncated: boolean;
  readonly timedOut: boolean;
  /** Interrupted (interruptSession, the timeout, or an abort). */
  readonly interrupted: boolean;
  /** The shell is gone (the command ran exit, or it was killed): later runs fail. */
  readonly ended: boolean;
  readonly durationMs: number;
}

export interface GuestSessionSummary {
  readonly handle: string;
  readonly pid: number;
  readonly shell: string;
  readonly busy: boolean;
  readonly ended: boolean;
  /** The shell's working directory, when the agent can read it. */
  readonly cwd?: string;
}

/** How long an answer that does not depend on the sandbox may take. */
export const GUEST_CALL_TIMEOUT_MS = 30_000;
/** dsec-input's largest chunk (input() splits larger data). */
export const MAX_GUEST_INPUT_CHUNK = 4 * 1024 * 1024;
/**
 * Files go to and from the guest in parts of this size (writes appended,
 * reads by offset): the guest holds a part, its base64 and its JSON at once,
 * and all of it is charged to the sandbox's memory, so a part must stay
 * small beside the smallest sandbox (32 MiB).
 */
export const GUEST_FILE_CHUNK = 1024 * 1024;
/** The largest readFile (dsec-read-file's max-bytes). */
export const MAX_GUEST_READ_BYTES = 32 * 1024 * 1024;
