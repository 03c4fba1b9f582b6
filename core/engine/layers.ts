/**
 * The digest of every declared layer, computed by the provider (its storage
 * plugin reads the content) without publishing anything. The planner compares
 * them with the published layers to tell a new version from an unchanged one.
 * A build is digested after its parents, with their digests in hand: its
 * identity is made of them (a build nobody built yet gets a pending digest).
 */
import type { ConfigModel, LayerModel } from '../model.js';
import type { Provider } from '../provider.js';
import { parentRefs, withParents } from './build-layers.js';
import { createLimiter } from './limiter.js';

/** Digesting reads whole trees; a few at once keeps the disk busy without thrashing it. */
const DIGEST_CONCURRENCY = 4;

export async function digestDeclaredLayers(
  model: ConfigModel,
  provider: Pick<Provider, 'digestLayer'>,
): Promise<Record<string /* name@version */, string /* digest */>> {
  const limit = createLimiter(DIGEST_CONCURRENCY);
  const byName = new Map<string, LayerModel>(Object.values(model.layers).map((layer) => [layer.ref, layer]));
  const byRef: Record<string, string> = {};
  const pending = new Map<string, Promise<string>>();
  // Parents first; the config's checks (and the graph) rule out cycles, so this ends.
  const digestOf = (layer: LayerModel): Promise<string> => {
    let found = pending.get(layer.ref);
    if (!found) {
      found = (async () => {
        for (const parent of parentRefs(layer)) {
          const declared = byName.get(parent);
          if (declared) await digestOf(declared);
        }
        const digest = await limit(() => provider.digestLayer(withParents(model, layer, byRef)));
        byRef[layer.ref] = digest;
        return digest;
      })();
      pending.set(layer.ref, found);
    }
    return found;
  };
  const layers = Object.keys(model.layers)
    .sort()
    .map((name) => model.layers[name]);
  await Promise.all(layers.map(digestOf));
  // Sorted keys, whatever order the digests came back in.
  return Object.fromEntries(Object.keys(byRef).sort().map((ref) => [ref, byRef[ref]]));
}
