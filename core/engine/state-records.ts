/**
 * Pure state mutators apply hands to `StateSession.write`: each returns a
 * new StateFile with one small change, sharing everything else.
 */
import { LABEL_SPEC, type SandboxInfo } from '../live.js';
import type { FleetState, LayerState, SandboxState, StateFile } from '../plan.js';
import { fleetAddress, layerAddress, layerRef } from './addresses.js';
import type { FleetAttributes } from './fleet-attributes.js';

const withResource = (state: StateFile, address: string, resource: LayerState | FleetState | undefined): StateFile => {
  const resources = { ...state.resources };
  if (resource) resources[address] = resource;
  else delete resources[address];
  return { ...state, resources };
};

const fleetRecord = (state: StateFile, name: string): FleetState | undefined => {
  const resource = state.resources[fleetAddress(name)];
  return resource?.type === 'fleet' ? resource : undefined;
};

export const recordLayer = (state: StateFile, layer: LayerState): StateFile =>
  withResource(state, layerAddress(layerRef(layer.name, layer.version)), layer);

export const removeResource = (state: StateFile, address: string): StateFile =>
  address in state.resources ? withResource(state, address, undefined) : state;

/** Add or overwrite sandboxes of a fleet; creates the fleet record (with `attributes`) if there is none. */
export function recordSandboxes(
  state: StateFile,
  name: string,
  sandboxes: readonly SandboxState[],
  attributes: FleetAttributes | undefined,
): StateFile {
  if (sandboxes.length === 0) return state;
  const record = fleetRecord(state, name);
  const base = record ?? (attributes ? { type: 'fleet' as const, name, attributes, sandboxes: {} } : undefined);
  // A fleet being deleted has no desired attributes; its sandboxes are only ever dropped.
  if (!base) return state;
  const next = { ...base.sandboxes };
  for (const sandbox of sandboxes) next[sandbox.id] = sandbox;
  return withResource(state, fleetAddress(name), { ...base, sandboxes: next });
}

export function dropSandboxes(state: StateFile, name: string, ids: readonly string[]): StateFile {
  const record = fleetRecord(state, name);
  if (!record || !ids.some((id) => id in record.sandboxes)) return state;
  const next = { ...record.sandboxes };
  for (const id of ids) delete next[id];
  return withResource(state, fleetAddress(name), { ...record, sandboxes: next });
}

/** Record what was applied: the fleet's attributes (creating the record if needed). */
export function setFleetAttributes(state: StateFile, name: string, attributes: FleetAttributes): StateFile {
  const record = fleetRecord(state, name);
  return withResource(state, fleetAddress(name), {
    type: 'fleet',
    name,
    attributes,
    sandboxes: record?.sandboxes ?? {},
  });
}

/**
 * A state never written takes the lineage of the plan made against it, so
 * the sandboxes the plan labelled with that lineage are ours.
 */
export function adoptLineage(state: StateFile, lineage: string): StateFile {
  const neverWritten = state.serial === 0 && Object.keys(state.resources).length === 0;
  return neverWritten && state.lineage !== lineage ? { ...state, lineage } : state;
}

/** What the state keeps of a live sandbox. The spec hash is its label unless the caller knows better (the spec it created it from). */
export function sandboxStateOf(info: SandboxInfo, specHash = info.labels[LABEL_SPEC] ?? ''): SandboxState {
  return { id: info.id, node: info.node, specHash, resources: info.resources, createdAt: info.createdAt };
}

/** A sandbox resized in place: only its resources change (recorded afresh if the state lacked it). */
export function resizeSandbox(
  state: StateFile,
  name: string,
  info: SandboxInfo,
  attributes: FleetAttributes | undefined,
): StateFile {
  const previous = fleetRecord(state, name)?.sandboxes[info.id];
  const updated = previous ? { ...previous, resources: info.resources } : sandboxStateOf(info);
  return recordSandboxes(state, name, [updated], attributes);
}
