/**
 * density-placement's decision on plain NodeInfo (pure logic: no etcd, no
 * agent): the candidate filters, power of k choices with a seeded random,
 * the overlay that keeps a burst from herding, pack, and the plugin's tap.
 */
import { describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { DsecError } from '../../../core/errors.js';
import type { NodeInfo, PlacementSettings, SandboxSpec } from '../../../core/live.js';
import densityPlacement, { placeOne, type PlacementOverlay } from '../../../plugins/density-placement/index.js';
import { parseOptions } from '../../../plugins/density-placement/options.js';

/** A deterministic random source (mulberry32). */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function node(name: string, extra: Partial<NodeInfo> = {}): NodeInfo {
  return {
    name,
    backends: ['container'],
    capacity: { cpu: 8, memoryMiB: 16384 },
    sandboxes: 0,
    agentVersion: 'test',
    pid: 1,
    allocatable: { cpu: 160, memoryMiB: 16384 },
    requested: { cpu: 0, memoryMiB: 0 },
    health: 'healthy',
    labels: {},
    ...extra,
  };
}

function spec(placement?: PlacementSettings, resources = { cpu: 1, memoryMiB: 256, pids: 64 }): Pick<SandboxSpec, 'backend' | 'placement' | 'resources'> {
  return { backend: 'container', resources, ...(placement ? { placement } : {}) };
}

describe('placeOne', () => {
  it('never places on an unhealthy node, a node without the backend, or one missing a selector label', () => {
    const nodes = [
      node('sick', { health: 'unhealthy', healthReason: 'lease lapsed' }),
      node('vm-only', { backends: ['microvm'] }),
      node('cpu', { labels: { zone: 'a' } }),
      node('gpu', { labels: { zone: 'a', gpu: 'true' } }),
    ];
    const overlay: PlacementOverlay = new Map();
    const random = seeded(1);
    for (let i = 0; i < 50; i += 1) {
      expect(placeOne(spec({ strategy: 'spread', nodeSelector: { gpu: 'true' } }), nodes, overlay, 2, random)).toBe('gpu');
      expect(['cpu', 'gpu']).toContain(placeOne(spec(), nodes, overlay, 2, random));
    }
  });

  it('answers nothing when no node qualifies', () => {
    const nodes = [node('a', { backends: ['microvm'] }), node('b', { health: 'unhealthy' })];
    expect(placeOne(spec(), nodes, new Map(), 2, seeded(2))).toBeUndefined();
    expect(placeOne(spec({ strategy: 'spread', nodeSelector: { gpu: 'true' } }), [node('c')], new Map(), 2, seeded(2))).toBeUndefined();
  });

  it('takes the less loaded of the two nodes it samples, and only sampled nodes', () => {
    const nodes = [
      node('n0', { requested: { cpu: 10, memoryMiB: 8000 } }),
      node('n1', { requested: { cpu: 10, memoryMiB: 1000 } }),
      node('n2', { requested: { cpu: 0, memoryMiB: 0 } }),
    ];
    // The first draw picks index 0, the second index 1: n2, though emptiest, is not sampled.
    const draws = [0.1, 0.5];
    const random = () => draws.shift()!;
    expect(placeOne(spec(), nodes, new Map(), 2, random)).toBe('n1');
  });

  it('uses the larger of the CPU and memory ratios as the load', () => {
    const nodes = [
      node('cpu-heavy', { requested: { cpu: 150, memoryMiB: 0 } }),
      node('memory-light', { requested: { cpu: 0, memoryMiB: 8192 } }),
    ];
    expect(placeOne(spec(), nodes, new Map(), 2, seeded(3))).toBe('memory-light');
  });

  it('counts sandboxes on nodes without an admission policy', () => {
    const nodes = [node('busy', { allocatable: undefined, sandboxes: 40 }), node('idle', { allocatable: undefined, sandboxes: 3 })];
    expect(placeOne(spec(), nodes, new Map(), 2, seeded(4))).toBe('idle');
  });

  it('spreads a burst evenly thanks to the overlay, where stale loads alone herd it onto one node', () => {
    const nodes = Array.from({ length: 10 }, (_, i) => node(`n${i}`, { requested: { cpu: 0, memoryMiB: i === 7 ? 0 : 1024 } }));
    const counts = (overlay: PlacementOverlay) => nodes.map((n) => overlay.get(n.name)?.sandboxes ?? 0);

    const overlay: PlacementOverlay = new Map();
    const random = seeded(5);
    for (let i = 0; i < 1000; i += 1) placeOne(spec(), nodes, overlay, 2, random);
    // n7 catches up its 4 sandboxes' worth of room, then all grow together.
    const memory = nodes.map((n) => n.requested!.memoryMiB + (overlay.get(n.name)?.memoryMiB ?? 0));
    expect(Math.max(...memory) - Math.min(...memory)).toBeLessThanOrEqual(3 * 256);
    expect(counts(overlay).reduce((a, b) => a + b, 0)).toBe(1000);

    // Without the overlay (a fresh one per decision), every sandbox sees the same
    // stale loads, and the one emptier node wins every time it is sampled.
    const herded = new Map<string, number>();
    const random2 = seeded(5);
    for (let i = 0; i < 1000; i += 1) {
      const chosen = placeOne(spec(), nodes, new Map(), 2, random2)!;
      herded.set(chosen, (herded.get(chosen) ?? 0) + 1);
    }
    expect(herded.get('n7')).toBeGreaterThan(150);
  });

  it('packs onto the most loaded node the sandbox still fits on, then the next', () => {
    const nodes = [
      node('a', { allocatable: { cpu: 4, memoryMiB: 1024 }, requested: { cpu: 2, memoryMiB: 512 } }),
      node('b', { allocatable: { cpu: 4, memoryMiB: 1024 }, requested: { cpu: 3, memoryMiB: 768 } }),
      node('c', { allocatable: { cpu: 4, memoryMiB: 1024 }, requested: { cpu: 0, memoryMiB: 0 } }),
    ];
    const pack = spec({ strategy: 'pack', nodeSelector: {} });
    const overlay: PlacementOverlay = new Map();
    const order = Array.from({ length: 7 }, () => placeOne(pack, nodes, overlay, 2, seeded(6)));
    // b has room for one more, a for two, c for four.
    expect(order).toEqual(['b', 'a', 'a', 'c', 'c', 'c', 'c']);
  });

  it('spreads when pack finds no node the sandbox fits on', () => {
    const nodes = [
      node('a', { allocatable: { cpu: 1, memoryMiB: 256 }, requested: { cpu: 1, memoryMiB: 256 } }),
      node('b', { allocatable: { cpu: 1, memoryMiB: 256 }, requested: { cpu: 1, memoryMiB: 256 } }),
    ];
    expect(['a', 'b']).toContain(placeOne(spec({ strategy: 'pack', nodeSelector: {} }), nodes, new Map(), 2, seeded(7)));
  });
});

describe('the density-placement plugin', () => {
  it('answers the place hook, keeping one overlay per nodes array', async () => {
    const dsec = new Dsec();
    dsec.use(densityPlacement({ k: 2 }));
    const nodes = [node('a'), node('b')];
    const chosen: string[] = [];
    for (let i = 0; i < 20; i += 1) {
      chosen.push((await dsec.hooks.place.promise({ ...spec(), id: `s${i}` } as SandboxSpec, nodes))!);
    }
    // With k = number of nodes, each decision sees both, and the overlay alternates them.
    expect(chosen.filter((name) => name === 'a')).toHaveLength(10);
    expect(await dsec.hooks.place.promise({ ...spec(), backend: 'microvm', id: 'x' } as SandboxSpec, nodes)).toBeUndefined();
  });

  it('taps nothing when disabled, and refuses bad options with DSEC_PLUGIN_OPTIONS', async () => {
    const dsec = new Dsec();
    dsec.use(densityPlacement({ enabled: false }));
    expect(await dsec.hooks.place.promise({ ...spec(), id: 'x' } as SandboxSpec, [node('a')])).toBeUndefined();
    let error: unknown;
    try {
      parseOptions({ k: 0, spred: true });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(DsecError);
    expect((error as DsecError).code).toBe('DSEC_PLUGIN_OPTIONS');
    expect((error as DsecError).message).toMatch(/k must be a whole number from 1 to 64/);
    expect((error as DsecError).message).toMatch(/spred/);
  });
});
