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
