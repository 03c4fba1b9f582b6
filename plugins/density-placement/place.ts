/**
 * The placement decision, pure: which node of `nodes` takes `spec`, given
 * what this placer already sent where (`overlay`) and a random source. No
 * I/O, so unit tests and the bench drive it directly.
 *
 * Candidates: healthy nodes offering the spec's backend whose labels include
 * its `placement.nodeSelector`. Load of a node with the sandbox on it: the
 * larger of its CPU and memory ratios, (requested + overlay + this spec) /
 * allocatable; a node without an admission policy (no allocatable) counts
 * sandboxes instead. `spread` samples k distinct candidates and takes the
 * least loaded (power of k choices); `pack` takes the most loaded candidate
 * the sandbox still fits on under its allocatable, and spreads when none does
 * (or no candidate reports allocatable: fitting cannot be judged).
 */
import type { NodeInfo, SandboxSpec } from '../../core/plugin-api.js';

/** What one placer sent to one node and the node has not reported yet. */
export interface PlacedLoad {
  cpu: number;
  memoryMiB: number;
  sandboxes: number;
}

/** By node name. */
export type PlacementOverlay = Map<string, PlacedLoad>;

export type RandomSource = () => number;

/**
 * Candidate lists by filter, per `nodes` array: a burst of one fleet filters
 * the same array the same way thousands of times.
 */
const candidateCache = new WeakMap<readonly NodeInfo[], Map<string, readonly NodeInfo[]>>();

export function candidatesFor(spec: Pick<SandboxSpec, 'backend' | 'placement'>, nodes: readonly NodeInfo[]): readonly NodeInfo[] {
  const selector = spec.placement?.nodeSelector ?? {};
  const selectorKeys = Object.keys(selector).sort();
  const key = `${spec.backend}\u0000${selectorKeys.map((name) => `${name}=${selector[name]}`).join('\u0000')}`;
  let byFilter = candidateCache.get(nodes);
  if (!byFilter) candidateCache.set(nodes, (byFilter = new Map()));
  let found = byFilter.get(key);
  if (!found) {
    found = nodes.filter(
      (node) =>
        node.health !== 'unhealthy' &&
        node.backends.includes(spec.backend) &&
        selectorKeys.every((name) => node.labels?.[name] === selector[name]),
    );
    byFilter.set(key, found);
  }
  return found;
}

/** The node's load once `spec` is on it: max of the CPU and memory ratios, or the sandbox count without a policy. */
export function loadWith(node: NodeInfo, spec: Pick<SandboxSpec, 'resources'>, overlay: PlacementOverlay): number {
  const placed = overlay.get(node.name);
  const allocatable = node.allocatable;
  if (!allocatable) return node.sandboxes + (placed?.sandboxes ?? 0) + 1;
  const requested = node.requested ?? { cpu: 0, memoryMiB: 0 };
  const cpu = ratio(requested.cpu + (placed?.cpu ?? 0) + spec.resources.cpu, allocatable.cpu);
  const memory = ratio(requested.memoryMiB + (placed?.memoryMiB ?? 0) + spec.resources.memoryMiB, allocatable.memoryMiB);
  return cpu > memory ? cpu : memory;
}

function ratio(used: number, total: number): number {
  return total > 0 ? used / total : used > 0 ? Infinity : 0;
}

/** Whether `spec` fits on the node under its allocatable, counting the overlay. Unknown (no policy) is no. */
function fits(node: NodeInfo, spec: Pick<SandboxSpec, 'resources'>, overlay: PlacementOverlay): boolean {
  if (!node.allocatable) return false;
  return loadWith(node, spec, overlay) <= 1;
}

/** Record a decision in the overlay. */
export function recordPlacement(overlay: PlacementOverlay, node: string, spec: Pick<SandboxSpec, 'resources'>): void {
  const placed = overlay.get(node);
  if (placed) {
    placed.cpu += spec.resources.cpu;
    placed.memoryMiB += spec.resources.memoryMiB;
    placed.sandboxes += 1;
  } else {
    overlay.set(node, { cpu: spec.resources.cpu, memoryMiB: spec.resources.memoryMiB, sandboxes: 1 });
  }
}

/** The least loaded of k distinct candidates drawn at random (all of them when there are k or fewer). */
function spreadOver(
  candidates: readonly NodeInfo[],
  spec: Pick<SandboxSpec, 'resources'>,
  overlay: PlacementOverlay,
  k: number,
  random: RandomSource,
): NodeInfo {
  const count = candidates.length;
  let best: NodeInfo | undefined;
  let bestLoad = Infinity;
  const consider = (node: NodeInfo) => {
    const load = loadWith(node, spec, overlay);
    if (best === undefined || load < bestLoad) {
      best = node;
      bestLoad = load;
    }
  };
  if (count <= k) {
    for (const node of candidates) consider(node);
    return best!;
  }
  // k is small (2 by default) next to the candidates: draw until k distinct.
  const drawn: number[] = [];
  while (drawn.length < k) {
    const index = Math.floor(random() * count);
    if (!drawn.includes(index)) {
      drawn.push(index);
      consider(candidates[index]);
    }
  }
  return best!;
}

/** The most loaded candidate the sandbox still fits on; ties go to the first by name, for stable packing. */
function packOnto(candidates: readonly NodeInfo[], spec: Pick<SandboxSpec, 'resources'>, overlay: PlacementOverlay): NodeInfo | undefined {
  let best: NodeInfo | undefined;
  let bestLoad = -1;
  for (const node of candidates) {
    if (!fits(node, spec, overlay)) continue;
    const load = loadWith(node, spec, overlay);
    if (load > bestLoad || (load === bestLoad && best !== undefined && node.name < best.name)) {
      best = node;
      bestLoad = load;
    }
  }
  return best;
}

/**
 * Choose the node for `spec` and record it in `overlay`; undefined when no
 * node is a candidate.
 */
export function placeOne(
  spec: Pick<SandboxSpec, 'backend' | 'placement' | 'resources'>,
  nodes: readonly NodeInfo[],
  overlay: PlacementOverlay,
  k: number,
  random: RandomSource = Math.random,
): string | undefined {
  const candidates = candidatesFor(spec, nodes);
  if (candidates.length === 0) return undefined;
  const chosen =
    (spec.placement?.strategy === 'pack' ? packOnto(candidates, spec, overlay) : undefined) ??
    spreadOver(candidates, spec, overlay, k, random);
  recordPlacement(overlay, chosen.name, spec);
  return chosen.name;
}
