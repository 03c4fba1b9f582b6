/**
 * A state bigger than one etcd value. etcd refuses requests over
 * `--max-request-bytes` (1.5 MiB by default) and a state of 100,000
 * sandboxes is ~36 MB, so a big state is stored in chunks:
 *
 *   <stateKey>                          a manifest: generation, chunk count, bytes, sha256
 *   <stateKey>.chunks/<generation>/<i>  the text's i-th slice (1 MiB by default)
 *
 * The chunks of a new generation are written first, where no reader looks;
 * the manifest then flips to them in the same guarded transaction as a small
 * state, so readers see the old state or the new one, never a mix. A reader
 * fetches the chunks at the manifest's revision (an old generation deleted
 * meanwhile is still there at that revision) and checks the digest.
 * A small state stays one plain value (`etcdctl get` shows the JSON).
 */
import { createHash, randomUUID } from 'node:crypto';
import type { Etcd3, IKeyValue } from 'etcd3';

/** @default value of EtcdStateStoreOptions.maxValueBytes: well under etcd's 1.5 MiB request limit. */
export const DEFAULT_MAX_VALUE_BYTES = 1024 * 1024;

export interface ChunkManifest {
  readonly dsec_chunked_state: 1;
  readonly generation: string;
  readonly chunks: number;
  readonly bytes: number;
  readonly sha256: string;
}

export interface EncodedState {
  /** What goes under the state key: the text itself, or the manifest. */
  readonly value: string;
  /** The chunks to write before `value` (none for a small state). */
  readonly chunks: readonly Buffer[];
  readonly generation?: string;
}

export const chunksPrefix = (stateKey: string): string => `${stateKey}.chunks/`;
const chunkKey = (stateKey: string, generation: string, index: number): string =>
  `${chunksPrefix(stateKey)}${generation}/${String(index).padStart(6, '0')}`;
const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

export function encodeState(text: string, maxValueBytes: number): EncodedState {
  const data = Buffer.from(text, 'utf8');
  if (data.length <= maxValueBytes) return { value: text, chunks: [] };
  const chunks: Buffer[] = [];
  for (let offset = 0; offset < data.length; offset += maxValueBytes) {
    chunks.push(data.subarray(offset, offset + maxValueBytes));
  }
  const generation = randomUUID();
  const manifest: ChunkManifest = {
    dsec_chunked_state: 1,
    generation,
    chunks: chunks.length,
    bytes: data.length,
    sha256: sha256(data),
  };
  return { value: JSON.stringify(manifest), chunks, generation };
}

/** The manifest in a state key's value, when it is one (a state file never has this key). */
export function parseManifest(value: string): ChunkManifest | undefined {
  if (!value.startsWith('{"dsec_chunked_state":')) return undefined;
  try {
    const manifest = JSON.parse(value) as ChunkManifest;
    return manifest.dsec_chunked_state === 1 ? manifest : undefined;
  } catch {
    return undefined;
  }
}

/** Write a new generation's chunks (not visible until the manifest names them). */
export async function writeChunks(client: Etcd3, stateKey: string, encoded: EncodedState): Promise<void> {
  const { generation } = encoded;
  if (!generation) return;
  // One at a time: each is a request near etcd's size limit.
  for (const [index, chunk] of encoded.chunks.entries()) {
    await client.put(chunkKey(stateKey, generation, index)).value(chunk).exec();
  }
}

/** The state text behind the state key's `kv`: itself, or its chunks read at its revision. */
export async function readStateText(client: Etcd3, stateKey: string, kv: IKeyValue): Promise<string> {
  const value = kv.value.toString('utf8');
  const manifest = parseManifest(value);
  if (!manifest) return value;
  const parts: Buffer[] = [];
  // One at a time: a range of them all would pass gRPC's 4 MiB answer limit.
  for (let index = 0; index < manifest.chunks; index++) {
    const part = await client.get(chunkKey(stateKey, manifest.generation, index)).revision(kv.mod_revision).buffer();
    if (!part) throw new Error(`chunk ${index} of ${manifest.chunks} of generation ${manifest.generation} is missing`);
    parts.push(part);
  }
  const data = Buffer.concat(parts);
  if (data.length !== manifest.bytes || sha256(data) !== manifest.sha256) {
    throw new Error(`the chunks of generation ${manifest.generation} do not match their manifest (bytes or sha256)`);
  }
  return data.toString('utf8');
}

/** Delete every chunk generation but `keep` (a crashed writer's, or the one just replaced). */
export async function dropOtherGenerations(client: Etcd3, stateKey: string, keep?: string): Promise<void> {
  const prefix = chunksPrefix(stateKey);
  const keys = await client.getAll().prefix(prefix).keys();
  const generations = new Set(keys.map((key) => key.slice(prefix.length).split('/')[0]));
  for (const generation of generations) {
    if (generation !== keep) await client.delete().prefix(`${prefix}${generation}/`).exec();
  }
}
