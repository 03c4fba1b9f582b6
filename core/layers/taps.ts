/**
 * The storage hooks, tapped with a LayerStore: what every storage plugin
 * built on the store registers. Only lifecycle and store hooks, nothing else
 * of the engine: digestLayer, publishLayer, listLayers, unpublishLayer,
 * squashLayers and storageStats at STAGE.STORAGE, resolveLayers at
 * STAGE.STORAGE (before a backend starts), destroy at STAGE.CLEANUP (after
 * the backend stopped the sandbox's processes).
 */
import type { Dsec } from '../dsec.js';
import { STAGE, type NodeContext, type SandboxContext } from '../hooks.js';
import { digestLayer, publishLayer } from './publish.js';
import { squashLayers } from './squash.js';
import type { LayerStore, ResolvedLayer } from './store.js';

/** What resolveLayers leaves in `sandbox.storage` (plain JSON, persisted by the agent). */
export interface LayerStoreRecord {
  readonly plugin: string;
  readonly store: string;
  readonly layers: readonly ResolvedLayer[];
}

/** Register the storage taps of `plugin` over the store `storeFor` gives for a node. */
export function tapLayerStore(dsec: Dsec, plugin: string, storeFor: (node: NodeContext) => LayerStore): void {
  const tap = { name: plugin, stage: STAGE.STORAGE };
  dsec.hooks.digestLayer.tapPromise(tap, ({ layer, node }) => digestLayer(storeFor(node), layer));
  dsec.hooks.publishLayer.tapPromise(tap, ({ layer, node }) => publishLayer(storeFor(node), layer));
  dsec.hooks.listLayers.tapPromise(tap, (node) => storeFor(node).list());
  dsec.hooks.unpublishLayer.tapPromise(tap, async (node, name, version) => {
    await storeFor(node).remove(name, version);
    return true as const;
  });
  dsec.hooks.squashLayers.tapPromise(tap, (node, layers) => squashLayers(storeFor(node), layers));
  dsec.hooks.storageStats.tapPromise(tap, (node) => storeFor(node).stats());
  dsec.hooks.resolveLayers.tapPromise(tap, (sandbox) => resolveLayers(plugin, storeFor(sandbox.node), sandbox));
  dsec.hooks.destroy.tapPromise({ name: plugin, stage: STAGE.CLEANUP }, (sandbox) => storeFor(sandbox.node).release(sandbox.spec.id));
}

/** Hand the backend the lower dirs, bottom to top, and note what was resolved. */
async function resolveLayers(plugin: string, store: LayerStore, sandbox: SandboxContext): Promise<void> {
  const resolved = await store.resolve(sandbox.spec.id, sandbox.spec.layers);
  sandbox.lowerDirs = resolved.map((layer) => layer.path);
  // The same layers as images, for VM backends (undefined where a layer is a plain tree).
  if (resolved.some((layer) => layer.image)) sandbox.lowerImages = resolved.map((layer) => layer.image);
  const record: LayerStoreRecord = { plugin, store: store.dir, layers: resolved.map((layer) => ({ ...layer })) };
  sandbox.storage = { ...record };
}
