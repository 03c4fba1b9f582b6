/**
 * Planning layers. Layers are immutable and content-addressed: a declared
 * layer is either already published with the same digest (no-op), not
 * published (create), or published with other content, which is an error and
 * never an overwrite. A layer the state holds that is no longer declared is
 * unpublished, unless a sandbox that stays still uses it.
 */
import { DsecError } from '../errors.js';
import type { LayerRecord } from '../live.js';
import type { LayerModel } from '../model.js';
import type { LayerState, ResourceChange } from '../plan.js';
import { layerAddress, layerRef } from './addresses.js';

export type DesiredLayer = LayerModel & { readonly digest: string };

const display = (layer: { name: string; version: string; kind: string; digest: string }): Record<string, unknown> => ({
  name: layer.name,
  version: layer.version,
  kind: layer.kind,
  digest: layer.digest,
});

export function planDeclaredLayer(
  desired: DesiredLayer,
  live: LayerRecord | undefined,
  recorded: LayerState | undefined,
): ResourceChange {
  const base = { address: layerAddress(desired.ref), type: 'layer' as const, name: desired.ref, replacePaths: [] };
  if (live) {
    if (live.digest !== desired.digest) {
      throw new DsecError('DSEC_LAYER_IMMUTABLE', { ref: desired.ref, existing: live.digest, digest: desired.digest });
    }
    return { ...base, action: 'no-op', reason: null, before: display(live), after: display(desired) };
  }
  return {
    ...base,
    action: 'create',
    // The state says it was published, but the store no longer has it.
    reason: recorded ? 'create_because_missing' : null,
    before: null,
    after: { ...display(desired), source: `${desired.source.type}:${desired.source.path}` },
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
