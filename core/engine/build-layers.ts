/**
 * Build layers in the engine: a build's digest depends on its parents'
 * digests, so the engine hands each build its parents resolved (digests
 * included, pending ones too) before it asks the provider for a digest or a
 * publish, and apply swaps pending digests for the real ones once the
 * builds are published.
 */
import { isPendingDigest, LABEL_SPEC, type LayerRef } from '../live.js';
import type { ConfigModel, LayerModel } from '../model.js';
import type { ResourceChange, SandboxOperation } from '../plan.js';
import { requireLayerRef } from './addresses.js';
import type { FleetAttributes } from './fleet-attributes.js';
import { fleetSpecHash, specIdentityOf } from './spec.js';

/** The layer with its build parents resolved against `digests` (`name@version` -> digest); other layers as they are. */
export function withParents(config: ConfigModel, layer: LayerModel, digests: Readonly<Record<string, string>>): LayerModel {
  const source = layer.source;
  if (source.type !== 'build') return layer;
  const parents = source.from.map((ref) => {
    const parent = requireLayerRef(config, ref, `layer.${layer.ref}`);
    const digest = digests[parent.ref];
    if (!digest) throw new Error(`no digest was computed for ${parent.ref}, the parent of ${layer.ref}`);
    return { name: parent.name, version: parent.version, digest };
  });
  return { ...layer, source: { ...source, parents } };
}

/** The refs (`name@version`) a layer must have published before it: a build's parents. */
export function parentRefs(layer: LayerModel): readonly string[] {
  return layer.source.type === 'build' ? layer.source.from : [];
}

/**
 * A fleet change planned against pending layer digests, made concrete with
 * the digests apply just published: its layers, spec hash and every
 * operation's spec (layers and spec label). Unchanged when nothing is pending.
 * Throws when a pending layer was not published (a bug: apply publishes
 * every pending layer before the fleets that use it).
 */
export function resolvePendingFleet(
  change: ResourceChange,
  desired: FleetAttributes | undefined,
  published: ReadonlyMap<string, string>,
): { change: ResourceChange; desired: FleetAttributes | undefined } {
  if (!desired || !desired.layers.some((layer) => isPendingDigest(layer.digest))) return { change, desired };
  const layers: LayerRef[] = desired.layers.map((layer) => {
    if (!isPendingDigest(layer.digest)) return layer;
    const digest = published.get(`${layer.name}@${layer.version}`);
    if (!digest) throw new Error(`${change.address}: layer ${layer.name}@${layer.version} was to be built before it, but was not`);
    return { ...layer, digest };
  });
  const specHash = fleetSpecHash(specIdentityOf(desired, desired, layers));
  const resolved: FleetAttributes = { ...desired, layers, specHash };
  const respec = (operation: SandboxOperation): SandboxOperation =>
    operation.op === 'create' || operation.op === 'replace'
      ? { ...operation, spec: { ...operation.spec, layers, labels: { ...operation.spec.labels, [LABEL_SPEC]: specHash } } }
      : operation;
  const fleet = change.fleet && { ...change.fleet, operations: change.fleet.operations.map(respec) };
  return { change: { ...change, ...(fleet ? { fleet } : {}) }, desired: resolved };
}
