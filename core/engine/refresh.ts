/**
 * The state and the live view, each seen through the other. `dsec refresh`
 * folds the live view into the state; `plan --refresh=false` plans against
 * a live view made from the state alone (no sandbox or layer is listed, drift
 * goes unseen, as with Terraform's -refresh=false; the declared layers are
 * still digested, since their sources are config).
 */
import { LABEL_FLEET, LABEL_LINEAGE, LABEL_SPEC, type LiveView, type SandboxInfo } from '../live.js';
import type { FleetState, SandboxState, StateFile } from '../plan.js';
import { layerRef } from './addresses.js';
import { indexOwnedSandboxes } from './planner.js';
import { sandboxStateOf } from './state-records.js';

/**
 * The state updated from the live view: each recorded fleet's sandboxes
 * become the live sandboxes with our lineage and its label (adopting those a
 * crashed apply created, dropping those that are gone), and layers the store
 * no longer has are dropped. Sandboxes of a fleet the state does not know
 * stay unrecorded: there are no attributes to record them under, and the
 * next plan deletes them or adopts them into a declared fleet.
 */
export function reconcileState(state: StateFile, live: LiveView): StateFile {
  const owned = indexOwnedSandboxes(live, state);
  const liveLayers = new Set(live.layers.map((layer) => layerRef(layer.name, layer.version)));
  const resources: Record<string, StateFile['resources'][string]> = {};
  for (const [address, resource] of Object.entries(state.resources)) {
    if (resource.type === 'layer') {
      if (liveLayers.has(layerRef(resource.name, resource.version))) resources[address] = resource;
      continue;
    }
    const sandboxes: Record<string, SandboxState> = {};
    for (const sandbox of owned.get(resource.name) ?? []) {
      sandboxes[sandbox.id] = sandboxStateOf(
        sandbox,
        sandbox.labels[LABEL_SPEC] ?? resource.sandboxes[sandbox.id]?.specHash,
      );
    }
    resources[address] = { ...resource, sandboxes } satisfies FleetState;
  }
  return { ...state, resources };
}

/** What the state believes is live: every recorded layer published, every recorded sandbox running. */
export function liveViewFromState(state: StateFile): LiveView {
  const layers: LiveView['layers'][number][] = [];
  const sandboxes: SandboxInfo[] = [];
  for (const resource of Object.values(state.resources)) {
    if (resource.type === 'layer') {
      const { name, version, kind, digest } = resource;
      layers.push({ name, version, kind, digest, sizeBytes: 0, files: 0, publishedAt: '' });
      continue;
    }
    const attributes = resource.attributes;
    for (const sandbox of Object.values(resource.sandboxes)) {
      sandboxes.push({
        id: sandbox.id,
        node: sandbox.node,
        backend: attributes.backend,
        status: 'running',
        labels: {
          ...attributes.labels,
          [LABEL_LINEAGE]: state.lineage,
          [LABEL_FLEET]: resource.name,
          [LABEL_SPEC]: sandbox.specHash,
        },
        resources: sandbox.resources,
        layers: attributes.layers,
        createdAt: sandbox.createdAt,
      });
    }
  }
  return { nodes: [], layers, sandboxes };
}
