/**
 * density-placement: where the cluster provider puts a new sandbox.
 *
 *   place  (STAGE.DENSITY) among the healthy nodes that offer the backend and
 *          carry the fleet's nodeSelector labels: `spread` takes the least
 *          loaded of k sampled nodes (power of k choices), `pack` the most
 *          loaded one the sandbox still fits on. Answers nothing when no
 *          node qualifies (the provider then fails with the reason).
 *
 * The nodes' `requested` figures lag behind a burst (an agent reports every
 * few seconds), so the plugin keeps what it placed on each node itself, keyed
 * by the `nodes` array the provider hands it (one array per apply, a new one
 * on retries: see the hook's comment). Without that overlay every sandbox of
 * a burst would see the same loads and herd onto the same few nodes.
 *
 * A plugin of the engine's process (the CLI, an SDK program): node agents load
 * it too, and it does nothing there. The node's `admit` keeps the last word.
 */
import { STAGE, type DsecPlugin, type NodeInfo } from '../../core/plugin-api.js';
import { parseOptions, PLUGIN_NAME, type DensityPlacementOptions } from './options.js';
import { placeOne, type PlacementOverlay } from './place.js';

export { PLUGIN_NAME, DEFAULT_K, type DensityPlacementOptions } from './options.js';
export { placeOne, candidatesFor, loadWith, recordPlacement, type PlacementOverlay, type PlacedLoad, type RandomSource } from './place.js';

export default function densityPlacement(options?: DensityPlacementOptions): DsecPlugin {
  const { enabled, k } = parseOptions(options);
  return {
    name: PLUGIN_NAME,
    apply(dsec) {
      if (!enabled) return;
      const overlays = new WeakMap<readonly NodeInfo[], PlacementOverlay>();
      dsec.hooks.place.tapPromise({ name: PLUGIN_NAME, stage: STAGE.DENSITY }, async (spec, nodes) => {
        let overlay = overlays.get(nodes);
        if (!overlay) overlays.set(nodes, (overlay = new Map()));
        return placeOne(spec, nodes, overlay, k);
      });
    },
  };
}
