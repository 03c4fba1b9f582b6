/**
 * The remote state store: the state and its lock in etcd, so a team's CI
 * jobs and laptops share one state (keys from core/cluster/keys.ts):
 *
 *   <prefix>/state/<key>        the state file's text (the same JSON as state.json)
 *   <prefix>/state/<key>.lock   the LockInfo of the holder, under the holder's lease
 *
 * The lock is a key created only if absent, attached to a lease the holder
 * keeps alive while its session lives: a holder that crashes (a CI job
 * killed half-way through an apply) frees the lock when its lease lapses,
 * with no stale-lock dance. Every write is one transaction that checks the
 * lock key still holds our LockInfo and that the state is still at the
 * revision we last read or wrote: a holder whose lease lapsed (and whose
 * lock someone else may have taken since) can never overwrite a newer
 * holder's state, and no concurrent write is ever lost silently.
 */
import type { Etcd3, IKeyValue } from 'etcd3';
import { clusterKeys } from '../cluster/keys.js';
import { etcdFailure } from '../cluster/etcd.js';
import { DsecError } from '../errors.js';
import type { StateFile } from '../plan.js';
import { type LockInfo, describeHolder, holderParams, newLockInfo, parseLockInfo } from './lock.js';
import {
  chunksPrefix,
  DEFAULT_MAX_VALUE_BYTES,
  dropOtherGenerations,
  encodeState,
  parseManifest,
  readStateText,
  writeChunks,
} from './etcd-chunks.js';
import { validateState } from './schema.js';
import { GroupCommitStateSession, type StateSession } from './session.js';
import { emptyState } from './state.js';
import type { StateStore } from './store.js';

export interface EtcdStateStoreOptions {
  /** The cluster's key prefix. @default '/dsec' */
  readonly prefix?: string;
  /** The lock's lease TTL: how long a crashed holder keeps the lock. @default 10 */
  readonly leaseTtlSeconds?: number;
  /** How long `lock()` retries (with backoff) while someone else holds the lock. @default 0 */
  readonly lockTimeoutMs?: number;
  /** A state text bigger than this is stored in chunks of this size (etcd refuses requests over 1.5 MiB). @default 1 MiB */
  readonly maxValueBytes?: number;
}

type LockRead =
  | { readonly state: 'free' }
  | { readonly state: 'held'; readonly info?: LockInfo; readonly text: string; readonly lease: string };

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class EtcdStateStore implements StateStore {
  readonly stateKey: string;
  readonly lockKey: string;
  private readonly leaseTtlSeconds: number;
  private readonly lockTimeoutMs: number;
  private readonly maxValueBytes: number;

  constructor(
    private readonly client: Etcd3,
    readonly key: string,
    options: EtcdStateStoreOptions = {},
  ) {
    const keys = clusterKeys(options.prefix);
    this.stateKey = keys.state(key);
    this.lockKey = keys.stateLock(key);
    this.leaseTtlSeconds = options.leaseTtlSeconds ?? 10;
    this.lockTimeoutMs = options.lockTimeoutMs ?? 0;
    this.maxValueBytes = options.maxValueBytes ?? DEFAULT_MAX_VALUE_BYTES;
  }

  get location(): string {
    return `etcd:${this.stateKey}`;
  }

  async read(): Promise<StateFile> {
    return (await this.readWithRevision()).state;
  }

  /**
   * Take the lock, then read the state under it. A holder gives
   * DSEC_STATE_LOCKED naming it (after retrying up to `lockTimeoutMs`).
   */
  async lock(info: { command: string }): Promise<StateSession> {
    const mine = newLockInfo(info.command);
    const mineText = JSON.stringify(mine);
    const lease = this.client.lease(this.leaseTtlSeconds);
    let lost: string | undefined;
    lease.on('lost', (error) => {
      lost = `its lease lapsed: ${error.message}`;
    });
    try {
      const leaseId = await this.call(() => lease.grant());
      await this.acquire(mineText, leaseId);
      const { state, revision, generation } = await this.readWithRevision();
      let stateRevision = revision;
      let stateGeneration = generation;
      // Chunks a writer that crashed mid-write left behind.
      await this.call(() => dropOtherGenerations(this.client, this.stateKey, stateGeneration));
      return new GroupCommitStateSession(state, mine, {
        persist: async (text) => {
          if (lost) throw this.lockLost(mine, lost);
          const encoded = encodeState(text, this.maxValueBytes);
          try {
            await this.call(() => writeChunks(this.client, this.stateKey, encoded));
            const result = await this.call(() =>
              this.client
                .if(this.lockKey, 'Value', '==', mineText)
                .and(this.stateKey, 'Mod', '==', stateRevision)
                .then(this.client.put(this.stateKey).value(encoded.value))
                .commit(),
            );
            stateRevision = result.succeeded
              ? result.header.revision
              : await this.refusedWrite(mine, mineText, stateRevision, encoded.value);
          } catch (error) {
            if (encoded.generation) await dropGeneration(this.client, this.stateKey, encoded.generation);
            throw error;
          }
          if (stateGeneration || encoded.generation) {
            await this.call(() => dropOtherGenerations(this.client, this.stateKey, encoded.generation));
          }
          stateGeneration = encoded.generation;
        },
        release: async () => {
          // Revoking the lease deletes the lock key with it; an unreachable
          // etcd lets the lease lapse by itself.
          await lease.revoke().catch(() => lease.release());
        },
      });
    } catch (error) {
      await lease.revoke().catch(() => lease.release());
      throw error;
    }
  }

  async lockHolder(): Promise<LockInfo | undefined> {
    const held = await this.readLock();
    return held.state === 'held' ? held.info : undefined;
  }

  async forceUnlock(id: string): Promise<void> {
    const held = await this.readLock();
    if (held.state === 'free') throw new DsecError('DSEC_STATE_NOT_LOCKED', { id, detail: 'the state is not locked' });
    if (!held.info) {
      throw new DsecError('DSEC_STATE_NOT_LOCKED', {
        id,
        detail: `etcd key ${this.lockKey} is unreadable; delete it by hand (etcdctl del ${this.lockKey})`,
      });
    }
    if (held.info.id !== id) {
      throw new DsecError('DSEC_STATE_NOT_LOCKED', { id, detail: `the lock is held by ${describeHolder(held.info)}` });
    }
    // Only that exact lock: a holder that took it in between stays.
    await this.call(() => this.client.if(this.lockKey, 'Value', '==', held.text).then(this.client.delete().key(this.lockKey)).commit());
  }

  /** Create the lock key under `leaseId` if absent; retry with backoff up to lockTimeoutMs. */
  private async acquire(mineText: string, leaseId: string): Promise<void> {
    const deadline = Date.now() + this.lockTimeoutMs;
    let delay = 50;
    for (;;) {
      const result = await this.call(() =>
        this.client
          .if(this.lockKey, 'Create', '==', 0)
          .then(this.client.put(this.lockKey).value(mineText).lease(leaseId))
          .else(this.client.get(this.lockKey))
          .commit(),
      );
      if (result.succeeded) return;
      const held = this.lockFrom(result.responses[0]?.response_range?.kvs[0]);
      // Released between the compare and the read: try again at once.
      if (held.state === 'held') {
        if (Date.now() + delay > deadline) throw await this.lockedError(held);
        await sleep(delay);
        delay = Math.min(delay * 2, 2000);
      }
    }
  }

  private async lockedError(held: Extract<LockRead, { state: 'held' }>): Promise<DsecError> {
    if (!held.info) {
      return new DsecError('DSEC_STATE_LOCKED', {
        holder: `an unreadable lock at etcd key ${this.lockKey} (delete it by hand if no dsec command is running)`,
        lockFile: this.lockKey,
      });
    }
    const ttl = await this.remainingTtl(held.lease);
    const lapse = ttl === undefined ? '' : `; if that process is gone, the lock lapses within ${ttl} s`;
    const holder = `${describeHolder(held.info)}${lapse}`;
    return new DsecError('DSEC_STATE_LOCKED', holderParams(held.info, holder));
  }

  /**
   * A guarded write was refused. When the lock is still ours and the state
   * is exactly what we wrote, it was our own write, applied by a member that
   * failed before answering and retried by the client: it counts as done (the
   * new revision is returned). Otherwise our lock is gone (or someone else's),
   * or the state moved under us: DSEC_STATE_LOCK_LOST, thrown.
   */
  private async refusedWrite(mine: LockInfo, mineText: string, revision: string, text: string): Promise<string> {
    const held = await this.readLock();
    if (held.state === 'free') throw this.lockLost(mine, 'the lock was released or its lease lapsed');
    if (held.text !== mineText) {
      const other = held.info ? describeHolder(held.info) : 'an unreadable lock';
      throw this.lockLost(mine, `the lock is now held by ${other}`);
    }
    const stored = (await this.call(() => this.client.get(this.stateKey).exec())).kvs[0];
    if (stored && stored.value.toString('utf8') === text) return stored.mod_revision;
    throw this.lockLost(mine, `the state at ${this.stateKey} changed since revision ${revision} without the lock`);
  }

  /** Seconds left on the holder's lease (undefined: no lease, or etcd would not say). */
  private async remainingTtl(lease: string): Promise<number | undefined> {
    if (lease === '0') return undefined;
    try {
      const answer = await this.client.leaseClient.leaseTimeToLive({ ID: lease });
      const ttl = Number(answer.TTL);
      return ttl >= 0 ? ttl : undefined;
    } catch {
      return undefined;
    }
  }

  private lockLost(mine: LockInfo, detail: string): DsecError {
    return new DsecError('DSEC_STATE_LOCK_LOST', { id: mine.id, location: this.location, detail });
  }

  private async readWithRevision(): Promise<{ state: StateFile; revision: string; generation?: string }> {
    const response = await this.call(() => this.client.get(this.stateKey).exec());
    const kv = response.kvs[0];
    if (!kv) return { state: emptyState(), revision: '0' };
    const generation = parseManifest(kv.value.toString('utf8'))?.generation;
    let value: unknown;
    try {
      value = JSON.parse(await this.call(() => readStateText(this.client, this.stateKey, kv)));
    } catch (error) {
      if (error instanceof DsecError) throw error;
      throw new DsecError('DSEC_STATE_CORRUPT', { file: this.location, message: (error as Error).message }, { cause: error });
    }
    const problem = validateState(value);
    if (problem) throw new DsecError('DSEC_STATE_CORRUPT', { file: this.location, message: problem });
    return { state: value as StateFile, revision: kv.mod_revision, generation };
  }

  private async readLock(): Promise<LockRead> {
    const response = await this.call(() => this.client.get(this.lockKey).exec());
    return this.lockFrom(response.kvs[0]);
  }

  private lockFrom(kv: IKeyValue | undefined): LockRead {
    if (!kv) return { state: 'free' };
    const text = kv.value.toString('utf8');
    return { state: 'held', info: parseLockInfo(text), text, lease: kv.lease };
  }

  /** Run an etcd call; a connection failure becomes DSEC_ETCD_UNREACHABLE naming the endpoints. */
  private async call<T>(run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (error) {
      throw etcdFailure(this.client, error);
    }
  }
}

/** Best effort: the chunks of a write that did not land (the next lock sweeps what stays). */
async function dropGeneration(client: Etcd3, stateKey: string, generation: string): Promise<void> {
  await client
    .delete()
    .prefix(`${chunksPrefix(stateKey)}${generation}/`)
    .exec()
    .catch(() => undefined);
}
