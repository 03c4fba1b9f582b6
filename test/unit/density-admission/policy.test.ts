/**
 * density-admission's arithmetic, option checks and admission order, on
 * plain data and a hand-made node (pure logic: no agent, no sandbox).
 */
import { describe, expect, it } from 'vitest';
import { Dsec } from '../../../core/dsec.js';
import { DsecError } from '../../../core/errors.js';
import type { NodeContext, SandboxContext } from '../../../core/hooks.js';
import type { NodeInfo, SandboxStatus } from '../../../core/live.js';
import densityAdmission from '../../../plugins/density-admission/index.js';
import { parseOptions } from '../../../plugins/density-admission/options.js';
import { allocatable, refusal, requested } from '../../../plugins/density-admission/policy.js';

const policy = { overcommit: { cpu: 20, memory: 1 }, reserve: { cpu: 0, memoryMiB: 512 } };

function optionsError(options: unknown): DsecError {
  try {
    parseOptions(options);
  } catch (error) {
    if (error instanceof DsecError) return error;
    throw error;
  }
  throw new Error('expected DSEC_PLUGIN_OPTIONS');
}

/** A node holding sandboxes (id, status, cpu, MiB) in creation order. */
function fakeNode(capacity: { cpu: number; memoryMiB: number }, rows: [string, SandboxStatus, number, number][]) {
  const sandboxes: SandboxContext[] = [];
  const node: NodeContext = {
    name: 'n1',
    root: '/nonexistent',
    log: { info() {}, warn() {}, debug() {} },
    capacity,
    sandboxes: () => sandboxes,
  };
  for (const [id, status, cpu, memoryMiB] of rows) {
    sandboxes.push({
      spec: {
        id,
        backend: 'container',
        layers: [],
        env: {},
        workdir: '/',
        user: 'root',
        resources: { cpu, memoryMiB, pids: 64 },
        network: 'none',
        qos: 'best-effort',
        labels: {},
      },
      node,
      dir: `/nonexistent/${id}`,
      status,
      lowerDirs: [],
      storage: {},
      backend: {},
      density: {},
      traits: {},
      createdAt: new Date(0).toISOString(),
    });
  }
  return { node, sandboxes };
}

describe('density-admission policy arithmetic', () => {
  it('allocates (capacity - reserve) x ratio per resource, and never less than nothing', () => {
    expect(allocatable({ cpu: 2, memoryMiB: 24105 }, policy)).toEqual({ cpu: 40, memoryMiB: 23593 });
    const twice = { overcommit: { cpu: 1, memory: 2 }, reserve: { cpu: 0.5, memoryMiB: 1024 } };
    expect(allocatable({ cpu: 2, memoryMiB: 4096 }, twice)).toEqual({ cpu: 1.5, memoryMiB: 6144 });
    expect(allocatable({ cpu: 2, memoryMiB: 256 }, policy)).toEqual({ cpu: 40, memoryMiB: 0 });
  });

  it('sums the requests of creating, running and paused sandboxes only, without float noise', () => {
    const sum = requested([
      { status: 'creating', resources: { cpu: 0.1, memoryMiB: 64 } },
      { status: 'running', resources: { cpu: 0.2, memoryMiB: 64 } },
      { status: 'paused', resources: { cpu: 0.3, memoryMiB: 128 } },
      { status: 'failed', resources: { cpu: 8, memoryMiB: 9999 } },
      { status: 'stopped', resources: { cpu: 8, memoryMiB: 9999 } },
    ]);
    expect(sum).toEqual({ cpu: 0.6, memoryMiB: 256 });
  });

  it('admits a request that exactly fills what is left, and refuses one MiB more naming the figures and the policy', () => {
    const limit = { cpu: 40, memoryMiB: 23000 };
    expect(refusal({ cpu: 0.3, memoryMiB: 128 }, { cpu: 39.7, memoryMiB: 22872 }, limit, policy)).toBeUndefined();
    expect(refusal({ cpu: 0.5, memoryMiB: 256 }, { cpu: 1, memoryMiB: 22872 }, limit, policy)).toBe(
      'memory: 256 MiB requested, 128 MiB left of 23000 MiB allocatable (memory 1x, 512 MiB reserved)',
    );
  });

  it('names every resource that overflows, and says 0 left rather than a negative amount', () => {
    const reason = refusal({ cpu: 2, memoryMiB: 10 }, { cpu: 41, memoryMiB: 23000 }, { cpu: 40, memoryMiB: 23000 }, policy);
    expect(reason).toBe(
      'cpu: 2 CPU requested, 0 CPU left of 40 CPU allocatable (cpu 20x, 0 CPU reserved); ' +
        'memory: 10 MiB requested, 0 MiB left of 23000 MiB allocatable (memory 1x, 512 MiB reserved)',
    );
  });
});

describe('density-admission options', () => {
  it('defaults to cpu 20x, memory 1x and 512 MiB reserved, and fills partial options from the defaults', () => {
    expect(parseOptions(undefined)).toEqual({ enabled: true, policy });
    expect(parseOptions({ overcommit: { memory: 2 }, reserve: { cpu: 0.5 } })).toEqual({
      enabled: true,
      policy: { overcommit: { cpu: 20, memory: 2 }, reserve: { cpu: 0.5, memoryMiB: 512 } },
    });
  });

  it('refuses an overcommit ratio below 1 with DSEC_PLUGIN_OPTIONS naming the ratio and the value', () => {
    const error = optionsError({ overcommit: { memory: 0.5 } });
    expect(error.code).toBe('DSEC_PLUGIN_OPTIONS');
    expect(error.message).toMatch(/^plugin density-admission has invalid options: option overcommit\.memory must be at least 1, as an overcommit ratio \(requests up to memory capacity x ratio; .*\), got 0\.5$/);
  });

  it('refuses negative reserves and unknown keys, listing every problem at once', () => {
    const error = optionsError({ reserve: { memoryMiB: -1 }, overcomit: {}, overcommit: { gpu: 2 } });
    expect(error.code).toBe('DSEC_PLUGIN_OPTIONS');
    expect(error.message).toContain('unknown option overcomit (known: enabled, overcommit, reserve)');
    expect(error.message).toContain('unknown option overcommit.gpu (known in overcommit: cpu, memory)');
    expect(error.message).toContain('reserve.memoryMiB must not be negative, got -1');
  });

  it('refuses a ratio that is not a number', () => {
    expect(optionsError({ overcommit: { cpu: '20' } }).message).toContain('option overcommit.cpu must be a number');
  });

  it('refuses bad options when the plugin is made, as the loader reports them', () => {
    expect(() => densityAdmission({ overcommit: { cpu: 0 } })).toThrow(DsecError);
  });
});

describe('density-admission taps', () => {
  it('counts only the sandboxes created before the one it admits, so two racing creates never both take the last room', async () => {
    const dsec = new Dsec().use(densityAdmission({ reserve: { memoryMiB: 0 } }));
    // 1000 MiB: 600 held by a running sandbox, two creates of 300 racing for the last 400.
    const { sandboxes } = fakeNode({ cpu: 2, memoryMiB: 1000 }, [
      ['held', 'running', 0.5, 600],
      ['gone', 'failed', 0.5, 600],
      ['first', 'creating', 0.5, 300],
      ['second', 'creating', 0.5, 300],
    ]);
    const [, , first, second] = sandboxes;
    // The first is judged without the second, though the second is already listed.
    await expect(dsec.hooks.admit.promise(first)).resolves.toBeUndefined();
    await expect(dsec.hooks.admit.promise(second)).resolves.toBe(
      'memory: 300 MiB requested, 100 MiB left of 1000 MiB allocatable (memory 1x, 0 MiB reserved)',
    );
  });

  it('adds allocatable, requested and the policy to the node info', async () => {
    const dsec = new Dsec().use(densityAdmission({ overcommit: { cpu: 4 } }));
    const { node } = fakeNode({ cpu: 2, memoryMiB: 2048 }, [
      ['a', 'running', 0.25, 64],
      ['b', 'paused', 0.5, 128],
      ['c', 'stopped', 1, 256],
    ]);
    const base: NodeInfo = { name: 'n1', backends: ['container'], capacity: node.capacity, sandboxes: 3, agentVersion: 'x', pid: 1 };
    const info = await dsec.hooks.describeNode.promise(base, node);
    expect(info).toMatchObject({
      allocatable: { cpu: 8, memoryMiB: 1536 },
      requested: { cpu: 0.75, memoryMiB: 192 },
      policy: { overcommit: { cpu: 4, memory: 1 }, reserve: { cpu: 0, memoryMiB: 512 } },
    });
  });

  it('taps nothing when disabled, so everything is admitted and the node reports no policy', async () => {
    const dsec = new Dsec().use(densityAdmission({ enabled: false }));
    expect(dsec.hooks.admit.taps).toHaveLength(0);
    expect(dsec.hooks.describeNode.taps).toHaveLength(0);
  });
});
