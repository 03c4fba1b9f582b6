/**
 * A fleet as the plan shows and records it: the declared fleet with its
 * environment resolved to layer digests (what the state keeps as
 * `attributes`), the display form (`before`/`after`), and which attributes
 * force a replace.
 */
import { DsecError } from '../errors.js';
import { LABEL_SPEC, type LayerRef, type SandboxInfo } from '../live.js';
import type { ConfigModel, FleetModel } from '../model.js';
import type { FleetState } from '../plan.js';
import { fleetAddress, layerRef, requireLayerRef } from './addresses.js';
import { canonicalJson } from '../util/canonical-json.js';
import { densityOf, fleetSpecHash, specIdentityOf, ttlOf } from './spec.js';

export type FleetAttributes = FleetState['attributes'];

/** The fleet resolved against its environment and the layer digests. */
export function resolveFleet(
  config: ConfigModel,
  fleet: FleetModel,
  layerDigests: Readonly<Record<string, string>>,
): FleetAttributes {
  const address = fleetAddress(fleet.name);
  const environment = config.environments[fleet.environment];
  if (!environment) {
    throw new DsecError('DSEC_CONFIG_UNKNOWN_ENVIRONMENT', { name: `${fleet.environment} (used by ${address})` });
  }
  const layers: LayerRef[] = environment.layers.map((ref) => {
    const layer = requireLayerRef(config, ref, `environment.${environment.name}`);
    const digest = layerDigests[layer.ref];
    // The engine digests every declared layer before planning; a gap is a bug, not a user error.
    if (!digest) throw new Error(`makePlan: no digest was computed for layer ${layer.ref}`);
    return { name: layer.name, version: layer.version, digest };
  });
  return {
    name: fleet.name,
    environment: fleet.environment,
    backend: fleet.backend,
    replicas: fleet.replicas,
    resources: fleet.resources,
    network: fleet.network,
    qos: fleet.qos,
    ttl: fleet.ttl,
    density: fleet.density,
    labels: fleet.labels,
    ...(fleet.placement ? { placement: fleet.placement } : {}),
    ...(fleet.backendOptions ? { backendOptions: fleet.backendOptions } : {}),
    ...(fleet.pool ? { pool: fleet.pool } : {}),
    update: fleet.update,
    layers,
    env: environment.env,
    workdir: environment.workdir,
    user: environment.user,
    ...(environment.image ? { image: environment.image } : {}),
    specHash: fleetSpecHash(specIdentityOf(fleet, environment, layers)),
  };
}

/** What `before`/`after` show for a fleet: its attributes, never its sandboxes. */
export function displayFleet(attributes: FleetAttributes): Record<string, unknown> {
  return {
    environment: attributes.environment,
    layers: attributes.layers.map((layer) => layerRef(layer.name, layer.version)),
    env: attributes.env,
    workdir: attributes.workdir,
    user: attributes.user,
    ...(attributes.image ? { image: attributes.image } : {}),
    backend: attributes.backend,
    ...(attributes.backendOptions ? { backendOptions: attributes.backendOptions } : {}),
    replicas: attributes.replicas,
    resources: attributes.resources,
    network: attributes.network,
    qos: attributes.qos,
    ttl: ttlOf(attributes),
    density: densityOf(attributes),
    labels: attributes.labels,
    ...(attributes.placement ? { placement: attributes.placement } : {}),
    ...(attributes.pool ? { pool: attributes.pool } : {}),
    update: attributes.update,
  };
}

/**
 * A fleet the state does not know but whose sandboxes are live with this
 * lineage (a crash before the first state write): what the sandboxes
 * themselves say. Attributes they cannot tell are left out, not guessed.
 */
export function displayLiveFleet(sandboxes: readonly SandboxInfo[]): Record<string, unknown> {
  const first = sandboxes[0];
  if (!first) return { replicas: 0 };
  return {
    layers: first.layers.map((layer) => layerRef(layer.name, layer.version)),
    backend: first.backend,
    replicas: sandboxes.length,
    resources: first.resources,
  };
}

/**
 * Attribute paths that are part of the spec hash, in display order: a change
 * to one forces a replace. Memory sharing is set on a sandbox's processes as
 * they start; the other density switch and the lifetimes change in place.
 */
export const FORCES_REPLACE: readonly (readonly string[])[] = [
  ['environment'],
  ['layers'],
  ['env'],
  ['workdir'],
  ['user'],
  ['image'],
  ['backend'],
  ['backendOptions'],
  ['network'],
  ['qos'],
  ['density', 'memorySharing'],
];

/** Optional attributes shown only when set: their absence means "none". */
const ABSENT_MEANS_NONE = new Set(['image', 'backendOptions']);

function valueAt(display: Record<string, unknown>, path: readonly string[]): { found: boolean; value: unknown } {
  let value: unknown = display;
  for (const key of path) {
    if (value === null || typeof value !== 'object' || !(key in value)) return { found: false, value: undefined };
    value = (value as Record<string, unknown>)[key];
  }
  return { found: true, value };
}

/** The attributes that differ between two display forms and force a replace, as paths. */
export function forcingPaths(before: Record<string, unknown> | null, after: Record<string, unknown>): string[][] {
  if (!before) return [];
  return FORCES_REPLACE.filter((path) => {
    const old = valueAt(before, path);
    // Absent from a state written before the attribute existed: no change. An image or backend options going or coming is one.
    if (!old.found && !ABSENT_MEANS_NONE.has(path.join('.'))) return false;
    return canonicalJson(old.value ?? null) !== canonicalJson(valueAt(after, path).value ?? null);
  }).map((path) => [...path]);
}

/**
 * When the state already holds the new attributes (a half-finished rollout)
 * the diff is empty; the outdated sandbox itself still tells a backend or
 * layer change. Anything else it cannot see (env, workdir, user) is part of
 * the environment, so the environment is named.
 */
export function forcingPathsFromSandbox(sandbox: SandboxInfo, desired: FleetAttributes): string[][] {
  const paths: string[][] = [];
  if (sandbox.backend !== desired.backend) paths.push(['backend']);
  const liveDigests = sandbox.layers.map((layer) => layer.digest).join(',');
  if (liveDigests !== desired.layers.map((layer) => layer.digest).join(',')) paths.push(['layers']);
  if (paths.length > 0) return paths;
  // The sandbox cannot tell its density, but its spec hash can: the desired one with memory sharing flipped.
  const density = densityOf(desired);
  const flipped = { ...desired, density: { ...density, memorySharing: !density.memorySharing } };
  if (sandbox.labels[LABEL_SPEC] === fleetSpecHash(specIdentityOf(flipped, desired, desired.layers))) {
    return [['density', 'memorySharing']];
  }
  return [['environment']];
}

/**
 * What an in-place update of a fleet's sandboxes changes besides resources:
 * the lifetimes, the density switch that applies in place, or the labels.
 * Compared as recorded (a state from before density existed means the defaults).
 */
export function inPlaceChanges(
  recorded: Pick<FleetAttributes, 'ttl'> & { readonly density?: FleetAttributes['density']; readonly labels?: FleetAttributes['labels'] },
  desired: Pick<FleetAttributes, 'ttl' | 'density'> & { readonly labels?: FleetAttributes['labels'] },
): { ttl: boolean; density: boolean; labels: boolean } {
  return {
    ttl: canonicalJson(ttlOf(recorded)) !== canonicalJson(ttlOf(desired)),
    density: densityOf(recorded).reclaimOnPause !== densityOf(desired).reclaimOnPause,
    labels: canonicalJson(recorded.labels ?? {}) !== canonicalJson(desired.labels ?? {}),
  };
}

export function sameResources(a: FleetModel['resources'], b: FleetModel['resources']): boolean {
  return a.cpu === b.cpu && a.memoryMiB === b.memoryMiB && a.pids === b.pids;
}
