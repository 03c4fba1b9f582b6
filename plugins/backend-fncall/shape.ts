/**
 * What an FnCall worker is, as a container: the guest agent (dsec-guest) as
 * PID 1, listening on a unix socket; the layers read-only; scratch only in
 * capped tmpfs mounts that a reset empties between tasks.
 *
 * The socket lives on a tmpfs inside the worker (1 MiB), not in a host
 * folder bound in: a task runs as the sandbox's user, root by default, and
 * a writable host folder would let it fill the host's disk. The agent
 * reaches the socket through the init's root, /proc/<pid>/root/..., which
 * resolves inside the worker's own mounts. The first reset removes the
 * socket file (it is one of the dirs emptied), so nothing can connect to the
 * worker after the agent did: a task cannot plant a listener of its own
 * where a later connection would look, and a lost connection means the
 * worker is replaced, never reconnected.
 */
import { existsSync } from 'node:fs';
import { DsecError, guestAgentBinaryPath, type ContainerShape } from '../../core/plugin-api.js';
import type { PoolOptions } from './options.js';

/** Where the guest agent binary is bound, inside the worker. */
export const GUEST_IN_SANDBOX = '/.dsec/guest';
/** The folder of the guest agent's socket, inside the worker (a small tmpfs). */
export const RUN_DIR = '/.dsec/run';
export const GUEST_SOCKET = `${RUN_DIR}/agent.sock`;
/** The task's working directory: its code and files go here. */
export const WORK_DIR = '/work';

/**
 * Emptied after every task: every place a task can write. `/dev/shm` and
 * `/dev/mqueue` are the container's own (POSIX shared memory and message
 * queues, writable by design), and the run dir takes the guest socket file
 * with it (see above).
 */
export const RESET_PATHS = Object.freeze([WORK_DIR, '/tmp', '/dev/shm', '/dev/mqueue', RUN_DIR]);

/** The host's dsec-guest: the given path (the plugin's guestPath option), or the one this package built. */
export function findGuestBinary(given?: string): string {
  if (given === undefined) return guestAgentBinaryPath();
  if (!existsSync(given)) throw new DsecError('DSEC_NATIVE_HELPER', { path: given, problem: 'is missing (the guestPath of backend-fncall)' });
  return given;
}

export function workerShape(guestPath: string, pool: PoolOptions): ContainerShape {
  return {
    init: [GUEST_IN_SANDBOX, '--listen', GUEST_SOCKET],
    binds: [{ source: guestPath, target: GUEST_IN_SANDBOX, readonly: true }],
    tmpfs: [
      { target: WORK_DIR, sizeMiB: pool.workMiB },
      { target: '/tmp', sizeMiB: pool.tmpMiB },
      { target: RUN_DIR, sizeMiB: 1 },
    ],
    readonlyRoot: true,
  };
}

/** The guest socket as the agent reaches it: through the worker init's root. */
export function socketOnHost(initPid: number): string {
  return `/proc/${initPid}/root${GUEST_SOCKET}`;
}
