/**
 * The CLI's density views, pure: the batch target of `sandbox pause|resume`,
 * their per-sandbox lines, the flags they parse, and `dsec nodes`' layout.
 */
import { describe, expect, it } from 'vitest';
import { batchFailed, outcomeLines, reclaimOf } from '../../../core/cli/batch-outcomes.js';
import { parseDuration, parseKeyValues } from '../../../core/cli/command.js';
import { batchTarget } from '../../../core/cli/commands/sandbox-density.js';
import { renderNodeUsage, sandboxCounts } from '../../../core/cli/node-usage.js';
import { colors } from '../../../core/cli/output.js';
import { isDsecError } from '../../../core/errors.js';
import type { BatchOutcome, NodeUsage, SandboxInfo } from '../../../core/live.js';

const plain = colors(false);

const info = (id: string, status: SandboxInfo['status'], extra: Record<string, unknown> = {}): SandboxInfo =>
  ({
    id,
    node: 'x',
    backend: 'container',
    status,
    labels: {},
    resources: { cpu: 1, memoryMiB: 256, pids: 256 },
    layers: [],
    createdAt: '2025-01-01T00:00:00.000Z',
    ...extra,
  }) as SandboxInfo;

const usage = (overrides: Partial<NodeUsage> = {}): NodeUsage => ({
  node: 'x',
  capacity: { cpu: 2, memoryMiB: 3328 },
  allocatable: { cpu: 40, memoryMiB: 6144 },
  sandboxes: { container: { running: 3, paused: 1 } },
  requested: { cpu: 1, memoryMiB: 1024 },
  used: { cpu: 0.034, memoryMiB: 301.4 },
  host: { memoryMiB: 3328, availableMiB: 2000 },
  memory: {
    sharedMiB: 120,
    reclaimedMiB: 80,
    swap: { device: '/dev/zram0', totalMiB: 512, usedMiB: 20, compressedMiB: 5 },
    ksm: { running: true, pagesToScan: 400, sleepMillisecs: 20, mergeableSandboxes: 4 },
  },
  qos: { coreScheduling: 'unavailable: no SMT on this CPU', idleCpu: 'SCHED_IDLE + cpu.idle' },
  fleets: [
    {
      fleet: 'web',
      sandboxes: 4,
      requested: { cpu: 1, memoryMiB: 1024 },
      used: { cpu: 0.034, memoryMiB: 301.4 },
      sharedMiB: 120,
      reclaimedMiB: 80,
    },
  ],
  ...overrides,
});

describe('batchTarget', () => {
  it('takes ids, labels or both', () => {
    expect(batchTarget(['a', 'b'], undefined, 'pause')).toEqual({ ids: ['a', 'b'] });
    expect(batchTarget([], ['job=r17', 'team=rl'], 'pause')).toEqual({ labels: { job: 'r17', team: 'rl' } });
    expect(batchTarget(['a'], ['job=r17'], 'resume')).toEqual({ ids: ['a'], labels: { job: 'r17' } });
  });

  it('refuses neither ids nor labels as a usage error, rather than acting on nothing or everything', () => {
    let caught: unknown;
    try {
      batchTarget([], undefined, 'pause');
    } catch (error) {
      caught = error;
    }
    expect(isDsecError(caught, 'DSEC_USAGE')).toBe(true);
    expect((caught as Error).message).toBe('dsec sandbox pause: name the sandboxes: one or more ids, or --label key=value (repeatable)');
  });

  it('refuses a label without "=" as a usage error naming the flag', () => {
    expect(() => parseKeyValues(['job'], '--label')).toThrow("--label expects key=value, got 'job'");
    expect(parseKeyValues(['k=v=w'], '--env')).toEqual({ k: 'v=w' });
    expect(parseKeyValues([], '--env')).toBeUndefined();
  });
});

describe('parseDuration', () => {
  it('reads the durations the config takes', () => {
    expect(parseDuration('90s')).toBe(90);
    expect(parseDuration('30m')).toBe(1800);
    expect(parseDuration('2h')).toBe(7200);
    expect(parseDuration('1d')).toBe(86400);
    expect(parseDuration('45')).toBe(45);
  });

  it('refuses anything else with the forms it takes', () => {
    expect(() => parseDuration('30x')).toThrow(/expected a duration like 90s, 30m, 2h, 1d or a number of seconds, got '30x'/);
    expect(() => parseDuration('0')).toThrow(/expected a duration/);
  });
});

describe('outcomeLines', () => {
  it('prints one line per sandbox: id, outcome, and the reclaimed memory when the info carries it', () => {
    const outcomes: BatchOutcome[] = [
      {
        id: 'web-1',
        ok: true,
        info: info('web-1', 'paused', {
          density: { 'density-reclaim': { reclaim: { beforeMiB: 250, afterMiB: 130, swappedMiB: 100 } } },
        }),
      },
      { id: 'web-22', ok: true, info: info('web-22', 'paused') },
      { id: 'web-3', ok: false, error: { code: 'DSEC_SANDBOX_BUSY', message: 'sandbox web-3 is running an exec' } },
    ];
    expect(outcomeLines(outcomes, 'pause', plain)).toEqual([
      'web-1   paused  reclaimed 120 MiB (250 MiB -> 130 MiB resident, 100 MiB to swap)',
      'web-22  paused',
      'web-3   failed  sandbox web-3 is running an exec [DSEC_SANDBOX_BUSY]',
    ]);
    expect(batchFailed(outcomes)).toBe(true);
    expect(batchFailed(outcomes.slice(0, 2))).toBe(false);
  });

  it('never shows a reclaim for a resume', () => {
    const resumed: BatchOutcome = {
      id: 'web-1',
      ok: true,
      info: info('web-1', 'running', { density: { 'density-reclaim': { reclaim: { beforeMiB: 250, afterMiB: 130 } } } }),
    };
    expect(outcomeLines([resumed], 'resume', plain)).toEqual(['web-1  running']);
  });

  it('reads no reclaim from an info without well-formed figures', () => {
    expect(reclaimOf(info('a', 'paused'))).toBeUndefined();
    expect(reclaimOf(info('a', 'paused', { density: { 'density-reclaim': { reclaim: { beforeMiB: '1' } } } }))).toBeUndefined();
  });
});

describe('renderNodeUsage', () => {
  it('shows sandboxes by backend and state, requested vs allocatable vs used, shared, reclaimed, swap, QoS and the fleets', () => {
    const text = renderNodeUsage([usage()], plain);
    expect(text).toBe(
      [
        'Node x',
        '  sandboxes  container: 3 running, 1 paused',
        '  cpu        1 CPU requested of 40 CPU allocatable, 0.03 CPU used; capacity 2 CPU',
        '  memory     1024 MiB requested of 6144 MiB allocatable, 301 MiB used; capacity 3328 MiB; host 2000 MiB available of 3328 MiB',
        '  shared     120 MiB (KSM running: 4 mergeable sandbox(es), 400 pages every 20 ms)',
        '  reclaimed  80 MiB',
        '  swap       /dev/zram0: 20 MiB used of 512 MiB, 5 MiB compressed',
        '  qos        core scheduling: unavailable: no SMT on this CPU; idle CPU: SCHED_IDLE + cpu.idle',
        '',
        '  FLEET  SANDBOXES  CPU REQ  CPU USED  MEM REQ   MEM USED  SHARED   RECLAIMED',
        '  web    4          1        0.03      1024 MiB  301 MiB   120 MiB  80 MiB',
        '',
      ].join('\n'),
    );
  });

  it('says what a node without the density plugins does not report', () => {
    const { allocatable: _a, ...bare } = usage({ memory: {}, qos: {}, fleets: [], sandboxes: {} });
    const text = renderNodeUsage([bare], plain);
    expect(text).toContain('  sandboxes  none\n');
    expect(text).toContain('1 CPU requested (no admission policy), 0.03 CPU used');
    expect(text).toContain('  shared     - (no memory sharing plugin)\n');
    expect(text).toContain('  reclaimed  - (no reclaim plugin)\n');
    expect(text).toContain('  swap       none\n');
    expect(text).toContain('  qos        core scheduling: not reported; idle CPU: not reported\n');
    expect(text).toContain('  No fleet sandboxes.');
  });

  it('lists backends in order and states running first, failed last', () => {
    expect(sandboxCounts({ microvm: { failed: 1 }, container: { failed: 2, creating: 1, running: 5 } }, plain)).toBe(
      'container: 5 running, 1 creating, 2 failed; microvm: 1 failed',
    );
  });

  it('prints "No nodes." for an empty report', () => {
    expect(renderNodeUsage([], plain)).toBe('No nodes.\n');
  });
});
