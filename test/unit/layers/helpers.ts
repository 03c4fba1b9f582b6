/**
 * Test helpers for storage-local: a temp workspace with a node context and a
 * Dsec carrying the plugin, layer models, and a hand-written tar encoder
 * (node-tar's own writer refuses to produce the hostile archives the tests need).
 */
import { promises as fs } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { Dsec } from '../../../core/dsec.js';
import type { LayerModel, LayerRecord, LayerSource, NodeContext } from '../../../core/plugin-api.js';
import storageLocal, { type StorageLocalOptions } from '../../../plugins/storage-local/index.js';
import { nodeContext } from '../../helpers/contexts.js';
import { sweepMounts } from '../../helpers/mounts.js';

export interface Workspace {
  readonly root: string;
  readonly node: NodeContext;
  readonly dsec: Dsec;
  /** `<node root>/storage-local` */
  readonly store: string;
  digest(layer: LayerModel): Promise<string>;
  publish(layer: LayerModel): Promise<LayerRecord>;
  list(): Promise<LayerRecord[]>;
  /** Entries of a store subfolder (layers, refs, staging, inuse), sorted; [] when absent. */
  storeEntries(folder: string): Promise<string[]>;
  /** Unmounts and detaches whatever is left under the workspace, then removes it. */
  cleanup(): Promise<void>;
}

/**
 * A temp workspace with storage-local applied. The format defaults to
 * `tree`: most tests here are about sources and digests, and read the
 * published trees directly; the EROFS tests ask for `erofs`.
 */
export async function makeWorkspace(options: StorageLocalOptions = { format: 'tree' }): Promise<Workspace> {
  const root = await fs.mkdtemp(join(tmpdir(), 'dsec-storage-local-'));
  const node = nodeContext('test-node', join(root, 'node'));
  await fs.mkdir(node.root);
  const dsec = new Dsec().use(storageLocal(options));
  const store = join(node.root, 'storage-local');
  return {
    root,
    node,
    dsec,
    store,
    digest: (layer) => dsec.hooks.digestLayer.promise({ layer, node }) as Promise<string>,
    publish: (layer) => dsec.hooks.publishLayer.promise({ layer, node }) as Promise<LayerRecord>,
    list: () => dsec.hooks.listLayers.promise(node) as Promise<LayerRecord[]>,
    storeEntries: async (folder) => (await fs.readdir(join(store, folder)).catch(() => [])).sort(),
    cleanup: async () => {
      sweepMounts(root);
      await fs.rm(root, { recursive: true, force: true });
    },
  };
}

export function layerModel(ref: string, source: LayerSource, kind: LayerModel['kind'] = 'base'): LayerModel {
  const [name, version] = ref.split('@');
  return { ref, name, version, kind, source };
}

/** Write `files` under `dir` (parents created); returns `dir`. */
export async function writeTree(dir: string, files: Record<string, string>): Promise<string> {
  for (const [path, content] of Object.entries(files)) {
    await fs.mkdir(join(dir, path, '..'), { recursive: true });
    await fs.writeFile(join(dir, path), content);
  }
  return dir;
}

/** Resolves to the error a promise rejects with; throws if it resolves. */
export async function rejectionOf(promise: Promise<unknown>): Promise<Error & { code?: string; params?: Record<string, unknown> }> {
  try {
    await promise;
  } catch (error) {
    return error as Error & { code?: string; params?: Record<string, unknown> };
  }
  throw new Error('expected the operation to fail, but it succeeded');
}

export interface TarEntry {
  readonly path: string;
  /** ustar typeflag: 0 file, 1 hard link, 2 symlink, 3 char device, 4 block device, 5 dir, 6 FIFO. @default '0' */
  readonly type?: '0' | '1' | '2' | '3' | '4' | '5' | '6' | 'S';
  readonly mode?: number;
  readonly uid?: number;
  readonly gid?: number;
  readonly linkpath?: string;
  readonly content?: string;
  /** Seconds since the epoch. @default 1700000000 */
  readonly mtime?: number;
  /** Device numbers of a device node. @default 0 */
  readonly devmajor?: number;
  readonly devminor?: number;
}

function field(header: Buffer, offset: number, length: number, value: string): void {
  header.write(value, offset, Math.min(length, Buffer.byteLength(value)), 'utf8');
}

function octalField(header: Buffer, offset: number, length: number, value: number): void {
  field(header, offset, length, value.toString(8).padStart(length - 1, '0') + '\0');
}

/** A ustar archive, written header by header, with nothing sanitised. */
export function tarArchive(entries: readonly TarEntry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const entry of entries) {
    const type = entry.type ?? '0';
    const content = Buffer.from(type === '0' ? (entry.content ?? '') : '');
    const header = Buffer.alloc(512);
    field(header, 0, 100, entry.path);
    octalField(header, 100, 8, entry.mode ?? (type === '5' ? 0o755 : 0o644));
    octalField(header, 108, 8, entry.uid ?? 0);
    octalField(header, 116, 8, entry.gid ?? 0);
    octalField(header, 124, 12, content.length);
    octalField(header, 136, 12, entry.mtime ?? 1_700_000_000);
    field(header, 148, 8, '        ');
    field(header, 156, 1, type);
    field(header, 157, 100, entry.linkpath ?? '');
    field(header, 257, 6, 'ustar\0');
    field(header, 263, 2, '00');
    field(header, 265, 32, 'root');
    field(header, 297, 32, 'root');
    octalField(header, 329, 8, entry.devmajor ?? 0);
    octalField(header, 337, 8, entry.devminor ?? 0);
    let sum = 0;
    for (const byte of header) sum += byte;
    field(header, 148, 8, sum.toString(8).padStart(6, '0') + '\0 ');
    blocks.push(header, content, Buffer.alloc((512 - (content.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

export function tarGz(entries: readonly TarEntry[]): Buffer {
  return gzipSync(tarArchive(entries));
}
