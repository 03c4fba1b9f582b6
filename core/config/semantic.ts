/**
 * The checks a JSON Schema cannot express: references between sections,
 * the order of layers in an environment, ranges of quantities written with
 * units. They run on the raw document even when the schema found problems
 * (every part is type-checked here first), so one load reports everything.
 */
import { childPointer, toPointer } from './pointer.js';
import { error, warning, type Problem } from './problems.js';
import { closest } from './suggest.js';
import { cpuCores, CPU_MAX, MEMORY_MAX_MIB, MEMORY_MIN_MIB, memoryMiB } from './units.js';

type Raw = Record<string, unknown>;

interface ResolvedLayer {
  readonly index: number;
  readonly name: string;
  readonly kind: string;
}

export function checkSemantics(data: unknown): Problem[] {
  if (!isRaw(data)) return [];
  const layers = rawMap(data.layers);
  const environments = rawMap(data.environments);
  const problems: Problem[] = [];
  const used = new Set<string>();
  for (const [name, environment] of Object.entries(environments)) {
    if (!isRaw(environment) || !Array.isArray(environment.layers)) continue;
    const path = toPointer(['environments', name, 'layers']);
    problems.push(...checkEnvironmentLayers(path, name, environment.layers, layers, used));
  }
  for (const [name, fleet] of Object.entries(rawMap(data.fleets))) {
    if (isRaw(fleet)) problems.push(...checkFleet(toPointer(['fleets', name]), name, fleet, environments));
  }
  problems.push(...checkBuildParents(layers, used));
  problems.push(...checkPlugins(data.plugins));
  problems.push(...checkState(data.state, data.provider));
  for (const name of Object.keys(layers)) {
    if (used.has(name)) continue;
    const message = `layer '${name}' is declared but no environment uses it`;
    problems.push(warning('DSEC_CONFIG_UNUSED_LAYER', toPointer(['layers', name]), message, 'key'));
  }
  return problems;
}

function checkEnvironmentLayers(
  path: string,
  environment: string,
  entries: readonly unknown[],
  layers: Readonly<Record<string, unknown>>,
  used: Set<string>,
): Problem[] {
  const problems: Problem[] = [];
  const resolved: ResolvedLayer[] = [];
  const declared = Object.keys(layers);
  entries.forEach((entry, index) => {
    if (typeof entry !== 'string') return;
    const at = childPointer(path, index);
    const [name, wanted] = splitRef(entry);
    used.add(name);
    const layer = layers[name];
    if (!Object.hasOwn(layers, name)) {
      problems.push(error('DSEC_CONFIG_UNKNOWN_LAYER', at, unknownMessage('layer', name, declared)));
      return;
    }
    if (resolved.some((other) => other.name === name)) {
      const message = `duplicate layer '${name}' in environment '${environment}': each layer appears once in a stack`;
      problems.push(error('DSEC_CONFIG_DUPLICATE', at, message));
      return;
    }
    const declaredVersion = isRaw(layer) && typeof layer.version === 'string' ? layer.version : undefined;
    if (wanted !== undefined && declaredVersion !== undefined && wanted !== declaredVersion) {
      const message = `layer '${name}' is declared at version ${declaredVersion}, not ${wanted} (a config declares one version of each layer; write '${name}' or '${name}@${declaredVersion}')`;
      problems.push(error('DSEC_CONFIG_VERSION_MISMATCH', at, message));
    }
    const kind = isRaw(layer) ? layer.kind : undefined;
    if (kind === 'base' || kind === 'workspace' || kind === 'toolkit') resolved.push({ index, name, kind });
    else resolved.push({ index, name, kind: '?' });
  });
  // Order is only meaningful when every entry is a known layer of a known kind.
  const complete = resolved.length === entries.length && resolved.every((layer) => layer.kind !== '?');
  return complete ? [...problems, ...checkLayerOrder(path, resolved)] : problems;
}

const ORDER_RULE = 'an environment is one base layer, then at most one workspace, then any toolkits';

/** One base first, at most one workspace next, then toolkits. */
function checkLayerOrder(path: string, stack: readonly ResolvedLayer[]): Problem[] {
  const problems: Problem[] = [];
  const order = (index: number, message: string) =>
    problems.push(error('DSEC_CONFIG_LAYER_ORDER', childPointer(path, index), `${message} (${ORDER_RULE})`));
  const baseCount = stack.filter((layer) => layer.kind === 'base').length;
  const first = stack[0];
  if (first && first.kind !== 'base') {
    if (baseCount === 0) {
      const listed = stack.map((layer) => `${layer.name} (${layer.kind})`).join(', ');
      problems.push(error('DSEC_CONFIG_LAYER_ORDER', path, `expected a base layer first, got no base layer among: ${listed} (${ORDER_RULE})`));
    } else {
      order(0, `expected the base layer first, got ${first.kind} layer '${first.name}'`);
    }
  }
  let bases = 0;
  let workspaces = 0;
  let toolkit: ResolvedLayer | undefined;
  for (const layer of stack) {
    if (layer.kind === 'base' && ++bases > 1) {
      order(layer.index, `a second base layer '${layer.name}'`);
    } else if (layer.kind === 'workspace') {
      if (++workspaces > 1) order(layer.index, `a second workspace layer '${layer.name}'`);
      else if (toolkit) order(layer.index, `workspace layer '${layer.name}' is above toolkit '${toolkit.name}'; expected it right above the base`);
    } else if (layer.kind === 'toolkit') {
      toolkit ??= layer;
    }
  }
  return problems;
}

/** The `from` list of a layer's build source, when it has one. */
function buildParents(layer: unknown): readonly unknown[] | undefined {
  if (!isRaw(layer) || !isRaw(layer.source) || !isRaw(layer.source.build)) return undefined;
  const from = layer.source.build.from;
  return Array.isArray(from) ? from : undefined;
}

/**
 * A build's parents: declared layers (a parent counts as used), each once,
 * at the declared version, and no build on top of itself, directly or
 * through other builds (the graph would refuse the cycle too, unlocated).
 */
function checkBuildParents(layers: Readonly<Record<string, unknown>>, used: Set<string>): Problem[] {
  const problems: Problem[] = [];
  const declared = Object.keys(layers);
  const edges = new Map<string, string[]>();
  for (const [name, layer] of Object.entries(layers)) {
    const from = buildParents(layer);
    if (!from) continue;
    const path = toPointer(['layers', name, 'source', 'build', 'from']);
    const seen = new Set<string>();
    from.forEach((entry, index) => {
      if (typeof entry !== 'string') return;
      const at = childPointer(path, index);
      const [parent, wanted] = splitRef(entry);
      used.add(parent);
      if (!Object.hasOwn(layers, parent)) {
        problems.push(error('DSEC_CONFIG_UNKNOWN_LAYER', at, unknownMessage('layer', parent, declared)));
        return;
      }
      if (seen.has(parent)) {
        problems.push(error('DSEC_CONFIG_DUPLICATE', at, `duplicate parent '${parent}' in the build of layer '${name}': each layer appears once in a stack`));
        return;
      }
      seen.add(parent);
      const parentLayer = layers[parent];
      const version = isRaw(parentLayer) && typeof parentLayer.version === 'string' ? parentLayer.version : undefined;
      if (wanted !== undefined && version !== undefined && wanted !== version) {
        const message = `layer '${parent}' is declared at version ${version}, not ${wanted} (write '${parent}' or '${parent}@${version}')`;
        problems.push(error('DSEC_CONFIG_VERSION_MISMATCH', at, message));
      }
    });
    edges.set(name, [...seen]);
  }
  for (const name of edges.keys()) {
    const cycle = cycleThrough(name, edges);
    if (!cycle) continue;
    const message = `layer '${name}' is built on top of itself: ${cycle.join(' -> ')}`;
    problems.push(error('DSEC_CONFIG_CYCLE', toPointer(['layers', name, 'source', 'build', 'from']), message));
  }
  return problems;
}

/** A path of build parents from `start` back to `start`, if there is one. */
function cycleThrough(start: string, edges: ReadonlyMap<string, readonly string[]>): string[] | undefined {
  const visited = new Set<string>();
  const walk = (current: string, path: string[]): string[] | undefined => {
    for (const next of edges.get(current) ?? []) {
      if (next === start) return [...path, next];
      if (visited.has(next)) continue;
      visited.add(next);
      const found = walk(next, [...path, next]);
      if (found) return found;
    }
    return undefined;
  };
  return walk(start, [start]);
}

function checkFleet(path: string, name: string, fleet: Raw, environments: Readonly<Record<string, unknown>>): Problem[] {
  const problems: Problem[] = [];
  const environment = fleet.environment;
  if (typeof environment === 'string' && !Object.hasOwn(environments, environment)) {
    const message = unknownMessage('environment', environment, Object.keys(environments));
    problems.push(error('DSEC_CONFIG_UNKNOWN_ENVIRONMENT', childPointer(path, 'environment'), message));
  }
  const resources = isRaw(fleet.resources) ? fleet.resources : {};
  if (typeof resources.memory === 'string') {
    const mib = memoryMiB(resources.memory);
    if (mib !== undefined && (mib < MEMORY_MIN_MIB || mib > MEMORY_MAX_MIB)) {
      const message = `expected a memory size from 16Mi to 1Ti, got '${resources.memory}'`;
      problems.push(error('DSEC_CONFIG_INVALID_VALUE', toPointer(['fleets', name, 'resources', 'memory']), message));
    }
  }
  if (typeof resources.cpu === 'string') {
    const cores = cpuCores(resources.cpu);
    if (cores !== undefined && cores > CPU_MAX) {
      const message = `expected at most ${CPU_MAX} CPU cores (${CPU_MAX * 1000}m), got '${resources.cpu}'`;
      problems.push(error('DSEC_CONFIG_INVALID_VALUE', toPointer(['fleets', name, 'resources', 'cpu']), message));
    }
  }
  if (fleet.replicas === 0) {
    const message = `fleet '${name}' has 0 replicas: it keeps no sandboxes`;
    problems.push(warning('DSEC_CONFIG_EMPTY_FLEET', childPointer(path, 'replicas'), message));
  }
  return problems;
}

/** `backend: etcd` needs endpoints: its own `etcd` list or the cluster provider's. */
function checkState(state: unknown, provider: unknown): Problem[] {
  if (!isRaw(state) || state.backend !== 'etcd' || state.etcd !== undefined) return [];
  if (isRaw(provider) && isRaw(provider.cluster)) return [];
  const message = 'state backend etcd needs etcd endpoints: list them in state.etcd (etcd: [http://127.0.0.1:2379]) or use the cluster provider, whose endpoints it then shares';
  return [error('DSEC_CONFIG_MISSING_PROPERTY', toPointer(['state', 'backend']), message)];
}

function checkPlugins(plugins: unknown): Problem[] {
  if (!Array.isArray(plugins)) return [];
  const problems: Problem[] = [];
  const seen = new Set<string>();
  plugins.forEach((plugin, index) => {
    const name = typeof plugin === 'string' ? plugin : isRaw(plugin) ? plugin.name : undefined;
    if (typeof name !== 'string') return;
    if (seen.has(name)) {
      const message = `duplicate plugin '${name}': each plugin is listed once`;
      problems.push(error('DSEC_CONFIG_DUPLICATE', toPointer(['plugins', index]), message));
    }
    seen.add(name);
  });
  return problems;
}

/** `unknown layer 'pyton', did you mean 'python'? (declared: base, python)` */
function unknownMessage(what: string, name: string, declared: readonly string[]): string {
  const suggestion = closest(name, declared);
  const hint = suggestion === undefined ? '' : `, did you mean '${suggestion}'?`;
  const list = declared.length > 0 ? `declared: ${[...declared].sort().join(', ')}` : `no ${what}s are declared`;
  return `unknown ${what} '${name}'${hint} (${list})`;
}

/** `python@3.11.9` -> [`python`, `3.11.9`]; `python` -> [`python`, undefined]. */
export function splitRef(ref: string): [string, string | undefined] {
  const at = ref.indexOf('@');
  return at < 0 ? [ref, undefined] : [ref.slice(0, at), ref.slice(at + 1)];
}

function isRaw(value: unknown): value is Raw {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function rawMap(value: unknown): Readonly<Record<string, unknown>> {
  return isRaw(value) ? value : {};
}
