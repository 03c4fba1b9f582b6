/**
 * What a storage plugin does with a layer model: compute the digest it would
 * be published with (reusing a cached one while the source is unchanged), and
 * publish it (build the tree in staging, name it, let the store commit it).
 */
import { promises as fs } from 'node:fs';
import { DsecError } from '../errors.js';
import type { LayerRecord } from '../live.js';
import type { LayerModel } from '../model.js';
import { signFile, signTree, type SourceSignature } from './digest-cache.js';
import { LISTING_VERSION, digestEntries, digestTree, walkTree } from './digest.js';
import { BUSYBOX_ROOTFS_VERSION } from './sources/busybox.js';
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

function cacheKey(layer: LayerModel): string {
  const recipe = layer.source.type === 'busybox' ? `|${BUSYBOX_ROOTFS_VERSION}` : '';
  return `${LISTING_VERSION}|recipe ${SOURCE_RECIPE_VERSION}|${layer.source.type}|${layer.source.path}${recipe}`;
}

/** The digest the layer would be published with, reusing a cached one while the source's stat signature is unchanged. */
export async function digestLayer(store: LayerStore, layer: LayerModel): Promise<string> {
  checkStorable(layer);
  if (layer.source.type === 'dir') {
    // A directory is digested in place: one walk gives both the signature and the entries.
    const entries = await walkTree(layer.source.path, layer.ref);
    const rootStat = await fs.stat(layer.source.path, { bigint: true });
    const signature = signTree(cacheKey(layer), rootStat, entries);
    return cached(store, signature, async () => (await digestEntries(layer.source.path, entries, layer.ref)).digest);
  }
  const signature = await signFile(cacheKey(layer), layer.source.path);
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
