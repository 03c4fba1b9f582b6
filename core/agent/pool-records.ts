/**
 * The pool records on a node's disk (`<root>/pools/<lineage>.<fleet>.json`):
 * the only part of a pool that is persisted. Counts are read from the
 * sandboxes themselves, so a restarted agent needs nothing more.
 */
import { mkdir, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../hooks.js';
import type { PoolSpec } from '../live.js';
import { readJson, writeJsonAtomic } from './files.js';

export class PoolRecords {
  constructor(
    private readonly dir: string,
    private readonly log: Logger,
  ) {}

  /** The records a previous agent kept; an unreadable one is logged and skipped. */
  async load(): Promise<PoolSpec[]> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const specs: PoolSpec[] = [];
    for (const name of names.filter((file) => file.endsWith('.json'))) {
      try {
        specs.push(await readJson<PoolSpec>(path.join(this.dir, name)));
      } catch (error) {
        this.log.warn(`ignoring the pool record ${name}: ${(error as Error).message}`);
      }
    }
    return specs;
  }

  write(spec: PoolSpec): Promise<void> {
    return writeJsonAtomic(this.file(spec.lineage, spec.fleet), spec);
  }

  remove(lineage: string, fleet: string): Promise<void> {
    return rm(this.file(lineage, fleet), { force: true });
  }

  private file(lineage: string, fleet: string): string {
    return path.join(this.dir, `${encodeURIComponent(lineage)}.${fleet}.json`);
  }
}
