/**
 * Planning layers. Layers are immutable and content-addressed: a declared
 * layer is either already published with the same digest (no-op), not
 * published (create), or published with other content, which is an error and
 * never an overwrite. A layer the state holds that is no longer declared is
 * unpublished, unless a sandbox that stays still uses it.
 */
import { DsecError } from '../errors.js';
import { isPendingDigest, type LayerRecord } from '../live.js';
import type { LayerModel, LayerSource } from '../model.js';
import type { LayerState, ResourceChange } from '../plan.js';
import { layerAddress, layerRef } from './addresses.js';

export type DesiredLayer = LayerModel & { readonly digest: string };

/** What a plan shows for a digest only a build will tell, as Terraform does. */
export const KNOWN_AFTER_APPLY = '(known after apply)';

const display = (layer: { name: string; version: string; kind: string; digest: string }): Record<string, unknown> => ({
  name: layer.name,
  version: layer.version,
  kind: layer.kind,
  digest: isPendingDigest(layer.digest) ? KNOWN_AFTER_APPLY : layer.digest,
});

/** Where the content comes from, for the plan: `dir:/path`, `build:from base@1.0.0, 2 step(s)`. */
function describeSource(source: LayerSource): string {
  switch (source.type) {
    case 'build':
      return `build:from ${source.from.join(', ')}, ${source.steps.length} step(s)`;
    case 'published':
      return 'published';
    case 'oci':
      return `oci:${source.path}${source.image ? ` (${source.image})` : ''}`;
    default:
      return `${source.type}:${source.path}`;
  }
}

export function planDeclaredLayer(
  desired: DesiredLayer,
  live: LayerRecord | undefined,
  recorded: LayerState | undefined,
): ResourceChange {
  const base = { address: layerAddress(desired.ref), type: 'layer' as const, name: desired.ref, replacePaths: [] };
  if (live) {
    if (isPendingDigest(desired.digest)) {
      // Published under this name@version, but not from these build inputs (or the build cache was lost).
      throw new DsecError('DSEC_LAYER_IMMUTABLE', {
        ref: desired.ref,
        existing: live.digest,
        digest: `${KNOWN_AFTER_APPLY}: its build inputs (parents, steps, env, workdir) are not the ones it was built from`,
      });
    }
    if (live.digest !== desired.digest) {
      throw new DsecError('DSEC_LAYER_IMMUTABLE', { ref: desired.ref, existing: live.digest, digest: desired.digest });
    }
    return { ...base, action: 'no-op', reason: null, before: display(live), after: display(desired) };
  }
  if (desired.source.type === 'published') {
    // Not ours to publish: its digest came from the store itself (a plan without refresh just did not list it).
    return { ...base, action: 'no-op', reason: null, before: display(desired), after: display(desired) };
  }
  return {
    ...base,
    action: 'create',
    // The state says it was published, but the store no longer has it.
    reason: recorded ? 'create_because_missing' : null,
    before: null,
    after: { ...display(desired), source: describeSource(desired.source) },
  };
}

export function planLayerDelete(recorded: LayerState, mode: 'normal' | 'destroy'): ResourceChange {
  const ref = layerRef(recorded.name, recorded.version);
  return {
    address: layerAddress(ref),
    type: 'layer',
    name: ref,
    action: 'delete',
    reason: mode === 'destroy' ? 'delete_because_destroy_mode' : 'delete_because_no_resource_config',
    before: display(recorded),
    after: null,
    replacePaths: [],
  };
}
