/**
 * What every state store offers (the local file, etcd): the engine and the
 * CLI take a StateStore and never ask which one it is.
 */
import type { StateFile } from '../plan.js';
import type { LockInfo } from './lock.js';
import type { StateSession } from './session.js';

export interface StateStore {
  /** Where the state lives, for messages: a file path, or `etcd:<key>`. */
  readonly location: string;
  /** The state as stored, without locking; nothing stored yet is a fresh state (serial 0). */
  read(): Promise<StateFile>;
  /** Take the lock (DSEC_STATE_LOCKED naming the holder when taken), then read the state under it. */
  lock(info: { command: string }): Promise<StateSession>;
  /** Who holds the lock, if anyone. */
  lockHolder(): Promise<LockInfo | undefined>;
  /** Remove the lock if its id is `id`; anything else is refused (DSEC_STATE_NOT_LOCKED) with what is there. */
  forceUnlock(id: string): Promise<void>;
}
