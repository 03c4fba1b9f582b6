/**
 * What a storage plugin does with a layer model: compute the digest it would
 * be published with (reusing a cached one while the source is unchanged), and
 * publish it (build the tree in staging, name it, let the store commit it).
 */
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { DsecError } from '../errors.js';
import type { LayerRecord } from '../live.js';
import type { LayerModel } from '../model.js';
import { signFile, signTree, type SourceSignature } from './digest-cache.js';
import { LISTING_VERSION, digestEntries, digestTree, walkTree } from './digest.js';
import { BUSYBOX_ROOTFS_VERSION } from './sources/busybox.js';
import { OCI_READER_VERSION } from './sources/oci.js';
import { materialise } from './sources/index.js';
import { isSafeRefPart, type LayerStore } from './store.js';

/** Names and versions become file names in the store. */
export function checkStorable(layer: LayerModel): void {
  for (const [what, value] of [
    ['name', layer.name],
    ['version', layer.version],
  ] as const) {
    if (!isSafeRefPart(value)) {
      throw new DsecError('DSEC_LAYER_SOURCE', {
        ref: layer.ref,
        message: `${what} ${JSON.stringify(value)} cannot be stored: use letters, digits, '.', '_', '+' and '-', starting with a letter or digit (at most 128)`,
      });
    }
  }
}

/**
 * Bumped when what a source turns into changes while the listing format does
 * not (2: `.wh.` archive entries became whiteouts), so digests cached before
 * are not reused.
 */
const SOURCE_RECIPE_VERSION = 2;

/** The sources a store materialises itself: `build` and `published` layers are the node agent's. */
type StoredSource = Extract<LayerModel['source'], { readonly path: string }>;

function storedSource(layer: LayerModel): StoredSource {
  const source = layer.source;
  if (source.type === 'build' || source.type === 'published') {
    throw new DsecError('DSEC_LAYER_SOURCE', { ref: layer.ref, message: `a ${source.type} layer is made by the node agent, not by the store` });
  }
  return source;
}

function cacheKey(layer: LayerModel, source: StoredSource): string {
  const recipe =
    source.type === 'busybox' ? `|${BUSYBOX_ROOTFS_VERSION}` : source.type === 'oci' ? `|image ${source.image ?? ''}|${OCI_READER_VERSION}` : '';
  return `${LISTING_VERSION}|recipe ${SOURCE_RECIPE_VERSION}|${source.type}|${source.path}${recipe}`;
}

/**
 * The file whose stat signature stands for the source. An OCI layout
 * directory changes by its index.json (blobs are content-addressed and
 * verified when read), so that file is signed, not the directory.
 */
async function signedFile(source: StoredSource): Promise<string> {
  if (source.type !== 'oci') return source.path;
  const stat = await fs.stat(source.path).catch(() => undefined);
  return stat?.isDirectory() ? join(source.path, 'index.json') : source.path;
}

/** The digest the layer would be published with, reusing a cached one while the source's stat signature is unchanged. */
export async function digestLayer(store: LayerStore, layer: LayerModel): Promise<string> {
  checkStorable(layer);
  const source = storedSource(layer);
  if (source.type === 'dir') {
    // A directory is digested in place: one walk gives both the signature and the entries.
    const entries = await walkTree(source.path, layer.ref);
    const rootStat = await fs.stat(source.path, { bigint: true });
    const signature = signTree(cacheKey(layer, source), rootStat, entries);
    return cached(store, signature, async () => (await digestEntries(source.path, entries, layer.ref)).digest);
  }
  const signature = await signFile(cacheKey(layer, source), await signedFile(source));
  return cached(store, signature, async () => {
    const staging = await store.stage();
    try {
      await materialise(layer, staging.tree);
      return (await digestTree(staging.tree, layer.ref)).digest;
    } finally {
      await staging.remove();
    }
  });
}

async function cached(
  store: LayerStore,
  signature: SourceSignature | undefined,
  compute: () => Promise<string>,
): Promise<string> {
  const hit = signature && (await store.digests.get(signature));
  if (hit) return hit;
  const digest = await compute();
  if (signature) await store.digests.set(signature, digest);
  return digest;
}

/** Build the tree in staging, name it, and let the store publish it (or find it already there). */
export async function publishLayer(store: LayerStore, layer: LayerModel): Promise<LayerRecord> {
  checkStorable(layer);
  const staging = await store.stage();
  try {
    await materialise(layer, staging.tree);
    const tree = await digestTree(staging.tree, layer.ref);
    const record = await store.commit(layer, tree, staging.tree);
    store.log.info(`${store.name}: ${layer.ref} is ${record.digest} (${record.files} entries, ${record.sizeBytes} bytes)`);
    return record;
  } finally {
    await staging.remove();
  }
}
