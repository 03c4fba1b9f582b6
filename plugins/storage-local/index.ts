/**
 * storage-local: the node's content-addressed layer store, on local disk.
 *
 * The store itself (digests, sources, publication, the in-use registry) is
 * the public `LayerStore` of the plugin API; this plugin only says where it
 * lives and taps the storage hooks with it.
 */
import { join } from 'node:path';
import {
  LayerStore,
  STAGE,
  digestLayer,
  publishLayer,
  type DsecPlugin,
  type NodeContext,
  type SandboxContext,
} from '../../core/plugin-api.js';
import { parseOptions, type StorageLocalOptions } from './options.js';

export const PLUGIN_NAME = 'storage-local';
export type { StorageLocalOptions } from './options.js';

/** What resolveLayers leaves in `sandbox.storage` (plain JSON, persisted by the agent). */
export interface StorageLocalRecord {
  readonly plugin: typeof PLUGIN_NAME;
  readonly store: string;
  readonly layers: ReadonlyArray<{ readonly ref: string; readonly digest: string; readonly path: string }>;
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
    if (!store) stores.set(dir, (store = new LayerStore(dir, node.log, PLUGIN_NAME)));
    return store;
  };

  return {
    name: PLUGIN_NAME,
    apply(dsec) {
      const tap = { name: PLUGIN_NAME, stage: STAGE.STORAGE };
      dsec.hooks.digestLayer.tapPromise(tap, ({ layer, node }) => digestLayer(storeFor(node), layer));
      dsec.hooks.publishLayer.tapPromise(tap, ({ layer, node }) => publishLayer(storeFor(node), layer));
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
