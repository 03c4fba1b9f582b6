/**
 * storage-local: the node's content-addressed layer store, on local disk.
 *
 * Layers are immutable trees under `<node root>/storage-local/layers/<hex>/`,
 * named by the sha256 of their canonical listing (digest.ts) and made visible
 * by `refs/<name>@<version>.json`. Publishing the same name@version twice with
 * the same content is a no-op; with other content it is refused. A sandbox
 * gets the trees as read-only lower dirs (the backend mounts the overlay)
 * and, while it exists, its layers cannot be unpublished.
 *
 * This file only tells the story; store.ts keeps the files, sources.ts,
 * archive.ts and busybox.ts make trees, digest.ts names them.
 */
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import {
  DsecError,
  STAGE,
  type DsecPlugin,
  type LayerModel,
  type LayerRecord,
  type NodeContext,
  type SandboxContext,
} from '../../core/plugin-api.js';
import { BUSYBOX_ROOTFS_VERSION } from './busybox.js';
import { signFile, signTree, type SourceSignature } from './digest-cache.js';
import { LISTING_VERSION, digestEntries, digestTree, walkTree } from './digest.js';
import { parseOptions, type StorageLocalOptions } from './options.js';
import { materialise } from './sources.js';
import { LayerStore, isSafeRefPart } from './store.js';

export const PLUGIN_NAME = 'storage-local';
export type { StorageLocalOptions } from './options.js';

/** What resolveLayers leaves in `sandbox.storage` (plain JSON, persisted by the agent). */
export interface StorageLocalRecord {
  readonly plugin: typeof PLUGIN_NAME;
  readonly store: string;
  readonly layers: ReadonlyArray<{ readonly ref: string; readonly digest: string; readonly path: string }>;
}

/** Names and versions become file names in the store. */
function checkStorable(layer: LayerModel): void {
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

function cacheKey(layer: LayerModel): string {
  const recipe = layer.source.type === 'busybox' ? `|${BUSYBOX_ROOTFS_VERSION}` : '';
  return `${LISTING_VERSION}|${layer.source.type}|${layer.source.path}${recipe}`;
}

/** The digest the layer would be published with, reusing a cached one while the source's stat signature is unchanged. */
async function digestLayer(store: LayerStore, layer: LayerModel): Promise<string> {
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
async function publishLayer(store: LayerStore, layer: LayerModel, node: NodeContext): Promise<LayerRecord> {
  checkStorable(layer);
  const staging = await store.stage();
  try {
    await materialise(layer, staging.tree);
    const tree = await digestTree(staging.tree, layer.ref);
    const record = await store.commit(layer, tree, staging.tree);
    node.log.info(`${PLUGIN_NAME}: ${layer.ref} is ${record.digest} (${record.files} entries, ${record.sizeBytes} bytes)`);
    return record;
  } finally {
    await staging.remove();
  }
}

/** Hand the backend the layer trees, bottom to top, and remember that the sandbox uses them. */
async function resolveLayers(store: LayerStore, sandbox: SandboxContext): Promise<void> {
  const resolved = await store.resolve(sandbox.spec.id, sandbox.spec.layers);
  sandbox.lowerDirs = resolved.map((layer) => layer.path);
  const record: StorageLocalRecord = {
    plugin: PLUGIN_NAME,
    store: store.dir,
    layers: resolved.map((layer) => ({ ...layer })),
  };
  sandbox.storage = { ...record };
}

/** The storage-local plugin. `options.root` moves the store (default `<node root>/storage-local`). */
export default function storageLocal(options?: StorageLocalOptions): DsecPlugin {
  const { root } = parseOptions(options);
  const stores = new Map<string, LayerStore>();
  const storeFor = (node: NodeContext): LayerStore => {
    const dir = root ?? join(node.root, PLUGIN_NAME);
    let store = stores.get(dir);
    if (!store) stores.set(dir, (store = new LayerStore(dir, node.log)));
    return store;
  };

  return {
    name: PLUGIN_NAME,
    apply(dsec) {
      const tap = { name: PLUGIN_NAME, stage: STAGE.STORAGE };
      dsec.hooks.digestLayer.tapPromise(tap, ({ layer, node }) => digestLayer(storeFor(node), layer));
      dsec.hooks.publishLayer.tapPromise(tap, ({ layer, node }) => publishLayer(storeFor(node), layer, node));
      dsec.hooks.listLayers.tapPromise(tap, (node) => storeFor(node).list());
      dsec.hooks.unpublishLayer.tapPromise(tap, async (node, name, version) => {
        await storeFor(node).remove(name, version);
        return true as const;
      });
      dsec.hooks.resolveLayers.tapPromise(tap, (sandbox) => resolveLayers(storeFor(sandbox.node), sandbox));
      // After the backend stopped the sandbox's processes, the layers are free again.
      dsec.hooks.destroy.tapPromise({ name: PLUGIN_NAME, stage: STAGE.CLEANUP }, (sandbox) =>
        storeFor(sandbox.node).release(sandbox.spec.id),
      );
    },
  };
}
