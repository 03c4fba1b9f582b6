/** The guest agent client's request and answer types (see client.ts). */

export interface GuestConnectOptions {
  /** How long to keep trying to connect and get a first answer. @default 30000 */
  readonly timeoutMs?: number;
  /** The sandbox the agent runs in, named in every error. @default the socket path */
  readonly id?: string;
}

export interface GuestAgentInfo {
  /** The agent's own version string (`dsec-guest 2.0.0`, or qemu-ga's `7.2.22`). */
  readonly version: string;
  /** The commands it has enabled. */
  readonly commands: readonly string[];
  /** Whether it is dsec-guest (has the dsec-* extensions) rather than a plain QEMU guest agent. */
  readonly dsec: boolean;
}

export interface GuestExecRequest {
  /** The program: an absolute path, or a name looked up in PATH. */
  readonly path: string;
  readonly args?: readonly string[];
  /** Laid over a base environment of PATH (and HOME for dsec-guest). */
  readonly env?: Readonly<Record<string, string>>;
  /** @default / */
  readonly cwd?: string;
  /** `root`, a uid, `uid:gid`, or a user name of the guest's /etc/passwd. @default the agent's user (root) */
  readonly user?: string;
  /** Sent inline with the request: at most about 20 MiB (the agent refuses longer request lines). */
  readonly stdin?: Buffer | string;
  /** The process group is killed after this long (a value that is not positive means the default). @default 60000 */
  readonly timeoutMs?: number;
  /** Per stream; output past it is dropped and `truncated` set. @default 1 MiB, at most 32 MiB */
  readonly maxOutputBytes?: number;
}

export interface GuestExecResult {
  /** null when a signal ended it. A command that is not there is 127, one not executable 126 (as a shell says). */
  readonly exitCode: number | null;
  readonly signal?: number;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  readonly truncated: boolean;
  readonly timedOut: boolean;
  readonly durationMs: number;
}

export const DEFAULT_EXEC_TIMEOUT_MS = 60_000;
/** The longest exec timeout (what dsec-guest and a host timer accept); the answer's wait adds EXEC_ANSWER_MARGIN_MS. */
export const MAX_EXEC_TIMEOUT_MS = 2 ** 31 - 1 - 60_000;
export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;
/** The most either agent keeps per stream (dsec-guest's bound; qemu-ga keeps 16 MB). */
export const MAX_GUEST_OUTPUT_BYTES = 32 * 1024 * 1024;
/** How much longer than the exec's own timeout the host waits for the answer (the kill and the reaping take time). */
export const EXEC_ANSWER_MARGIN_MS = 30_000;
