/**
 * The planner: desired (config + layer digests) x recorded (state) x live
 * (refresh) -> a Plan. Pure and synchronous: no I/O, no clock but the
 * plan's timestamp, no randomness but new sandbox ids. It must stay linear in
 * the number of sandboxes: 1,000 fleets of 100 plan in well under 2 s.
 */
import { isPendingDigest, LABEL_FLEET, LABEL_LINEAGE, type LayerRecord, type LiveView, type SandboxInfo } from '../live.js';
import type { FleetState, LayerState, Plan, PlanInput, ResourceChange, StateFile } from '../plan.js';
import { DSEC_VERSION } from '../version.js';
import { fleetAddress, layerAddress, layerRef } from './addresses.js';
import { withParents } from './build-layers.js';
import { capacityWarnings } from './capacity.js';
import { type FleetAttributes, resolveFleet } from './fleet-attributes.js';
import { buildGraph } from './graph.js';
import { planFleet } from './plan-fleets.js';
import { type DesiredLayer, planDeclaredLayer, planLayerDelete } from './plan-layers.js';
import { parseReplace, targetScope } from './targets.js';

/**
 * Live sandboxes dsec owns, by fleet: our lineage label and not forgotten by
 * `dsec state rm`. A sandbox without our lineage is never touched. One pass.
 */
export function indexOwnedSandboxes(live: LiveView, state: StateFile): Map<string, SandboxInfo[]> {
  const forgotten = new Set(state.forgotten ?? []);
  const byFleet = new Map<string, SandboxInfo[]>();
  for (const sandbox of live.sandboxes) {
    if (sandbox.labels[LABEL_LINEAGE] !== state.lineage || forgotten.has(sandbox.id)) continue;
    const fleet = sandbox.labels[LABEL_FLEET];
    if (!fleet) continue;
    const list = byFleet.get(fleet);
    if (list) list.push(sandbox);
    else byFleet.set(fleet, [sandbox]);
  }
  return byFleet;
}

function recordsOf(state: StateFile) {
  const layers = new Map<string, LayerState>();
  const fleets = new Map<string, FleetState>();
  for (const resource of Object.values(state.resources)) {
    if (resource.type === 'layer') layers.set(layerRef(resource.name, resource.version), resource);
    else fleets.set(resource.name, resource);
  }
  return { layers, fleets };
}

export function makePlan(input: PlanInput): Plan {
  const { config, state, live, layerDigests, options } = input;
  const mode = options.destroy ? 'destroy' : 'normal';
  const warnings: string[] = [];
  const warn = (message: string): void => void warnings.push(message);

  // The graph first: it rejects dangling references and cycles before any diffing.
  const graph = buildGraph(config);
  const desiredLayers: Record<string, DesiredLayer> = {};
  const desiredFleets: Record<string, FleetAttributes> = {};
  if (mode === 'normal') {
    for (const name of Object.keys(config.layers).sort()) {
      const layer = config.layers[name];
      const digest = layerDigests[layer.ref];
      if (!digest) throw new Error(`makePlan: no digest was computed for layer ${layer.ref}`);
      desiredLayers[layer.ref] = { ...withParents(config, layer, layerDigests), digest };
    }
    for (const name of Object.keys(config.fleets).sort()) {
      desiredFleets[name] = resolveFleet(config, config.fleets[name], layerDigests);
    }
    warnPendingLayers(desiredLayers, desiredFleets, warn);
  }

  const records = recordsOf(state);
  const owned = indexOwnedSandboxes(live, state);
  const inScope = targetScope({
    targets: options.targets,
    mode,
    graph,
    recorded: { addresses: Object.keys(state.resources), fleets: [...records.fleets.values()] },
    liveFleets: owned.keys(),
    warn,
  });
  const replace = parseReplace({
    replace: options.replace,
    mode,
    declaredFleets: new Set(Object.keys(desiredFleets)),
    warn,
  });

  for (const [fleet, ids] of replace.sandboxes) {
    const live = new Set((owned.get(fleet) ?? []).map((sandbox) => sandbox.id));
    for (const id of ids)
      if (!live.has(id)) warn(`--replace fleet.${fleet}[${id}]: no such live sandbox in fleet.${fleet}`);
  }

  let takenIds: Set<string> | undefined;
  const allTakenIds = (): Set<string> => {
    if (!takenIds) {
      takenIds = new Set(live.sandboxes.map((sandbox) => sandbox.id));
      for (const fleet of records.fleets.values()) for (const id of Object.keys(fleet.sandboxes)) takenIds.add(id);
    }
    return takenIds;
  };

  // Apply sets a fleet's pool record on every healthy node; the planner checks they hold the current one.
  const healthyNodes = live.nodes.filter((node) => node.health !== 'unhealthy').map((node) => node.name);
  const poolsOf = (fleet: string) =>
    live.pools === undefined
      ? undefined
      : { records: live.pools.filter((pool) => pool.fleet === fleet && pool.lineage === state.lineage), nodes: healthyNodes };

  // Fleets before layer deletes: a layer may only go once no sandbox that stays uses it.
  const fleetChanges: ResourceChange[] = [];
  const fleetNames = new Set([...Object.keys(desiredFleets), ...records.fleets.keys(), ...owned.keys()]);
  for (const name of [...fleetNames].sort()) {
    if (!inScope(fleetAddress(name))) continue;
    const change = planFleet({
      name,
      mode,
      lineage: state.lineage,
      desired: desiredFleets[name],
      record: records.fleets.get(name),
      owned: owned.get(name) ?? [],
      replaceAll: replace.fleets.has(name),
      replaceIds: replace.sandboxes.get(name),
      replaceClaimed: options.replaceClaimed === true,
      pools: poolsOf(name),
      takenIds: allTakenIds,
      warn,
    });
    if (change) fleetChanges.push(change);
  }

  // After every fleet is planned: what all of them free and ask for decides what fits.
  for (const warning of capacityWarnings(fleetChanges, live)) warn(warning);

  const liveLayers = new Map<string, LayerRecord>(
    live.layers.map((layer) => [layerRef(layer.name, layer.version), layer]),
  );
  const layerChanges: ResourceChange[] = [];
  for (const [ref, desired] of Object.entries(desiredLayers)) {
    if (inScope(layerAddress(ref)))
      layerChanges.push(planDeclaredLayer(desired, liveLayers.get(ref), records.layers.get(ref)));
  }

  const stillUsed = layersStillUsed(live, fleetChanges, desiredFleets);
  const layerDeletes: ResourceChange[] = [];
  for (const [ref, recorded] of [...records.layers].sort(([a], [b]) => a.localeCompare(b))) {
    if (desiredLayers[ref] || !inScope(layerAddress(ref))) continue;
    const users = stillUsed().get(ref) ?? 0;
    if (users > 0) {
      warn(
        `layer.${ref} is no longer declared, but ${users} sandbox(es) that stay still use it; it will be unpublished by a later apply once they are gone`,
      );
      continue;
    }
    layerDeletes.push(planLayerDelete(recorded, mode));
  }

  return {
    format_version: '1.0',
    dsec_version: DSEC_VERSION,
    created_at: new Date().toISOString(),
    mode,
    config_file: config.file,
    prior_state: { lineage: state.lineage, serial: state.serial },
    resource_changes: [...layerChanges, ...fleetChanges, ...layerDeletes],
    warnings,
    desired: { layers: desiredLayers, fleets: desiredFleets },
  };
}

/** Say plainly which layers are built during apply and what that costs: their fleets are replaced. */
function warnPendingLayers(
  layers: Readonly<Record<string, DesiredLayer>>,
  fleets: Readonly<Record<string, FleetAttributes>>,
  warn: (message: string) => void,
): void {
  for (const [ref, layer] of Object.entries(layers)) {
    if (!isPendingDigest(layer.digest)) continue;
    const users = Object.values(fleets)
      .filter((fleet) => fleet.layers.some((used) => layerRef(used.name, used.version) === ref))
      .map((fleet) => `fleet.${fleet.name}`);
    const effect = users.length > 0 ? `; the sandboxes of ${users.join(', ')} are created on it (live ones replaced) once it is built` : '';
    warn(`layer.${ref} is built during apply, so its digest is known after apply${effect}`);
  }
}

/**
 * How many sandboxes will still use each layer (`name@version`) after this
 * plan: every live sandbox, ours or not, minus those the plan deletes or
 * replaces, plus the fleets still declared. Computed once, on first need.
 */
function layersStillUsed(
  live: LiveView,
  fleetChanges: readonly ResourceChange[],
  desiredFleets: Readonly<Record<string, FleetAttributes>>,
): () => Map<string, number> {
  let counts: Map<string, number> | undefined;
  return () => {
    if (counts) return counts;
    counts = new Map();
    const leaving = new Set<string>();
    for (const change of fleetChanges) {
      for (const operation of change.fleet?.operations ?? []) {
        if (operation.op === 'delete' || operation.op === 'replace') leaving.add(operation.id);
      }
    }
    const count = (ref: string): void => void counts!.set(ref, (counts!.get(ref) ?? 0) + 1);
    for (const sandbox of live.sandboxes) {
      if (leaving.has(sandbox.id)) continue;
      for (const layer of sandbox.layers) count(layerRef(layer.name, layer.version));
    }
    for (const fleet of Object.values(desiredFleets)) {
      if (fleet.replicas > 0) for (const layer of fleet.layers) count(layerRef(layer.name, layer.version));
    }
    return counts;
  };
}
