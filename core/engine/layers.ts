/**
 * The digest of every declared layer, computed by the provider (its storage
 * plugin reads the content) without publishing anything. The planner compares
 * them with the published layers to tell a new version from an unchanged one.
 */
import type { ConfigModel } from '../model.js';
import type { Provider } from '../provider.js';
import { createLimiter } from './limiter.js';

/** Digesting reads whole trees; a few at once keeps the disk busy without thrashing it. */
const DIGEST_CONCURRENCY = 4;

export async function digestDeclaredLayers(
  model: ConfigModel,
  provider: Pick<Provider, 'digestLayer'>,
): Promise<Record<string /* name@version */, string /* digest */>> {
  const limit = createLimiter(DIGEST_CONCURRENCY);
  const layers = Object.keys(model.layers)
    .sort()
    .map((name) => model.layers[name]);
  const digests = await Promise.all(layers.map((layer) => limit(() => provider.digestLayer(layer))));
  const byRef: Record<string, string> = {};
  layers.forEach((layer, index) => {
    byRef[layer.ref] = digests[index];
  });
  return byRef;
}
