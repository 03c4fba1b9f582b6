/**
 * storage-3fs: the layer store on a 3FS FUSE mount shared by every node.
 *
 * Following 3FS's strengths: images are split EROFS images, the small
 * metadata image copied to node-local disk (every lookup local) and the data
 * blob read on demand, in large requests, from the mount through a
 * read-only loop device; every write (sandbox upper dirs, the metadata
 * copies, the optional blob cache) stays on the node's disk. Which layers
 * exist (refs) and which sandboxes use them (the in-use registry) live on the
 * mount, so a layer one node uses is never removed by another.
 *
 * A path that is not a 3FS mount (tests, the examples, a laptop) is used as
 * an ordinary directory by exactly the same code, and the log says so. Like
 * storage-local it is only options and taps over the public LayerStore.
 */
import { join } from 'node:path';
import { LayerStore, tapLayerStore, type DsecPlugin, type NodeContext } from '../../core/plugin-api.js';
import { describeFinding, findMount } from './detect.js';
import { DEFAULT_CACHE_MAX_BYTES, parseOptions, type Storage3fsOptions } from './options.js';

export const PLUGIN_NAME = 'storage-3fs';
export type { Storage3fsOptions } from './options.js';
export { THREEFS_FSTYPES, findMount } from './detect.js';

export default function storage3fs(options?: Storage3fsOptions): DsecPlugin {
  const { mount, cache, format = 'auto' } = parseOptions(options);
  const stores = new Map<string, LayerStore>();
  const storeFor = (node: NodeContext): LayerStore => {
    const local = join(node.root, PLUGIN_NAME);
    let store = stores.get(local);
    if (!store) {
      store = new LayerStore({
        dir: mount,
        localDir: local,
        log: node.log,
        name: PLUGIN_NAME,
        node: node.name,
        format,
        split: true,
        cache: cache ? { dir: cache.dir ?? join(local, 'cache'), maxBytes: cache.maxBytes ?? DEFAULT_CACHE_MAX_BYTES } : undefined,
        backing: async () => describeFinding(mount, await findMount(mount)),
      });
      stores.set(local, store);
    }
    return store;
  };
  return {
    name: PLUGIN_NAME,
    apply(dsec) {
      tapLayerStore(dsec, PLUGIN_NAME, storeFor);
    },
  };
}
