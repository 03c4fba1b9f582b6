/**
 * The cluster provider's create loop and live view on plain data (pure
 * logic with fake node clients; the real thing runs in
 * test/integration/cluster): placement written before the node is asked, a
 * refusal sending the sandbox elsewhere with a notice, the bound on retries,
 * and sandboxes of gone or unhealthy nodes reported stopped.
 */
import { describe, expect, it } from 'vitest';
import type { AgentClient } from '../../../core/agent/client.js';
import type { Placement } from '../../../core/cluster/keys.js';
import { Dsec } from '../../../core/dsec.js';
import { DsecError, isDsecError } from '../../../core/errors.js';
import type { NodeInfo, SandboxInfo, SandboxSpec } from '../../../core/live.js';
import densityPlacement from '../../../plugins/density-placement/index.js';
import { createInCluster } from '../../../providers/cluster/create.js';
import type { ProbedNode } from '../../../providers/cluster/nodes.js';
import { commonLayers, sandboxesOf } from '../../../providers/cluster/view.js';

const spec: SandboxSpec = {
  id: 'web-abc',
  backend: 'container',
  layers: [],
  env: {},
  workdir: '/',
  user: 'root',
  resources: { cpu: 1, memoryMiB: 256, pids: 64 },
  network: 'none',
  qos: 'best-effort',
  labels: { 'dsec.io/fleet': 'web', team: 'a' },
};

function info(name: string): NodeInfo {
  return { name, backends: ['container'], capacity: { cpu: 4, memoryMiB: 4096 }, sandboxes: 0, agentVersion: 't', pid: 1, health: 'healthy', labels: {} };
}

/** A node whose agent refuses every create (admission) or accepts it. */
function fakeNode(name: string, refuses: boolean, log: string[]): ProbedNode {
  const client = {
    async createSandbox(s: SandboxSpec): Promise<SandboxInfo> {
      log.push(`create ${s.id} on ${name}`);
      if (refuses) throw new DsecError('DSEC_ADMISSION_REFUSED', { id: s.id, plugin: 'density-admission', reason: `${name} is full` });
      return { id: s.id, node: name, backend: s.backend, status: 'running', labels: s.labels, resources: s.resources, layers: [], createdAt: 'now' };
    },
    async destroySandbox(id: string) {
      log.push(`destroy ${id} on ${name}`);
      return { id, existed: true };
    },
  } as unknown as AgentClient;
  return { info: info(name), client };
}

function context(nodes: ProbedNode[], log: string[], notices: string[], maxRetries = 3) {
  const placements = new Map<string, Placement>();
  const dsec = new Dsec();
  dsec.use(densityPlacement());
  return {
    placements,
    context: {
      hooks: dsec.hooks,
      maxRetries,
      notice: (message: string) => notices.push(message),
      healthyNodes: async () => ({ infos: nodes.map((node) => node.info), byName: new Map(nodes.map((node) => [node.info.name, node])) }),
      readPlacement: async (id: string) => placements.get(id),
      writePlacement: async (placement: Placement) => {
        log.push(`placement ${placement.sandbox} -> ${placement.node}`);
        placements.set(placement.sandbox, placement);
      },
      deletePlacement: async (id: string) => {
        log.push(`unplace ${id}`);
        placements.delete(id);
      },
    },
  };
}

describe('creating a sandbox in the cluster', () => {
  it('writes the placement before asking the node, with the spec labels recorded', async () => {
    const log: string[] = [];
    const { context: ctx, placements } = context([fakeNode('a', false, log)], log, []);
    const created = await createInCluster(spec, ctx);
    expect(created.node).toBe('a');
    expect(log).toEqual(['placement web-abc -> a', 'create web-abc on a']);
    expect(placements.get('web-abc')).toMatchObject({ node: 'a', fleet: 'web', labels: spec.labels, backend: 'container' });
  });

  it('sends a refused sandbox to another node, drops the refusing node’s failed record, and says so', async () => {
    const log: string[] = [];
    const notices: string[] = [];
    const { context: ctx, placements } = context([fakeNode('full', true, log), fakeNode('roomy', false, log)], log, notices);
    // Whatever the sampling, the sandbox ends on roomy; when full was asked first, the notice says so.
    const created = await createInCluster(spec, ctx);
    expect(created.node).toBe('roomy');
    expect(placements.get('web-abc')?.node).toBe('roomy');
    if (log.includes('create web-abc on full')) {
      expect(log).toContain('destroy web-abc on full');
      expect(notices).toEqual(['sandbox web-abc: node full refused (full is full); placed on roomy']);
    }
  });

  it('fails with DSEC_PLACEMENT_FAILED listing the refusals when every node refuses, and leaves no placement', async () => {
    const log: string[] = [];
    const { context: ctx, placements } = context([fakeNode('a', true, log), fakeNode('b', true, log)], log, []);
    const error = await createInCluster(spec, ctx).catch((caught: unknown) => caught);
    expect(isDsecError(error, 'DSEC_PLACEMENT_FAILED')).toBe(true);
    expect((error as Error).message).toMatch(/refused by a \(a is full\), b \(b is full\)|refused by b \(b is full\), a \(a is full\)/);
    expect(placements.size).toBe(0);
  });

  it('stops after maxRetries placements', async () => {
    const log: string[] = [];
    const nodes = ['a', 'b', 'c', 'd', 'e'].map((name) => fakeNode(name, true, log));
    const { context: ctx } = context(nodes, log, [], 2);
    const error = await createInCluster(spec, ctx).catch((caught: unknown) => caught);
    expect(isDsecError(error, 'DSEC_PLACEMENT_FAILED')).toBe(true);
    expect(log.filter((line) => line.startsWith('create'))).toHaveLength(3);
    expect((error as Error).message).toContain('(2 retries)');
  });

  it('names the backend and selector when no node qualifies', async () => {
    const { context: ctx } = context([], [], []);
    const error = await createInCluster({ ...spec, placement: { strategy: 'spread', nodeSelector: { gpu: 'true' } } }, ctx).catch((caught: unknown) => caught);
    expect((error as Error).message).toBe('no node can take sandbox web-abc: no healthy node is registered');
  });
});

describe('the cluster live view', () => {
  const placed = (sandbox: string, node: string): Placement => ({ sandbox, node, at: 't0', labels: { 'dsec.io/fleet': 'web' }, backend: 'container', resources: spec.resources });

  it('reports a placed sandbox whose node is gone, unhealthy, or healthy without it as stopped with the reason and its recorded labels', () => {
    const running: SandboxInfo = { id: 's1', node: 'a', backend: 'container', status: 'running', labels: {}, resources: spec.resources, layers: [], createdAt: 't' };
    const healthy: ProbedNode = { info: info('a'), client: {} as AgentClient, sandboxes: [running] };
    const sick: ProbedNode = { info: { ...info('b'), health: 'unhealthy', healthReason: 'no answer within 5000 ms' } };
    const placements = new Map([
      ['s1', placed('s1', 'a')],
      ['s2', placed('s2', 'b')],
      ['s3', placed('s3', 'gone')],
      ['s4', placed('s4', 'a')],
    ]);
    const view = sandboxesOf([healthy, sick], placements);
    expect(view.map((s) => [s.id, s.status, s.error ?? ''])).toEqual([
      ['s1', 'running', ''],
      ['s2', 'stopped', 'node b is unhealthy: no answer within 5000 ms'],
      ['s3', 'stopped', 'node gone is gone (its lease lapsed)'],
      // A create that never reached its node: drift, so apply deletes its placement.
      ['s4', 'stopped', 'node a does not have it (its create never reached the node)'],
    ]);
    expect(view[2].labels).toEqual({ 'dsec.io/fleet': 'web' });
  });

  it("keeps a claim recorded in a lost sandbox's placement, so the plan leaves it for its job", () => {
    const claim = { holder: 'job-7', claimedAt: 't1' };
    const view = sandboxesOf([], new Map([['s1', { ...placed('s1', 'gone'), claim }]]));
    expect(view).toMatchObject([{ id: 's1', status: 'stopped', claim }]);
  });

  it('reports a sandbox a node runs without any placement (given up with its node, which came back) as stopped', () => {
    const orphan: SandboxInfo = { id: 's9', node: 'a', backend: 'container', status: 'running', labels: { 'dsec.io/fleet': 'web' }, resources: spec.resources, layers: [], createdAt: 't' };
    const a: ProbedNode = { info: info('a'), client: {} as AgentClient, sandboxes: [orphan] };
    expect(sandboxesOf([a], new Map()).map((s) => [s.id, s.status, s.error])).toEqual([
      ['s9', 'stopped', 'node a runs it but etcd holds no placement for it (given up with its node, and replaced)'],
    ]);
  });

  it('ignores a failed copy of a sandbox left on a node that refused it', () => {
    const copy = (node: string, status: SandboxInfo['status']): SandboxInfo => ({ id: 's1', node, backend: 'container', status, labels: {}, resources: spec.resources, layers: [], createdAt: 't' });
    const a: ProbedNode = { info: info('a'), client: {} as AgentClient, sandboxes: [copy('a', 'failed')] };
    const b: ProbedNode = { info: info('b'), client: {} as AgentClient, sandboxes: [copy('b', 'running')] };
    expect(sandboxesOf([a, b], new Map([['s1', placed('s1', 'b')]]))).toEqual([copy('b', 'running')]);
  });

  it('counts a layer as published only when every healthy node holds it', () => {
    const layer = (name: string, digest: string) => ({ name, version: '1.0.0', kind: 'base' as const, digest, sizeBytes: 1, files: 1, publishedAt: 't' });
    expect(commonLayers([[layer('base', 'x'), layer('tools', 'y')], [layer('base', 'x'), layer('tools', 'z')]]).map((l) => l.name)).toEqual(['base']);
  });
});
