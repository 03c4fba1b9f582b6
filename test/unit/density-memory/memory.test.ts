import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Dsec, isDsecError, type Logger, type NodeContext, type SandboxContext, type SandboxSpec } from '../../../core/plugin-api.js';
import densityMemory, { mergeableSandboxes, parseKsmStat, readHold, retuneKsm, scanRate } from '../../../plugins/density-memory/index.js';

const options = { maxPagesToScan: 5000, sleepMillisecs: 20 };

function collectingLog(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return { lines, info: (m) => lines.push(`info ${m}`), warn: (m) => lines.push(`warn ${m}`), debug: () => {} };
}

describe('the scan rate', () => {
  it('scans 100 pages per mergeable sandbox, at least 100 and at most the cap', () => {
    expect(scanRate(0)).toBe(100);
    expect(scanRate(1)).toBe(100);
    expect(scanRate(7)).toBe(700);
    expect(scanRate(50)).toBe(5000);
    expect(scanRate(500)).toBe(5000);
    expect(scanRate(500, 20_000)).toBe(20_000);
    expect(scanRate(30, 1000)).toBe(1000);
  });
});

describe('options', () => {
  it('refuses an unknown option with DSEC_PLUGIN_OPTIONS naming the known ones', () => {
    try {
      densityMemory({ maxPages: 10 } as never);
      expect.unreachable();
    } catch (error) {
      expect(isDsecError(error) && error.code).toBe('DSEC_PLUGIN_OPTIONS');
      expect((error as Error).message).toBe(
        'plugin density-memory has invalid options: unknown option maxPages (known: enabled, maxPagesToScan, sleepMillisecs)',
      );
    }
  });

  it('refuses a scan cap below one sandbox\'s share and a fractional sleep, both in one message', () => {
    expect(() => densityMemory({ maxPagesToScan: 10, sleepMillisecs: 2.5 })).toThrow(
      'plugin density-memory has invalid options: option maxPagesToScan must be at least 100, got 10; option sleepMillisecs must be an integer, got 2.5',
    );
  });

  it('takes no taps at all when disabled', () => {
    const dsec = new Dsec().use(densityMemory({ enabled: false }));
    expect(dsec.hooks.prepare.taps).toHaveLength(0);
    expect(dsec.hooks.nodeUsage.taps).toHaveLength(0);
  });
});

describe('the prepare tap', () => {
  it('sets the memoryMerge trait only for a sandbox whose fleet asks for memory sharing', async () => {
    const dsec = new Dsec().use(densityMemory());
    const sharing = fakeSandbox('a', { memorySharing: true, reclaimOnPause: true });
    const plain = fakeSandbox('b', undefined);
    await dsec.hooks.prepare.promise(sharing);
    await dsec.hooks.prepare.promise(plain);
    expect(sharing.traits).toEqual({ memoryMerge: true });
    expect(plain.traits).toEqual({});
  });
});

describe('mergeable sandboxes', () => {
  it('counts running and paused sandboxes with the trait, without the ones being destroyed', () => {
    const sandboxes = [
      { ...fakeSandbox('a', undefined), traits: { memoryMerge: true }, status: 'running' },
      { ...fakeSandbox('b', undefined), traits: { memoryMerge: true }, status: 'paused' },
      { ...fakeSandbox('c', undefined), traits: { memoryMerge: true }, status: 'stopped' },
      { ...fakeSandbox('d', undefined), traits: {}, status: 'running' },
    ] as SandboxContext[];
    const node = { sandboxes: () => sandboxes } as unknown as NodeContext;
    expect(mergeableSandboxes(node).map((s) => s.spec.id)).toEqual(['a', 'b']);
    expect(mergeableSandboxes(node, new Set([sandboxes[0]])).map((s) => s.spec.id)).toEqual(['b']);
  });
});

describe('/proc/<pid>/ksm_stat', () => {
  it('parses its fields by name', () => {
    expect(parseKsmStat('ksm_rmap_items 0\nksm_zero_pages 0\nksm_merging_pages 0\nksm_process_profit 0\nksm_merge_any: yes\nksm_mergeable: yes\n')).toMatchObject({
      ksm_merge_any: 'yes',
      ksm_mergeable: 'yes',
    });
  });
});

// The retune logic against a folder laid out like /sys/kernel/mm/ksm: the
// sysfs itself is exercised by the integration test.
describe('retuning KSM', () => {
  let tmp: string;
  let ksm: string;
  let root: string;
  beforeEach(() => {
    tmp = mkdtempSync(path.join(tmpdir(), 'dsec-ksm-'));
    ksm = path.join(tmp, 'ksm');
    root = path.join(tmp, 'agent');
    mkdirSync(ksm);
    mkdirSync(root);
  });
  afterEach(() => rmSync(tmp, { recursive: true, force: true }));

  const knobs = (run: number, pages: number, sleep: number) => {
    for (const [file, value] of [['run', run], ['pages_to_scan', pages], ['sleep_millisecs', sleep], ['pages_shared', 0], ['pages_sharing', 0]] as const) {
      writeFileSync(path.join(ksm, file), `${value}\n`);
    }
  };
  const read = (file: string) => Number(readFileSync(path.join(ksm, file), 'utf8'));

  it('starts KSM for the first mergeable sandbox, scales the rate, and stops it when the last goes', async () => {
    knobs(0, 100, 200);
    const log = collectingLog();
    expect(await retuneKsm(root, 1, options, log, ksm)).toMatchObject({ action: 'tuned', knobs: { run: 1, pagesToScan: 100, sleepMillisecs: 20 } });
    expect(await readHold(root)).toMatchObject({ found: { run: 0, pagesToScan: 100, sleepMillisecs: 200 }, startedByDsec: true });
    await retuneKsm(root, 12, options, log, ksm);
    expect([read('run'), read('pages_to_scan'), read('sleep_millisecs')]).toEqual([1, 1200, 20]);
    expect(await retuneKsm(root, 0, options, log, ksm)).toMatchObject({ action: 'released', stopped: true });
    expect([read('run'), read('pages_to_scan'), read('sleep_millisecs')]).toEqual([0, 100, 200]);
    expect(existsSync(path.join(root, 'density-memory/ksm.json'))).toBe(false);
    expect(log.lines.at(-1)).toContain('KSM stopped (run=0)');
  });

  it('leaves KSM running when the node ran it already, says so, and never scans slower than the node did', async () => {
    knobs(1, 2000, 10);
    const log = collectingLog();
    await retuneKsm(root, 3, options, log, ksm);
    expect(log.lines[0]).toContain('KSM was already running on this node');
    expect([read('run'), read('pages_to_scan'), read('sleep_millisecs')]).toEqual([1, 2000, 10]);
    expect(await retuneKsm(root, 0, options, log, ksm)).toMatchObject({ action: 'released', stopped: false });
    expect(read('run')).toBe(1);
    expect(log.lines.at(-1)).toContain('KSM left running as found');
  });

  it('remembers what it found across an agent restart (the hold file), not what it set', async () => {
    knobs(0, 100, 200);
    await retuneKsm(root, 2, options, collectingLog(), ksm);
    // A restarted agent re-adopting its sandboxes retunes with KSM already running (dsec's doing).
    await retuneKsm(root, 2, options, collectingLog(), ksm);
    expect((await readHold(root))?.startedByDsec).toBe(true);
    await retuneKsm(root, 0, options, collectingLog(), ksm);
    expect(read('run')).toBe(0);
  });

  it('shares KSM between two agents of one machine: the second records what the first found, and only the last to let go puts it back', async () => {
    knobs(0, 100, 200);
    const other = path.join(tmp, 'other-agent');
    mkdirSync(other);
    await retuneKsm(root, 2, options, collectingLog(), ksm);
    await retuneKsm(other, 5, options, collectingLog(), ksm);
    expect((await readHold(other))?.found).toEqual({ run: 0, pagesToScan: 100, sleepMillisecs: 200 });
    expect((await readHold(other))?.startedByDsec).toBe(true);
    const log = collectingLog();
    expect(await retuneKsm(root, 0, options, log, ksm)).toMatchObject({ action: 'released', stopped: false });
    expect(log.lines.at(-1)).toContain('1 other agent(s)');
    expect([read('run'), read('pages_to_scan')]).toEqual([1, 500]);
    expect(await retuneKsm(other, 0, options, collectingLog(), ksm)).toMatchObject({ action: 'released', stopped: true });
    expect([read('run'), read('pages_to_scan'), read('sleep_millisecs')]).toEqual([0, 100, 200]);
  });

  it('does nothing when there is no mergeable sandbox and it holds nothing', async () => {
    knobs(1, 100, 20);
    expect(await retuneKsm(root, 0, options, collectingLog(), ksm)).toEqual({ action: 'idle' });
    expect(read('run')).toBe(1);
  });
});

function fakeSandbox(id: string, density: SandboxSpec['density']): SandboxContext {
  const spec = { id, backend: 'container', layers: [], env: {}, workdir: '/', user: 'root', resources: { cpu: 1, memoryMiB: 64, pids: 64 }, network: 'none', qos: 'best-effort', labels: {}, density } as SandboxSpec;
  return { spec, node: {} as NodeContext, dir: '/nonexistent', status: 'creating', lowerDirs: [], storage: {}, backend: {}, density: {}, traits: {}, createdAt: new Date(0).toISOString() };
}
