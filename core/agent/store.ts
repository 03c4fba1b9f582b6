/**
 * The agent's sandboxes, in memory and on disk. Each sandbox is a
 * SandboxContext (what the hooks see) plus the agent's own bookkeeping, and
 * is persisted as `<root>/sandboxes/<id>/record.json` after every step, so a
 * restarted agent knows how far each create got.
 *
 * Writes of one record are serialised (the last state always lands last),
 * and operations that change a sandbox take its lock, so two creates of the
 * same id, or a destroy racing a create, run one after the other.
 */
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import type { NodeContext, ProcessTraits, SandboxCgroups, SandboxContext } from '../hooks.js';
import { LABEL_FLEET, type KeptMark, type SandboxClaim, type SandboxInfo, type SandboxSpec, type SandboxStatus } from '../live.js';
import { readJson, writeJsonAtomic } from './files.js';

/** What record.json holds: the SandboxContext minus `node`, plus the agent's notes. */
export interface SandboxRecord {
  readonly spec: SandboxSpec;
  readonly dir: string;
  readonly status: SandboxStatus;
  readonly lowerDirs: string[];
  readonly storage: Record<string, unknown>;
  readonly backend: Record<string, unknown>;
  /** Absent in records written before density plugins existed. */
  readonly density?: Record<string, unknown>;
  readonly traits?: ProcessTraits;
  readonly cgroups?: SandboxCgroups;
  readonly createdAt: string;
  readonly error?: string;
  readonly lastActivityAt?: string;
  readonly pausedAt?: string;
  readonly claim?: SandboxClaim;
  readonly kept?: KeptMark;
  /** A release is destroying it: a restarted agent finishes the job. */
  readonly recycling?: boolean;
}

/** How often a sandbox's activity clock is written to disk at most (persistActivity). */
export const ACTIVITY_PERSIST_MS = 5_000;

export interface SandboxEntry {
  /** Mutable on purpose: hooks update status, lowerDirs, storage, backend in place. */
  ctx: SandboxContext & { spec: SandboxSpec };
  error?: string;
  /** The last exec or file call: the idle reaper's clock. */
  lastActivityAt?: string;
  /** When it was paused, while it is. */
  pausedAt?: string;
  claim?: SandboxClaim;
  /** Released with `keep`: used, so never handed out by acquire again. */
  kept?: KeptMark;
  /** Being recycled (destroyed after a release); persisted so a crash mid-way finishes it on restart. */
  recycling?: boolean;
  /** Exec (and file) calls running in it now; in memory only. A pause waits for none. */
  calls?: number;
  /** A pause is under way: a call arriving now waits for it and then resumes the sandbox. */
  pausing?: boolean;
  /** Set once the sandbox's folder is gone: later writes are skipped. */
  removed?: boolean;
  writing?: Promise<void>;
  /** When a write last carried lastActivityAt, and the trailing write due (persistActivity); in memory only. */
  activityPersistedAt?: number;
  activityTimer?: NodeJS.Timeout;
}

export const RECORD_FILE = 'record.json';

export class SandboxStore {
  readonly dir: string;
  private readonly entries = new Map<string, SandboxEntry>();
  private readonly locks = new Map<string, Promise<unknown>>();
  /** The entries of each fleet (by the fleet label), so a pool's work looks at its own sandboxes, not the node's. */
  private readonly fleets = new Map<string, Set<SandboxEntry>>();

  constructor(root: string, private readonly node: NodeContext) {
    this.dir = path.join(root, 'sandboxes');
  }

  sandboxDir(id: string): string {
    return path.join(this.dir, id);
  }

  get(id: string): SandboxEntry | undefined {
    return this.entries.get(id);
  }

  all(): SandboxEntry[] {
    return [...this.entries.values()];
  }

  get size(): number {
    return this.entries.size;
  }

  add(entry: SandboxEntry): void {
    const id = entry.ctx.spec.id;
    const previous = this.entries.get(id);
    if (previous && previous !== entry) this.unindex(previous);
    this.entries.set(id, entry);
    const fleet = entry.ctx.spec.labels[LABEL_FLEET];
    if (fleet === undefined) return;
    let members = this.fleets.get(fleet);
    if (!members) this.fleets.set(fleet, (members = new Set()));
    members.add(entry);
  }

  delete(id: string): void {
    const entry = this.entries.get(id);
    if (entry) {
      entry.removed = true;
      clearTimeout(entry.activityTimer);
      entry.activityTimer = undefined;
      this.unindex(entry);
    }
    this.entries.delete(id);
  }

  /** The entries labelled with this fleet (every project's: callers check the lineage). */
  ofFleet(fleet: string): readonly SandboxEntry[] {
    return [...(this.fleets.get(fleet) ?? [])];
  }

  private unindex(entry: SandboxEntry): void {
    const fleet = entry.ctx.spec.labels[LABEL_FLEET];
    if (fleet === undefined) return;
    const members = this.fleets.get(fleet);
    members?.delete(entry);
    if (members?.size === 0) this.fleets.delete(fleet);
  }

  /** A fresh context for a new sandbox. */
  newEntry(spec: SandboxSpec): SandboxEntry {
    return {
      ctx: {
        spec,
        node: this.node,
        dir: this.sandboxDir(spec.id),
        status: 'creating',
        lowerDirs: [],
        density: {},
        traits: {},
        storage: {},
        backend: {},
        createdAt: new Date().toISOString(),
      },
    };
  }

  /** Run `work` once every earlier operation on this id has finished. */
  async withLock<T>(id: string, work: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(id) ?? Promise.resolve();
    const current = previous.catch(() => {}).then(work);
    const tail = current.catch(() => {});
    this.locks.set(id, tail);
    try {
      return await current;
    } finally {
      if (this.locks.get(id) === tail) this.locks.delete(id);
    }
  }

  isBusy(id: string): boolean {
    return this.locks.has(id);
  }

  /** Resolves once no operation holds a lock (for a clean shutdown), or after `timeoutMs`. */
  async drain(timeoutMs: number): Promise<void> {
    // Activity clocks waiting for their next write are written now: the agent is stopping.
    const clocks = this.all()
      .filter((entry) => entry.activityTimer)
      .map((entry) => {
        clearTimeout(entry.activityTimer);
        entry.activityTimer = undefined;
        return this.persist(entry).catch(() => undefined);
      });
    const pending = Promise.all([...this.locks.values(), ...clocks]);
    await Promise.race([pending, new Promise((resolve) => setTimeout(resolve, timeoutMs).unref())]);
  }

  /** Persist the entry's current state; writes of one record never overtake each other. */
  persist(entry: SandboxEntry): Promise<void> {
    const write = async () => {
      if (entry.removed) return;
      entry.activityPersistedAt = Date.now();
      await writeJsonAtomic(path.join(entry.ctx.dir, RECORD_FILE), toRecord(entry));
    };
    entry.writing = (entry.writing ?? Promise.resolve()).catch(() => {}).then(write);
    return entry.writing;
  }

  /**
   * Persist a new lastActivityAt, at most once per ACTIVITY_PERSIST_MS: the
   * reaper reads the clock in memory, and on disk it only has to survive an
   * agent restart roughly (an idle stop then comes at most that much early).
   * A write per exec was a third of the agent's CPU under load: a temp
   * file, two fsyncs and a rename, for a clock nobody reads from disk.
   */
  persistActivity(entry: SandboxEntry): void {
    if (entry.activityTimer || entry.removed) return;
    const dueIn = (entry.activityPersistedAt ?? 0) + ACTIVITY_PERSIST_MS - Date.now();
    const write = () => {
      entry.activityTimer = undefined;
      void this.persist(entry).catch((error: Error) => this.node.log.warn(`sandbox ${entry.ctx.spec.id}: ${error.message}`));
    };
    if (dueIn <= 0) write();
    else {
      entry.activityTimer = setTimeout(write, dueIn);
      entry.activityTimer.unref();
    }
  }

  /** Every record on disk, with the folders that hold none (a crash before the first write). */
  async readAll(): Promise<{ records: SandboxEntry[]; orphans: string[]; unreadable: { dir: string; error: string }[] }> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const records: SandboxEntry[] = [];
    const orphans: string[] = [];
    const unreadable: { dir: string; error: string }[] = [];
    for (const name of names) {
      const dir = this.sandboxDir(name);
      try {
        const record = await readJson<SandboxRecord>(path.join(dir, RECORD_FILE));
        records.push(fromRecord(record, this.node, dir));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') orphans.push(dir);
        else unreadable.push({ dir, error: (error as Error).message });
      }
    }
    return { records, orphans, unreadable };
  }
}

export function toRecord(entry: SandboxEntry): SandboxRecord {
  const { node: _node, ...rest } = entry.ctx;
  return {
    ...rest,
    ...(entry.error !== undefined ? { error: entry.error } : {}),
    ...(entry.lastActivityAt !== undefined ? { lastActivityAt: entry.lastActivityAt } : {}),
    ...(entry.pausedAt !== undefined ? { pausedAt: entry.pausedAt } : {}),
    ...(entry.claim !== undefined ? { claim: entry.claim } : {}),
    ...(entry.kept !== undefined ? { kept: entry.kept } : {}),
    ...(entry.recycling ? { recycling: true } : {}),
  };
}

function fromRecord(record: SandboxRecord, node: NodeContext, dir: string): SandboxEntry {
  return {
    ctx: {
      spec: record.spec,
      node,
      dir,
      status: record.status,
      lowerDirs: record.lowerDirs ?? [],
      storage: record.storage ?? {},
      backend: record.backend ?? {},
      density: record.density ?? {},
      traits: record.traits ?? {},
      ...(record.cgroups ? { cgroups: record.cgroups } : {}),
      createdAt: record.createdAt,
    },
    ...(record.error !== undefined ? { error: record.error } : {}),
    ...(record.lastActivityAt !== undefined ? { lastActivityAt: record.lastActivityAt } : {}),
    ...(record.pausedAt !== undefined ? { pausedAt: record.pausedAt } : {}),
    ...(record.claim !== undefined ? { claim: record.claim } : {}),
    ...(record.kept !== undefined ? { kept: record.kept } : {}),
    ...(record.recycling ? { recycling: true } : {}),
  };
}

export function toInfo(entry: SandboxEntry): SandboxInfo {
  const { ctx } = entry;
  const handle = ctx.backend.handle;
  return {
    id: ctx.spec.id,
    node: ctx.node.name,
    backend: ctx.spec.backend,
    status: ctx.status,
    labels: ctx.spec.labels,
    resources: ctx.spec.resources,
    layers: ctx.spec.layers,
    createdAt: ctx.createdAt,
    ...(entry.error !== undefined ? { error: entry.error } : {}),
    ...(typeof handle === 'string' ? { handle } : {}),
    ...(entry.lastActivityAt !== undefined ? { lastActivityAt: entry.lastActivityAt } : {}),
    ...(entry.pausedAt !== undefined && ctx.status === 'paused' ? { pausedAt: entry.pausedAt } : {}),
    ...(entry.claim !== undefined ? { claim: entry.claim } : {}),
    ...(entry.kept !== undefined ? { kept: entry.kept } : {}),
    ...(ctx.spec.ttl !== undefined ? { ttl: ctx.spec.ttl } : {}),
    ...(Object.keys(ctx.density).length > 0 ? { density: ctx.density } : {}),
  };
}
