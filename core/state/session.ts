/**
 * A locked state session: the current state, serialized writes, release.
 * The same for every store: a store gives it where the text goes (`persist`:
 * a file renamed into place, a guarded etcd transaction) and how its lock is
 * dropped.
 *
 * Writes are group-committed: mutators queued while a disk write is in flight
 * are applied in order to the latest state and persisted together by the next
 * write, and each caller's promise resolves only once its change is on disk.
 * Apply records every finished sandbox operation this way without writing the
 * file once per operation, and never loses one.
 */
import type { StateFile } from '../plan.js';
import { DSEC_VERSION } from '../version.js';
import type { LockInfo } from './lock.js';
import { validateStateChanges } from './schema.js';
import { serializeState, stateContent } from './serialize.js';

export type StateMutator = (state: StateFile) => StateFile;

export interface StateSession {
  /** The state as last written (or as read when the lock was taken). */
  readonly state: StateFile;
  readonly lock: LockInfo;
  /**
   * Apply `mutate` to the latest state and persist the result. Resolves with
   * the state as written, once it is on disk. The serial is bumped only when
   * the content changed; an unchanged result writes nothing (except the very
   * first write of a state never written, which creates the file). A mutator that
   * throws rejects its own write only.
   */
  write(mutate: StateMutator): Promise<StateFile>;
  /** Resolves once every write requested so far has settled. */
  flush(): Promise<void>;
  /** Wait for pending writes, then drop the lock (if it is still ours). Idempotent. */
  release(): Promise<void>;
}

/** Where a session's writes go: the store's half of a session. */
export interface StateSink {
  /**
   * Put the serialized state `text` (of `written`) where the store keeps it,
   * durably, before resolving. Throwing fails the writes it carried, and the
   * session stays at the state it last persisted.
   */
  persist(text: string, written: StateFile): Promise<void>;
  /** Drop the lock, after every pending write settled (if it is still ours). */
  release(): Promise<void>;
}

interface PendingWrite {
  readonly mutate: StateMutator;
  readonly resolve: (state: StateFile) => void;
  readonly reject: (error: unknown) => void;
}

export class GroupCommitStateSession implements StateSession {
  private current: StateFile;
  private currentContent: string;
  private readonly queue: PendingWrite[] = [];
  private flushing: Promise<void> | undefined;
  private released = false;

  constructor(
    initial: StateFile,
    readonly lock: LockInfo,
    private readonly sink: StateSink,
  ) {
    this.current = initial;
    this.currentContent = stateContent(initial);
  }

  get state(): StateFile {
    return this.current;
  }

  write(mutate: StateMutator): Promise<StateFile> {
    if (this.released) return Promise.reject(new Error('the state session was released; take the lock again to write'));
    return new Promise((resolve, reject) => {
      this.queue.push({ mutate, resolve, reject });
      this.kick();
    });
  }

  private kick(): void {
    if (this.flushing) return;
    this.flushing = (async () => {
      try {
        await this.drain();
      } finally {
        this.flushing = undefined;
        // A write queued after the drain's last look at the queue.
        if (this.queue.length > 0) this.kick();
      }
    })();
  }

  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
  }

  async release(): Promise<void> {
    if (this.released) return;
    await this.flush();
    this.released = true;
    await this.sink.release();
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0);
      let next = this.current;
      const applied: PendingWrite[] = [];
      for (const pending of batch) {
        try {
          next = pending.mutate(next);
          applied.push(pending);
        } catch (error) {
          pending.reject(error);
        }
      }
      try {
        if (next !== this.current || this.current.serial === 0) await this.persist(next);
      } catch (error) {
        for (const pending of applied) pending.reject(error);
        continue;
      }
      for (const pending of applied) pending.resolve(this.current);
    }
  }

  private async persist(next: StateFile): Promise<void> {
    const content = stateContent(next);
    // Serial 0 means never written: the first write always reaches the disk,
    // so the lineage that new sandboxes are labelled with is pinned before
    // any of them exists (a crash after that loses no ownership).
    if (content === this.currentContent && this.current.serial > 0) return;
    const written: StateFile = { ...next, serial: this.current.serial + 1, dsec_version: DSEC_VERSION };
    // Never put on disk a state the next read would call corrupt.
    const problem = validateStateChanges(written);
    if (problem) throw new Error(`refusing to write an invalid state: ${problem}`);
    await this.sink.persist(serializeState(written, content), written);
    this.current = written;
    this.currentContent = content;
  }
}
