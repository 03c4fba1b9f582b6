/** The guest agent's host side (see client.ts) and where its guest side binary is. */
export { GuestAgentClient } from './client.js';
export { guestAgentBinaryPath } from './binary.js';
export type { GuestFileStat } from './files.js';
export {
  DEFAULT_EXEC_TIMEOUT_MS as DEFAULT_GUEST_EXEC_TIMEOUT_MS,
  MAX_GUEST_OUTPUT_BYTES,
  type GuestAgentInfo,
  type GuestConnectOptions,
  type GuestExecRequest,
  type GuestExecResult,
} from './types.js';
/** dsec-guest's async mode (protocol 2): many calls at once on one connection, background processes, terminals, sessions (see mux.ts). */
export { GuestSession, type GuestSessionOptions } from './mux.js';
export { openFifoTransport, openSocketTransport, type GuestTransport } from './mux-transport.js';
/** The exec, process and session hooks answered over a GuestSession (the container and microVM backends). */
export { execOnGuest, guestProcessRequest, processOnGuest, sessionOnGuest, signalOf as guestSignalName, type GuestCallTarget, type GuestPlace } from './hook-calls.js';
export {
  GUEST_FILE_CHUNK,
  MAX_GUEST_INPUT_CHUNK,
  MAX_GUEST_READ_BYTES,
  type GuestExitEvent,
  type GuestOutputListener,
  type GuestOutputStream,
  type GuestProcessRequest,
  type GuestProcessResult,
  type GuestProcessSnapshot,
  type GuestProcessSummary,
  type GuestSessionRequest,
  type GuestSessionRunResult,
  type GuestSessionSummary,
  type GuestUserFields,
} from './mux-types.js';
