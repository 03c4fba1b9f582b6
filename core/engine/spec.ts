/**
 * What a fleet's sandboxes are made from: the spec hash that decides between
 * "update in place" and "replace", the sandbox spec handed to the provider,
 * and the ids sandboxes get at plan time.
 */
import { createHash } from 'node:crypto';
import {
  DEFAULT_DENSITY,
  type DensitySettings,
  type DiskImageRef,
  LABEL_FLEET,
  LABEL_LINEAGE,
  LABEL_SPEC,
  type LayerRef,
  type SandboxSpec,
  type SandboxTtl,
} from '../live.js';
import type { EnvironmentModel, FleetModel } from '../model.js';
import { canonicalJson } from '../util/canonical-json.js';

/** Everything that cannot change on a running sandbox: a change forces a replace. */
export interface SpecIdentity {
  readonly backend: string;
  readonly layers: readonly LayerRef[];
  readonly env: Readonly<Record<string, string>>;
  readonly workdir: string;
  readonly user: string;
  readonly network: FleetModel['network'];
  readonly qos: FleetModel['qos'];
  /** KSM merging is set on a sandbox's processes when they start, so it cannot change in place. */
  readonly memorySharing: boolean;
  /** The backend's own options: what a VM is made of (its vmm, devices) is fixed when it boots. */
  readonly backendOptions?: Readonly<Record<string, unknown>>;
  /** The environment's disk image, by path (an image is immutable: a new one gets a new path). */
  readonly image?: DiskImageRef;
}

/**
 * sha256 (hex) over the canonical JSON of the spec identity. Layers count by
 * digest only: renaming a version without changing content replaces nothing.
 */
export function fleetSpecHash(identity: SpecIdentity): string {
  const canonical = canonicalJson({
    backend: identity.backend,
    layers: identity.layers.map((layer) => layer.digest),
    env: identity.env,
    workdir: identity.workdir,
    user: identity.user,
    network: identity.network,
    qos: identity.qos,
    // Only when on: the hash of every fleet without it stays what it was before
    // density existed, so upgrading dsec replaces no sandbox.
    ...(identity.memorySharing ? { memorySharing: true } : {}),
    // The same for the backend options and the image: absent or empty, the hash is what it was before them.
    ...(identity.backendOptions && Object.keys(identity.backendOptions).length > 0 ? { backendOptions: identity.backendOptions } : {}),
    ...(identity.image ? { image: { path: identity.image.path, format: identity.image.format } } : {}),
  });
  return createHash('sha256').update(canonical).digest('hex');
}

/** A state written before density existed has no `density` on its fleets: the defaults apply. */
type DensityPart = { readonly density?: DensitySettings };
type FleetPart = Pick<FleetModel, 'name' | 'backend' | 'resources' | 'network' | 'qos' | 'labels' | 'placement' | 'backendOptions'> &
  DensityPart & { readonly ttl?: FleetModel['ttl'] };
type EnvironmentPart = Pick<EnvironmentModel, 'env' | 'workdir' | 'user' | 'image'>;

/** The spec identity of a fleet's sandboxes, from the fleet, its environment and its resolved layers. */
export function specIdentityOf(
  fleet: Pick<FleetModel, 'backend' | 'network' | 'qos' | 'backendOptions'> & DensityPart,
  environment: EnvironmentPart,
  layers: readonly LayerRef[],
): SpecIdentity {
  return {
    ...(fleet.backendOptions ? { backendOptions: fleet.backendOptions } : {}),
    ...(environment.image ? { image: environment.image } : {}),
    backend: fleet.backend,
    layers,
    env: environment.env,
    workdir: environment.workdir,
    user: environment.user,
    network: fleet.network,
    qos: fleet.qos,
    memorySharing: densityOf(fleet).memorySharing,
  };
}

/** The fleet's density switches, the defaults for a fleet recorded before they existed. */
export function densityOf(fleet: DensityPart): DensitySettings {
  return fleet.density ?? DEFAULT_DENSITY;
}

/** Only the lifetime limits that are set: `{}` when none is. */
export function ttlOf(fleet: { readonly ttl?: FleetModel['ttl'] }): SandboxTtl {
  const ttl = fleet.ttl ?? {};
  return {
    ...(ttl.maxLifetimeSeconds === undefined ? {} : { maxLifetimeSeconds: ttl.maxLifetimeSeconds }),
    ...(ttl.idleStopSeconds === undefined ? {} : { idleStopSeconds: ttl.idleStopSeconds }),
  };
}

/**
 * The spec of one sandbox of `fleet`. Its labels carry ownership (lineage),
 * the fleet and the spec hash, so refresh can tell which fleet a sandbox
 * belongs to and whether it is outdated without reading the state.
 */
export function sandboxSpecFor(
  fleet: FleetPart,
  environment: EnvironmentPart,
  layerRefs: readonly LayerRef[],
  lineage: string,
  id: string,
): SandboxSpec {
  const specHash = fleetSpecHash(specIdentityOf(fleet, environment, layerRefs));
  const ttl = ttlOf(fleet);
  return {
    id,
    backend: fleet.backend,
    layers: layerRefs,
    env: environment.env,
    workdir: environment.workdir,
    user: environment.user,
    resources: fleet.resources,
    network: fleet.network,
    qos: fleet.qos,
    ...(Object.keys(ttl).length > 0 ? { ttl } : {}),
    density: { ...densityOf(fleet) },
    ...(fleet.backendOptions && Object.keys(fleet.backendOptions).length > 0 ? { backendOptions: structuredClone(fleet.backendOptions) } : {}),
    ...(environment.image ? { image: { path: environment.image.path, format: environment.image.format } } : {}),
    // Read by the cluster provider's placement only; never part of the spec hash (moving nodes is not a change).
    ...(fleet.placement ? { placement: { strategy: fleet.placement.strategy, nodeSelector: { ...fleet.placement.nodeSelector } } } : {}),
    // dsec's own labels win over a user label of the same name.
    labels: { ...fleet.labels, [LABEL_LINEAGE]: lineage, [LABEL_FLEET]: fleet.name, [LABEL_SPEC]: specHash },
  };
}

// Sandbox ids are made by the engine (at plan time) and by the agent (pool refills) alike.
export { newSandboxId } from '../util/sandbox-id.js';
