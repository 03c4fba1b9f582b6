/**
 * NodeContext and SandboxContext built by hand, for tests that drive a
 * plugin's taps in this process without a node agent (the storage plugins'
 * publish/resolve/destroy). Every field the hook table requires is filled
 * with a neutral value, so a field added to the contexts later is added here
 * once, not in every test that builds one.
 */
import type { Logger, NodeContext, SandboxContext } from '../../core/hooks.js';
import type { LayerRef, SandboxSpec } from '../../core/live.js';

/** A logger that drops everything. */
export const quietLog: Logger = { info() {}, warn() {}, debug() {} };

/**
 * A node named `name` whose agent root is `root`: a small machine (2 CPUs,
 * 4 GiB) holding no sandboxes, logging nowhere, unless `fields` says otherwise.
 */
export function nodeContext(name: string, root: string, fields: Partial<NodeContext> = {}): NodeContext {
  return { name, root, log: quietLog, capacity: { cpu: 2, memoryMiB: 4096 }, sandboxes: () => [], ...fields };
}

/**
 * The spec of a small container sandbox on `layers` (bottom to top; only
 * each one's name, version and digest are kept, so LayerRecords may be passed).
 */
export function sandboxSpec(id: string, layers: readonly LayerRef[], fields: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    id,
    backend: 'container',
    layers: layers.map(({ name, version, digest }) => ({ name, version, digest })),
    env: {},
    workdir: '/',
    user: 'root',
    resources: { cpu: 1, memoryMiB: 256, pids: 256 },
    network: 'none',
    qos: 'best-effort',
    labels: {},
    ...fields,
  };
}

/**
 * A sandbox being created (status `creating`, created now) on `node`, with
 * its private folder `dir`, as the agent hands it to the lifecycle hooks
 * before any plugin has recorded anything on it.
 */
export function sandboxContext(spec: SandboxSpec, node: NodeContext, dir: string, fields: Partial<SandboxContext> = {}): SandboxContext {
  return {
    spec,
    node,
    dir,
    status: 'creating',
    lowerDirs: [],
    storage: {},
    backend: {},
    density: {},
    traits: {},
    createdAt: new Date().toISOString(),
    ...fields,
  };
}
