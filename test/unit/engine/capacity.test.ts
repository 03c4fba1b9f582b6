/**
 * The plan's capacity warning: what the plan creates, minus what it deletes
 * and replaces, against what the nodes admit under their overcommit policy.
 */
import { describe, expect, it } from 'vitest';
import { capacityShortfalls, capacityWarnings } from '../../../core/engine/capacity.js';
import type { LiveView, NodeInfo, SandboxInfo } from '../../../core/live.js';
import type { ResourceChange, SandboxOperation } from '../../../core/plan.js';
import type { Resources } from '../../../core/model.js';
import { FakeProvider } from './fake-provider.js';
import { converge, liveSandbox, planWith, project } from './fixtures.js';

const SMALL: Resources = { cpu: 0.25, memoryMiB: 256, pids: 64 };

function node(overrides: Partial<NodeInfo> = {}): NodeInfo {
  return {
    name: 'x',
    backends: ['container'],
    capacity: { cpu: 2, memoryMiB: 3328 },
    sandboxes: 0,
    agentVersion: 'test',
    pid: 1,
    allocatable: { cpu: 40, memoryMiB: 6144 },
    requested: { cpu: 0, memoryMiB: 0 },
    policy: { overcommit: { cpu: 20, memory: 2 }, reserve: { cpu: 0, memoryMiB: 512 } },
    ...overrides,
  };
}

const spec = (id: string, resources: Resources = SMALL) => ({
  id,
  backend: 'container',
  layers: [],
  env: {},
  workdir: '/',
  user: 'root',
  resources,
  network: 'none' as const,
  qos: 'best-effort' as const,
  labels: {},
});

function fleetChange(name: string, operations: SandboxOperation[]): ResourceChange {
  return {
    address: `fleet.${name}`,
    type: 'fleet',
    name,
    action: 'update',
    reason: null,
    before: null,
    after: null,
    replacePaths: [],
    fleet: {
      summary: { desired: 0, live: 0, create: 0, delete: 0, replace: 0, update: 0, unchanged: 0 },
      maxUnavailable: 1,
      operations,
    },
  };
}

const creates = (fleet: string, count: number, resources: Resources = SMALL): SandboxOperation[] =>
  Array.from({ length: count }, (_, i) => ({ op: 'create' as const, spec: spec(`${fleet}-${i}`, resources) }));

const view = (nodes: NodeInfo[], sandboxes: SandboxInfo[] = []): LiveView => ({ nodes, layers: [], sandboxes });

const running = (id: string, resources: Resources = SMALL, status: SandboxInfo['status'] = 'running'): SandboxInfo =>
  liveSandbox(id, 'swe', 'hash', { node: 'x', resources, status });

describe('capacityWarnings', () => {
  it('says nothing when the new sandboxes fit under the policy', () => {
    expect(capacityWarnings([fleetChange('swe', creates('swe', 24))], view([node()]))).toEqual([]);
  });

  it('says which fleet, how many sandboxes, and by how much memory it is short, with the policy', () => {
    const warnings = capacityWarnings([fleetChange('swe', creates('swe', 40))], view([node()]));
    expect(warnings).toEqual([
      'fleet "swe": 40 new sandboxes request 10240 MiB of memory; node "x" has 6144 MiB left under its policy (memory 2x, 512 MiB reserved): 4096 MiB (16 sandboxes) short',
    ]);
  });

  it('reports CPU short on its own when memory fits', () => {
    const heavy: Resources = { cpu: 4, memoryMiB: 64, pids: 64 };
    const shortfalls = capacityShortfalls([fleetChange('train', creates('train', 12, heavy))], view([node()]));
    expect(shortfalls).toEqual([
      { fleet: 'train', resource: 'cpu', sandboxes: 12, requested: 48, left: 40, short: 8, shortSandboxes: 2 },
    ]);
    expect(capacityWarnings([fleetChange('train', creates('train', 12, heavy))], view([node()]))[0]).toBe(
      'fleet "train": 12 new sandboxes request 48 CPU; node "x" has 40 CPU left under its policy (cpu 20x, 0 CPU reserved): 8 CPU (2 sandboxes) short',
    );
  });

  it('reports both resources when both are short', () => {
    const big: Resources = { cpu: 8, memoryMiB: 1024, pids: 64 };
    const shortfalls = capacityShortfalls([fleetChange('big', creates('big', 7, big))], view([node()]));
    expect(shortfalls.map((item) => [item.resource, item.short, item.shortSandboxes])).toEqual([
      ['cpu', 16, 2],
      ['memory', 1024, 1],
    ]);
  });

  it('warns about nothing when a node has no admission policy (it admits anything)', () => {
    const { allocatable: _a, requested: _r, policy: _p, ...open } = node();
    expect(capacityWarnings([fleetChange('swe', creates('swe', 1000))], view([open]))).toEqual([]);
    expect(capacityWarnings([fleetChange('swe', creates('swe', 1000))], view([node(), { ...open, name: 'y' }]))).toEqual([]);
    expect(capacityWarnings([fleetChange('swe', creates('swe', 1000))], view([]))).toEqual([]);
  });

  it('counts what is already requested on the node', () => {
    const busy = node({ requested: { cpu: 10, memoryMiB: 5888 } });
    expect(capacityWarnings([fleetChange('swe', creates('swe', 1))], view([busy]))).toEqual([]);
    expect(capacityShortfalls([fleetChange('swe', creates('swe', 2))], view([busy]))).toMatchObject([
      { resource: 'memory', left: 256, short: 256, shortSandboxes: 1 },
    ]);
  });

  it('reports 0 left, not a negative amount, on a node already over its policy', () => {
    const over = node({ requested: { cpu: 0, memoryMiB: 7000 } });
    expect(capacityShortfalls([fleetChange('swe', creates('swe', 2))], view([over]))).toMatchObject([
      { resource: 'memory', left: 0, short: 512, shortSandboxes: 2 },
    ]);
  });

  it('frees what the plan deletes before counting what it creates', () => {
    const full = node({ requested: { cpu: 1, memoryMiB: 6144 } });
    const live = [running('old-1'), running('old-2')];
    const changes = [
      fleetChange('old', [
        { op: 'delete', id: 'old-1' },
        { op: 'delete', id: 'old-2' },
      ]),
      fleetChange('swe', creates('swe', 2)),
    ];
    expect(capacityWarnings(changes, view([full], live))).toEqual([]);
    expect(capacityShortfalls([...changes, fleetChange('more', creates('more', 1))], view([full], live))).toMatchObject([
      { fleet: 'more', resource: 'memory', left: 0, short: 256 },
    ]);
  });

  it('counts a replace both ways: the old sandbox frees its request, the new one asks for its own', () => {
    const full = node({ requested: { cpu: 1, memoryMiB: 6144 } });
    const bigger: Resources = { cpu: 0.25, memoryMiB: 512, pids: 64 };
    const live = [running('swe-a'), running('swe-b')];
    const replace = (id: string, resources: Resources): SandboxOperation => ({
      op: 'replace',
      id,
      spec: spec(`${id}-new`, resources),
      because: 'environment changed',
    });
    expect(capacityWarnings([fleetChange('swe', [replace('swe-a', SMALL), replace('swe-b', SMALL)])], view([full], live))).toEqual([]);
    expect(
      capacityShortfalls([fleetChange('swe', [replace('swe-a', bigger), replace('swe-b', bigger)])], view([full], live)),
    ).toMatchObject([{ resource: 'memory', sandboxes: 2, requested: 1024, left: 512, short: 512, shortSandboxes: 1 }]);
  });

  it('frees nothing for a failed or stopped sandbox, which the node no longer counts', () => {
    const full = node({ requested: { cpu: 0, memoryMiB: 6144 } });
    const live = [running('old-1', SMALL, 'failed')];
    const changes = [fleetChange('old', [{ op: 'delete', id: 'old-1' }]), fleetChange('swe', creates('swe', 1))];
    expect(capacityShortfalls(changes, view([full], live))).toMatchObject([{ fleet: 'swe', resource: 'memory', short: 256 }]);
  });

  it('lets earlier fleets use the room first, so a later fleet is the one short', () => {
    const shortfalls = capacityShortfalls(
      [fleetChange('a', creates('a', 20)), fleetChange('b', creates('b', 8))],
      view([node()]),
    );
    expect(shortfalls).toEqual([
      { fleet: 'b', resource: 'memory', sandboxes: 8, requested: 2048, left: 1024, short: 1024, shortSandboxes: 4 },
    ]);
  });

  it('pools several nodes and names each with its policy', () => {
    const warnings = capacityWarnings(
      [fleetChange('swe', creates('swe', 50))],
      view([node(), node({ name: 'y', allocatable: { cpu: 40, memoryMiB: 4096 } })]),
    );
    expect(warnings).toEqual([
      'fleet "swe": 50 new sandboxes request 12800 MiB of memory; nodes "x" (memory 2x, 512 MiB reserved), "y" (memory 2x, 512 MiB reserved) have 10240 MiB left under their policies: 2560 MiB (10 sandboxes) short',
    ]);
  });

  it('adds fractional cores without rounding noise', () => {
    const tenth: Resources = { cpu: 0.1, memoryMiB: 16, pids: 16 };
    const tight = node({ allocatable: { cpu: 0.3, memoryMiB: 6144 } });
    expect(capacityWarnings([fleetChange('f', creates('f', 3, tenth))], view([tight]))).toEqual([]);
  });
});

describe('the plan', () => {
  it('carries the capacity warning, in its JSON too, when the node runs an admission policy', async () => {
    const provider = new FakeProvider();
    provider.nodeExtras = {
      allocatable: { cpu: 40, memoryMiB: 768 },
      requested: { cpu: 0, memoryMiB: 0 },
      policy: { overcommit: { cpu: 20, memory: 1 }, reserve: { cpu: 0, memoryMiB: 512 } },
    };
    const plan = await planWith(project({ replicas: 4 }), provider, (await converge(project({ replicas: 0 }), provider)).state);
    expect(plan.warnings).toEqual([
      'fleet "web": 4 new sandboxes request 1024 MiB of memory; node "node-1" has 768 MiB left under its policy (memory 1x, 512 MiB reserved): 256 MiB (1 sandbox) short',
    ]);
  });
});
