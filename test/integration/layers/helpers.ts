/**
 * A LayerStore in a temp folder, driven directly (no plugin), with sandbox
 * contexts and a cleanup that unmounts and detaches whatever a failed test
 * left.
 */
import { promises as fs, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LayerStore, publishLayer, type LayerStoreOptions } from '../../../core/layers/index.js';
import type { LayerKind, LayerModel, LayerRecord, LayerRef, Logger } from '../../../core/plugin-api.js';
import { sweepMounts } from '../../helpers/mounts.js';
import { writeTree } from '../../unit/layers/helpers.js';

export interface StoreWorkspace {
  readonly root: string;
  readonly store: LayerStore;
  readonly logged: string[];
  /** Another store instance on the same folders (an agent after a restart). */
  reopen(options?: Partial<LayerStoreOptions>): LayerStore;
  publishDir(ref: string, files: Record<string, string>, kind?: LayerKind, prepare?: (dir: string) => Promise<void>): Promise<LayerRecord>;
  cleanup(): Promise<void>;
}

export async function makeStoreWorkspace(options: Partial<LayerStoreOptions> = {}): Promise<StoreWorkspace> {
  // realpath: mount points are reported resolved.
  const root = realpathSync(await fs.mkdtemp(join(tmpdir(), 'dsec-layers-')));
  const logged: string[] = [];
  const log: Logger = { info: (m) => logged.push(m), warn: (m) => logged.push(`warn: ${m}`), debug: () => {} };
  const make = (extra: Partial<LayerStoreOptions> = {}) =>
    new LayerStore({ dir: join(root, 'store'), log, name: 'test-store', node: 'test-node', format: 'erofs', ...options, ...extra });
  const store = make();
  let sources = 0;
  return {
    root,
    store,
    logged,
    reopen: make,
    async publishDir(ref, files, kind = 'base', prepare) {
      const dir = await writeTree(join(root, 'sources', String(++sources)), files);
      await prepare?.(dir);
      const [name, version] = ref.split('@');
      const layer: LayerModel = { ref, name, version, kind, source: { type: 'dir', path: dir } };
      return publishLayer(store, layer);
    },
    async cleanup() {
      sweepMounts(root);
      await fs.rm(root, { recursive: true, force: true });
    },
  };
}

export function refOf(record: LayerRecord): LayerRef {
  return { name: record.name, version: record.version, digest: record.digest };
}
