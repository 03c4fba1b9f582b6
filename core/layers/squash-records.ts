/**
 * Records of squashed runs: `squashes/<key>.json`, keyed by the sha256 of
 * the run's ordered digest list, each naming the merged image's digest. At
 * resolve, a sandbox's stack of digests is scanned left to right and the
 * longest recorded run starting at each position replaces its layers by one
 * mount. A run squashed from the base (`bottom`) had its whiteouts applied
 * and dropped, so it only stands for the bottom of a stack.
 */
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type { SquashRecord } from '../live.js';
import { isErrno, isTempName, writeFileAtomic } from './fsutil.js';

/** One lower dir to mount: a layer, or a squash standing for several. */
export interface PlannedMount {
  readonly digest: string;
  /** The layers it stands for, bottom to top (one, unless squashed). */
  readonly layers: ReadonlyArray<{ readonly ref: string; readonly digest: string }>;
}

export function squashKey(digests: readonly string[]): string {
  return createHash('sha256').update(JSON.stringify(digests)).digest('hex');
}

export class SquashRecords {
  constructor(readonly dir: string) {}

  private path(digests: readonly string[]): string {
    return join(this.dir, `${squashKey(digests)}.json`);
  }

  async read(digests: readonly string[]): Promise<SquashRecord | undefined> {
    try {
      return JSON.parse(await fs.readFile(this.path(digests), 'utf8')) as SquashRecord;
    } catch (error) {
      if (isErrno(error, 'ENOENT')) return undefined;
      throw error;
    }
  }

  async write(record: SquashRecord): Promise<void> {
    await fs.mkdir(this.dir, { recursive: true });
    await writeFileAtomic(this.path(record.layers.map((layer) => layer.digest)), JSON.stringify(record, null, 2) + '\n');
  }

  async remove(record: SquashRecord): Promise<void> {
    await fs.rm(this.path(record.layers.map((layer) => layer.digest)), { force: true });
  }

  /** Every readable record. */
  async all(): Promise<SquashRecord[]> {
    const records: SquashRecord[] = [];
    for (const name of await fs.readdir(this.dir).catch(() => [] as string[])) {
      if (!name.endsWith('.json') || isTempName(name)) continue;
      try {
        records.push(JSON.parse(await fs.readFile(join(this.dir, name), 'utf8')) as SquashRecord);
      } catch {
        // A damaged record only costs the squash: the layers are mounted one by one.
      }
    }
    return records;
  }

  /**
   * The mounts for a stack of layers: each recorded run (longest first at
   * each position) whose merged image `usable` says is there replaces its
   * layers.
   */
  async plan(layers: ReadonlyArray<{ ref: string; digest: string }>, usable: (digest: string) => Promise<boolean>): Promise<PlannedMount[]> {
    const records = layers.length > 1 ? await this.all() : [];
    const planned: PlannedMount[] = [];
    for (let at = 0; at < layers.length; ) {
      const candidates = records
        .filter((record) => record.layers.length > 1 && at + record.layers.length <= layers.length && (!record.bottom || at === 0))
        .filter((record) => record.layers.every((layer, index) => layer.digest === layers[at + index].digest))
        .sort((a, b) => b.layers.length - a.layers.length);
      let chosen: SquashRecord | undefined;
      for (const candidate of candidates) {
        if (await usable(candidate.digest)) {
          chosen = candidate;
          break;
        }
      }
      const length = chosen?.layers.length ?? 1;
      planned.push({ digest: chosen?.digest ?? layers[at].digest, layers: layers.slice(at, at + length) });
      at += length;
    }
    return planned;
  }
}
