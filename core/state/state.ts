/**
 * The local state store: `<stateDir>/state.json`, its backup
 * `state.json.backup`, and the lock `state.lock`.
 *
 * Reading takes no lock: `dsec plan` and `dsec show` read a consistent
 * snapshot (writes are atomic renames) and write nothing, so CI can plan
 * while nobody can apply twice at once. Every writing command (apply,
 * destroy, refresh, state rm) takes the lock for its whole run; a saved plan
 * records lineage + serial, so one made while another apply ran is refused.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { DsecError } from '../errors.js';
import type { StateFile } from '../plan.js';
import { DSEC_VERSION } from '../version.js';
import {
  type LockInfo,
  lockedError,
  newLockInfo,
  readLock,
  removeLockIf,
  tryCreateLock,
  describeHolder,
} from './lock.js';
import { writeFileAtomic } from './files.js';
import { validateState } from './schema.js';
import { GroupCommitStateSession, type StateSession } from './session.js';
import type { StateStore } from './store.js';

export interface LocalStateStoreOptions {
  /** How long `lock()` retries (with backoff) while another live process holds the lock. @default 0 */
  readonly lockTimeoutMs?: number;
}

/** A state that was never written: a new random lineage, serial 0, nothing owned. */
export function emptyState(): StateFile {
  return { format_version: 1, lineage: randomUUID(), serial: 0, dsec_version: DSEC_VERSION, resources: {} };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class LocalStateStore implements StateStore {
  readonly file: string;
  readonly backupFile: string;
  readonly lockFile: string;
  private readonly lockTimeoutMs: number;

  /** The state file's path. */
  get location(): string {
    return this.file;
  }

  constructor(
    readonly stateDir: string,
    options: LocalStateStoreOptions = {},
  ) {
    this.file = path.join(stateDir, 'state.json');
    this.backupFile = `${this.file}.backup`;
    this.lockFile = path.join(stateDir, 'state.lock');
    this.lockTimeoutMs = options.lockTimeoutMs ?? 0;
  }

  /** The state on disk; a missing file is a fresh state, a corrupt one an error (never replaced). */
  async read(): Promise<StateFile> {
    let text: string;
    try {
      text = await readFile(this.file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return emptyState();
      throw error;
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      throw new DsecError(
        'DSEC_STATE_CORRUPT',
        { file: this.file, message: (error as Error).message },
        { cause: error },
      );
    }
    const problem = validateState(value);
    if (problem) throw new DsecError('DSEC_STATE_CORRUPT', { file: this.file, message: problem });
    return value as StateFile;
  }

  /**
   * Take the lock, then read the state under it. A live holder gives
   * DSEC_STATE_LOCKED naming it (after retrying up to `lockTimeoutMs`); a
   * holder on this host whose process is gone gives DSEC_STATE_STALE_LOCK
   * with the `dsec force-unlock <id>` to run, at once.
   */
  async lock(info: { command: string }): Promise<StateSession> {
    await mkdir(this.stateDir, { recursive: true });
    const mine = newLockInfo(info.command);
    const deadline = Date.now() + this.lockTimeoutMs;
    let delay = 50;
    while (!(await tryCreateLock(this.lockFile, mine))) {
      const held = await readLock(this.lockFile);
      if (held.state === 'free') continue; // released between our attempt and the read
      const error = lockedError(this.lockFile, held);
      if (error.code === 'DSEC_STATE_STALE_LOCK' || Date.now() + delay > deadline) throw error;
      await sleep(delay);
      delay = Math.min(delay * 2, 2000);
    }
    try {
      const state = await this.read();
      return new GroupCommitStateSession(state, mine, {
        persist: (text) => writeFileAtomic(this.file, text, { backup: this.backupFile }),
        release: async () => {
          await removeLockIf(this.lockFile, mine.id);
        },
      });
    } catch (error) {
      await removeLockIf(this.lockFile, mine.id);
      throw error;
    }
  }

  /** Who holds the lock, if anyone. */
  async lockHolder(): Promise<LockInfo | undefined> {
    const held = await readLock(this.lockFile);
    return held.state === 'held' ? held.info : undefined;
  }

  /** Remove the lock if its id is `id`; anything else is refused with what is there. */
  async forceUnlock(id: string): Promise<void> {
    const held = await readLock(this.lockFile);
    if (held.state === 'free') throw new DsecError('DSEC_STATE_NOT_LOCKED', { id, detail: 'the state is not locked' });
    if (held.state === 'unreadable') {
      throw new DsecError('DSEC_STATE_NOT_LOCKED', { id, detail: `${this.lockFile} is unreadable; remove it by hand` });
    }
    if (held.info.id !== id) {
      throw new DsecError('DSEC_STATE_NOT_LOCKED', { id, detail: `the lock is held by ${describeHolder(held.info)}` });
    }
    await removeLockIf(this.lockFile, id);
  }
}
