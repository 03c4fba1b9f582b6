/**
 * The in-use registry: one small file per sandbox that resolved layers,
 * `inuse/<sandbox id>.json`, naming its layers and the images mounted for it
 * on its node. It is the single source of truth for two questions: may this
 * layer be removed (no record names it, on any node sharing the store), and
 * may this node unmount that image (no record of this node mounts it). Being
 * on disk, it survives agent restarts; mounts are reference-counted by it.
 *
 * The second question is asked at every sandbox's release, so this node's
 * records are also kept in memory once read (only this node's agent writes
 * them: one agent per node holds the store's lock): a release then costs
 * O(its layers), not a read of every record on the node. Other nodes'
 * records (a shared store) are always read from disk.
 */
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { DsecError } from '../errors.js';
import type { Logger } from '../hooks.js';
import { isErrno, isTempName, writeFileAtomic } from './fsutil.js';

export interface InUseRecord {
  readonly sandbox: string;
  /** The node the sandbox runs on; absent in records written before stores could be shared (this node's). */
  readonly node?: string;
  readonly layers: ReadonlyArray<{ readonly ref: string; readonly digest: string }>;
  /** The digests mounted for it, bottom to top: its layers', or a squash's in place of a run. */
  readonly mounts?: readonly string[];
  readonly since: string;
}

/** Sandbox ids as SandboxSpec defines them. */
const SAFE_SANDBOX_ID = /^[a-z0-9-]{1,63}$/;

export class InUseRegistry {
  /** This node's records by sandbox id, and how many of them mount each digest; loaded on first use. */
  private local?: { readonly node: string; readonly records: Map<string, InUseRecord>; readonly users: Map<string, number> };

  constructor(
    readonly dir: string,
    private readonly log: Logger,
    private readonly name: string,
  ) {}

  static isValidId(sandboxId: string): boolean {
    return SAFE_SANDBOX_ID.test(sandboxId);
  }

  private path(sandboxId: string): string {
    if (!InUseRegistry.isValidId(sandboxId)) {
      throw new DsecError('DSEC_USAGE', {
        message: `${this.name}: sandbox id ${JSON.stringify(sandboxId)} is not valid ([a-z0-9-], at most 63 characters)`,
      });
    }
    return join(this.dir, `${sandboxId}.json`);
  }

  async write(record: InUseRecord): Promise<void> {
    await writeFileAtomic(this.path(record.sandbox), JSON.stringify(record, null, 2) + '\n');
    if (this.local && (record.node ?? this.local.node) === this.local.node) {
      this.forget(record.sandbox);
      this.local.records.set(record.sandbox, record);
      for (const digest of mountedDigests(record)) this.local.users.set(digest, (this.local.users.get(digest) ?? 0) + 1);
    }
  }

  /** Forget a sandbox. Idempotent; an id `write` would refuse never has a record. */
  async remove(sandboxId: string): Promise<void> {
    if (!InUseRegistry.isValidId(sandboxId)) return;
    await fs.rm(this.path(sandboxId), { force: true });
    this.forget(sandboxId);
  }

  private forget(sandboxId: string): void {
    const known = this.local?.records.get(sandboxId);
    if (!this.local || !known) return;
    this.local.records.delete(sandboxId);
    for (const digest of mountedDigests(known)) {
      const left = (this.local.users.get(digest) ?? 0) - 1;
      if (left > 0) this.local.users.set(digest, left);
      else this.local.users.delete(digest);
    }
  }

  /** Every record; unreadable ones are reported in the log and skipped. */
  async all(): Promise<InUseRecord[]> {
    const records: InUseRecord[] = [];
    for (const name of await fs.readdir(this.dir).catch(() => [] as string[])) {
      if (!name.endsWith('.json') || isTempName(name)) continue;
      try {
        records.push(JSON.parse(await fs.readFile(join(this.dir, name), 'utf8')) as InUseRecord);
      } catch (error) {
        if (!isErrno(error, 'ENOENT')) this.log.warn(`${this.name}: skipping in-use record ${name}: ${(error as Error).message}`);
      }
    }
    return records;
  }

  /** How many of `node`'s sandboxes mount each digest (a copy). */
  async mountsOf(node: string): Promise<Map<string, number>> {
    if (this.local?.node !== node) {
      const records = new Map<string, InUseRecord>();
      const users = new Map<string, number>();
      for (const record of await this.all()) {
        if ((record.node ?? node) !== node) continue;
        records.set(record.sandbox, record);
        for (const digest of mountedDigests(record)) users.set(digest, (users.get(digest) ?? 0) + 1);
      }
      this.local = { node, records, users };
    }
    return new Map(this.local.users);
  }
}

function mountedDigests(record: InUseRecord): Set<string> {
  return new Set(record.mounts ?? record.layers.map((layer) => layer.digest));
}
