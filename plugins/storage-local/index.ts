/**
 * storage-local: the node's content-addressed layer store, on local disk.
 *
 * The store itself (digests, sources, EROFS images, mounts, the in-use
 * registry, squashes) is the public `LayerStore` of the plugin API; this
 * plugin only says where it lives and in which format, and taps the storage
 * hooks with it.
 */
import { join } from 'node:path';
import { LayerStore, tapLayerStore, type DsecPlugin, type LayerStoreRecord, type NodeContext } from '../../core/plugin-api.js';
import { parseOptions, type StorageLocalOptions } from './options.js';

export const PLUGIN_NAME = 'storage-local';
export type { StorageLocalOptions } from './options.js';

/** What resolveLayers leaves in `sandbox.storage` (plain JSON, persisted by the agent). */
export type StorageLocalRecord = LayerStoreRecord;

/**
 * The storage-local plugin. `options.root` moves the store (default
 * `<node root>/storage-local`); `options.format` forces a format (default
 * `auto`: EROFS images where they mount, else directory trees).
 */
export default function storageLocal(options?: StorageLocalOptions): DsecPlugin {
  const { root, format = 'auto', compression } = parseOptions(options);
  const stores = new Map<string, LayerStore>();
  const storeFor = (node: NodeContext): LayerStore => {
    const dir = root ?? join(node.root, PLUGIN_NAME);
    let store = stores.get(dir);
    if (!store) stores.set(dir, (store = new LayerStore({ dir, log: node.log, name: PLUGIN_NAME, node: node.name, format, compression })));
    return store;
  };
  return {
    name: PLUGIN_NAME,
    apply(dsec) {
      tapLayerStore(dsec, PLUGIN_NAME, storeFor);
    },
  };
}
