/**
 * density-reclaim against the real kernel. Swap is node-wide, so every test
 * of the plugin is in this file, in order: first without swap (a frozen
 * cgroup and an agent's paused sandbox give back their page cache only, and
 * a reclaim that fails leaves the sandbox paused), then with a zram swap
 * device (the machinery on a bare cgroup, then an agent that sets the device
 * up, pushes a paused sandbox's memory into it, prefetches it on resume and
 * reuses the device across a restart). Every zram device made here is taken
 * down in an afterAll, whatever happened.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../core/dsec.js';
import { LABEL_FLEET, prefetchProcesses, type SandboxSpec } from '../../../core/plugin-api.js';
import {
  ensureSwap,
  forceEmpty,
  readMemcg,
  readRecord,
  releaseSwap,
  setLimit,
  shrinkLimit,
  type ReclaimRecord,
} from '../../../plugins/density-reclaim/index.js';
import { parseProcSwaps } from '../../../plugins/density-reclaim/zram.js';
import { TestAgent } from '../../helpers/agent-fixture.js';
import { MemoryHolder } from './holder.js';

const MIB = 1024 * 1024;
const LOSE_CGROUP_PLUGIN = path.join(path.dirname(fileURLToPath(import.meta.url)), 'lose-cgroup-plugin.mjs');
const zramDevices = () => readdirSync('/sys/block').filter((name) => name.startsWith('zram'));
const activeSwaps = () => parseProcSwaps(readFileSync('/proc/swaps', 'utf8'));

const spec = (agent: TestAgent, id: string, labels: Record<string, string> = {}): SandboxSpec =>
  agent.spec(id, { resources: { cpu: 0.5, memoryMiB: 128, pids: 64 }, labels: { [LABEL_FLEET]: 'idle', ...labels } });

const memoryCgroup = (agent: TestAgent, id: string) => `/sys/fs/cgroup/memory/dsec/${agent.containerId(id)}`;
const residentMiB = (agent: TestAgent, id: string) => Number(readFileSync(`${memoryCgroup(agent, id)}/memory.usage_in_bytes`, 'utf8')) / MIB;
const limitBytes = (agent: TestAgent, id: string) => Number(readFileSync(`${memoryCgroup(agent, id)}/memory.limit_in_bytes`, 'utf8'));

function reclaimRecord(agent: TestAgent, id: string): ReclaimRecord {
  const record = JSON.parse(readFileSync(path.join(agent.root, 'sandboxes', id, 'record.json'), 'utf8'));
  return (record.density?.['density-reclaim'] ?? {}) as ReclaimRecord;
}

/** awk processes of the sandbox, seen from the host. */
function holders(agent: TestAgent, id: string): number[] {
  return readFileSync(`${memoryCgroup(agent, id)}/cgroup.procs`, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map(Number)
    // busybox sh runs the applet in a forked shell: the command line is the shell's, the name is awk.
    .filter((pid) => readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'awk');
}

/**
 * Create a sandbox holding `anonMiB` of anonymous memory (a sleeping awk holding a
 * string; a repeated pattern, not zeros, which zram would store as nothing)
 * and `cacheMiB` of page cache (a file it wrote), and return the file's md5.
 */
async function fill(agent: TestAgent, id: string, anonMiB: number, cacheMiB: number): Promise<string> {
  await agent.client.createSandbox(spec(agent, id));
  const holder = `awk 'BEGIN { s = "0123456789abcdef"; while (length(s) < ${anonMiB * MIB}) s = s s; while (1) system("sleep 3600") }' > /dev/null 2>&1 &`;
  const result = await agent.client.exec(id, {
    cmd: ['sh', '-c', `head -c ${cacheMiB * MIB} /dev/urandom > /data\nmd5sum /data\n${holder}`],
  });
  expect(result).toMatchObject({ exitCode: 0, stderr: '' });
  // The string doubles up to its size: wait until it is there and the resident memory holds still.
  let previous = 0;
  for (let i = 0; i < 100; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    const now = residentMiB(agent, id);
    if (now > anonMiB + cacheMiB - 2 && Math.abs(now - previous) < 0.25) break;
    previous = now;
  }
  expect(holders(agent, id)).toHaveLength(1);
  expect(residentMiB(agent, id)).toBeGreaterThan(anonMiB + cacheMiB - 2);
  return result.stdout.split(' ')[0];
}

async function md5(agent: TestAgent, id: string): Promise<string> {
  const result = await agent.client.exec(id, { cmd: ['md5sum', '/data'] });
  expect(result.exitCode).toBe(0);
  return result.stdout.split(' ')[0];
}

describe('without swap', () => {
  let agent: TestAgent | undefined;
  let holder: MemoryHolder | undefined;

  beforeAll(async () => {
    // Swap is node-wide: another user's swap area (a bench, an admin) would take the anonymous pages too.
    for (let i = 0; i < 60 && activeSwaps().length > 0; i++) await new Promise((resolve) => setTimeout(resolve, 500));
    expect(activeSwaps(), 'these tests need a node without swap; another swap area is active').toEqual([]);
    agent = await TestAgent.start({ plugins: [{ name: LOSE_CGROUP_PLUGIN, options: {} }, { name: 'density-reclaim', options: {} }] });
  });

  afterAll(async () => {
    try {
      holder?.dispose();
    } finally {
      await agent?.dispose();
    }
  });

  it('force_empty on a frozen cgroup drops its page cache and leaves its anonymous memory resident', async () => {
    holder = await MemoryHolder.start({ anonMiB: 32, cacheMiB: 16, limitMiB: 256 });
    holder.freeze();
    const before = await readMemcg(holder.memory);
    expect(before.cacheBytes).toBeGreaterThan(15 * MIB);
    expect(before.rssBytes).toBeGreaterThan(31 * MIB);
    await forceEmpty(holder.memory);
    const after = await readMemcg(holder.memory);
    expect(after.cacheBytes).toBeLessThan(MIB);
    expect(after.rssBytes).toBeGreaterThan(31 * MIB);
    expect(after.swapBytes).toBe(0);
    expect(after.usageBytes).toBeLessThan(before.usageBytes - 15 * MIB);
  });

  it('a paused sandbox gives back its page cache, reports it, and resumes with its file and process intact', async () => {
    const sum = await fill(agent!, 'cache', 16, 16);
    const before = residentMiB(agent!, 'cache');
    await agent!.client.pauseSandbox('cache');
    const after = residentMiB(agent!, 'cache');
    const { reclaim } = reclaimRecord(agent!, 'cache');
    console.log(`no swap: resident ${before.toFixed(1)} -> ${after.toFixed(1)} MiB after the pause; record ${JSON.stringify(reclaim)}`);
    expect(reclaim).toMatchObject({ method: 'force_empty', swappedMiB: 0 });
    expect(reclaim!.cacheDroppedMiB).toBeGreaterThan(14);
    expect(after).toBeLessThan(before - 14);
    expect(after).toBeGreaterThan(15); // the anonymous memory stays: nowhere to put it
    expect(limitBytes(agent!, 'cache')).toBe(128 * MIB);

    const usage = await agent!.client.nodeUsage();
    expect(usage.memory.reclaimedMiB).toBeGreaterThan(14);
    expect(usage.memory.swap).toBeUndefined();
    expect(usage.fleets.find((fleet) => fleet.fleet === 'idle')?.reclaimedMiB).toBeGreaterThan(14);

    await agent!.client.resumeSandbox('cache');
    expect(await md5(agent!, 'cache')).toBe(sum);
    expect(holders(agent!, 'cache')).toHaveLength(1);
    expect((await agent!.client.nodeUsage()).memory.reclaimedMiB).toBe(0);
  });

  it('a pause whose memory cgroup is gone logs why nothing was reclaimed and leaves the sandbox paused, then resumes', async () => {
    await agent!.client.createSandbox(spec(agent!, 'lost', { 'test.dsec.io/lose-cgroup': 'yes' }));
    const paused = await agent!.client.pauseSandbox('lost');
    expect(paused.status).toBe('paused');
    expect(agent!.logText()).toMatch(/density-reclaim: sandbox lost: reclaiming its memory after the pause failed: .*ENOENT.*; it stays paused, memory unchanged/);
    expect(reclaimRecord(agent!, 'lost').reclaim).toBeUndefined();
    expect((await agent!.client.getSandbox('lost')).status).toBe('paused');
    expect((await agent!.client.resumeSandbox('lost')).status).toBe('running');
    expect((await agent!.client.exec('lost', { cmd: ['echo', 'ok'] })).stdout).toBe('ok\n');
  });
});

describe('with a zram swap device', () => {
  describe('on a bare frozen cgroup', () => {
    let holder: MemoryHolder | undefined;
    const root = mkdtempSync(path.join(tmpdir(), 'dsec-reclaim-root-'));

    beforeAll(async () => {
      holder = await MemoryHolder.start({ anonMiB: 32, cacheMiB: 16, limitMiB: 256 });
      holder.freeze();
    });

    afterAll(async () => {
      try {
        holder?.dispose();
      } finally {
        await releaseSwap(root);
        rmSync(root, { recursive: true, force: true });
      }
    });

    it('sets up a zram swap device, records it, and reuses it when asked again (an agent restart)', async () => {
      const first = await ensureSwap(root, { zramMiB: 128, algorithm: 'lz4' }, silentLogger);
      expect(first.reused).toBe(false);
      expect(first.record).toMatchObject({ sizeMiB: 128, algorithm: 'lz4', priority: 100 });
      expect(activeSwaps().map((entry) => entry.filename)).toContain(`/dev/${first.record.device}`);
      expect(readFileSync(`/sys/block/${first.record.device}/comp_algorithm`, 'utf8')).toContain('[lz4]');
      const again = await ensureSwap(root, { zramMiB: 128, algorithm: 'lz4' }, silentLogger);
      expect(again).toEqual({ record: first.record, reused: true });
      expect(await readRecord(root)).toEqual(first.record);
    });

    it('with swap, shrinking the limit step by step pushes the anonymous memory out and puts the limit back', async () => {
      const before = await readMemcg(holder!.memory);
      const { lowestBytes, steps } = await shrinkLimit(holder!.memory, 256 * MIB);
      const after = await readMemcg(holder!.memory);
      expect(steps).toBeGreaterThan(1);
      expect(lowestBytes).toBeLessThan(8 * MIB);
      expect(after.swapBytes).toBeGreaterThan(before.swapBytes + 24 * MIB);
      expect(after.usageBytes).toBeLessThan(before.usageBytes - 24 * MIB);
      expect(Number(readFileSync(path.join(holder!.memory, 'memory.limit_in_bytes'), 'utf8'))).toBe(256 * MIB);
      expect(Number(readFileSync(path.join(holder!.memory, 'memory.memsw.limit_in_bytes'), 'utf8'))).toBe(256 * MIB);
    });

    it('prefetching the frozen processes brings their swapped pages back into memory', async () => {
      const before = await readMemcg(holder!.memory);
      const result = await prefetchProcesses(holder!.pids());
      expect(result.advisedBytes).toBeGreaterThan(32 * MIB);
      // The reads finish in the background: wait for them, a little.
      let after = await readMemcg(holder!.memory);
      for (let i = 0; i < 50 && after.usageBytes < before.usageBytes + 24 * MIB; i++) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        after = await readMemcg(holder!.memory);
      }
      expect(after.usageBytes).toBeGreaterThan(before.usageBytes + 24 * MIB);
    });

    it('with swap, force_empty pushes everything out in one write, and the thawed process still runs', async () => {
      await forceEmpty(holder!.memory);
      const after = await readMemcg(holder!.memory);
      expect(after.rssBytes).toBeLessThan(4 * MIB);
      expect(after.swapBytes).toBeGreaterThan(28 * MIB);
      holder!.thaw();
      expect(holder!.alive()).toBe(true);
      holder!.freeze();
    });

    it('raising the limit above memory.memsw raises memsw first', async () => {
      await setLimit(holder!.memory, 300 * MIB);
      expect(Number(readFileSync(path.join(holder!.memory, 'memory.limit_in_bytes'), 'utf8'))).toBe(300 * MIB);
      expect(Number(readFileSync(path.join(holder!.memory, 'memory.memsw.limit_in_bytes'), 'utf8'))).toBe(300 * MIB);
    });

    it('releases the swap device: swapoff, reset, hot_remove, record gone', async () => {
      const record = (await readRecord(root))!;
      expect(await releaseSwap(root)).toBe(record.device);
      expect(activeSwaps().map((entry) => entry.filename)).not.toContain(`/dev/${record.device}`);
      expect(await readRecord(root)).toBeUndefined();
      expect(await releaseSwap(root)).toBeUndefined();
      expect(existsSync(`/sys/block/${record.device}`)).toBe(false);
      // swapoff read the pages back into the holder's cgroup, and it still runs.
      expect((await readMemcg(holder!.memory)).rssBytes).toBeGreaterThan(31 * MIB);
      expect(holder!.alive()).toBe(true);
    });

    it('refuses a compressor this kernel lacks, naming those it has, and leaves no device behind', async () => {
      const offered = readFileSync('/sys/block/zram0/comp_algorithm', 'utf8');
      if (offered.includes('zstd')) return; // this kernel has them all: nothing to refuse
      const devices = zramDevices();
      await expect(ensureSwap(root, { zramMiB: 64, algorithm: 'zstd' }, silentLogger)).rejects.toThrow(/zram on this kernel offers .*lz4.*; zstd is not one of them/);
      // (A device someone else made meanwhile would be swapped on or sized: the refused one is neither.)
      const left = zramDevices().filter((name) => !devices.includes(name) && readFileSync(`/sys/block/${name}/disksize`, 'utf8').trim() === '0');
      expect(left).toEqual([]);
      expect(await readRecord(root)).toBeUndefined();
    });
  });

  describe('in an agent', () => {
    let agent: TestAgent | undefined;
    let device: string | undefined;

    beforeAll(async () => {
      agent = await TestAgent.start({ plugins: [{ name: 'density-reclaim', options: { swap: { zramMiB: 256, algorithm: 'lz4' } } }] });
      device = (await readRecord(agent.root))?.device;
    });

    afterAll(async () => {
      try {
        // swapoff reads the paused sandboxes' pages back into them; then the sandboxes go.
        if (agent) await releaseSwap(agent.root);
      } finally {
        try {
          await agent?.dispose();
        } finally {
          // The record went with the agent's folder if the release above failed half-way.
          if (device && activeSwaps().some((entry) => entry.filename === `/dev/${device}`)) {
            const { execFileSync } = await import('node:child_process');
            execFileSync('swapoff', [`/dev/${device}`]);
          }
        }
      }
    });

    it('sets up the zram swap device at agent start and says so', async () => {
      expect(device).toMatch(/^zram\d+$/);
      expect(activeSwaps().find((entry) => entry.filename === `/dev/${device}`)).toMatchObject({ sizeKiB: 256 * 1024 - 4, priority: 100 });
      expect(agent!.logText()).toContain(`density-reclaim: set up swap /dev/${device} (zram, 256 MiB, lz4, priority 100)`);
    });

    it('pushes a paused sandbox\'s memory into swap, reports it, and resumes it (prefetched) with its file and process intact', async () => {
      const sum = await fill(agent!, 'swapped', 32, 8);
      const before = residentMiB(agent!, 'swapped');
      await agent!.client.pauseSandbox('swapped');
      const after = residentMiB(agent!, 'swapped');
      const { reclaim } = reclaimRecord(agent!, 'swapped');
      expect(reclaim!.swappedMiB).toBeGreaterThan(28);
      expect(after).toBeLessThan(4);
      expect(limitBytes(agent!, 'swapped')).toBe(128 * MIB);

      const usage = await agent!.client.nodeUsage();
      expect(usage.memory.swap).toMatchObject({ device: `/dev/${device}`, totalMiB: 256 });
      expect(usage.memory.swap!.usedMiB).toBeGreaterThan(28);
      // A 16-byte pattern compresses to almost nothing: zram holds it in far less RAM than it stores.
      expect(usage.memory.swap!.compressedMiB).toBeLessThan(usage.memory.swap!.usedMiB / 4);
      expect(usage.memory.reclaimedMiB).toBeGreaterThan(before - after - 1);
      expect(usage.fleets.find((fleet) => fleet.fleet === 'idle')?.reclaimedMiB).toBeGreaterThan(28);

      const resumeStarted = performance.now();
      await agent!.client.resumeSandbox('swapped');
      const resumeMs = performance.now() - resumeStarted;
      const execStarted = performance.now();
      expect(await md5(agent!, 'swapped')).toBe(sum);
      const firstExecMs = performance.now() - execStarted;
      const { prefetch } = reclaimRecord(agent!, 'swapped');
      console.log(
        `zram: resident ${before.toFixed(1)} -> ${after.toFixed(1)} MiB after the pause (${reclaim!.swappedMiB} MiB to swap, ` +
          `${reclaim!.cacheDroppedMiB} MiB cache dropped, ${reclaim!.durationMs} ms); swap used ${usage.memory.swap!.usedMiB} MiB in ` +
          `${usage.memory.swap!.compressedMiB} MiB of RAM; resume ${resumeMs.toFixed(0)} ms (prefetch ${prefetch!.durationMs} ms over ` +
          `${prefetch!.advisedMiB} MiB), first exec ${firstExecMs.toFixed(0)} ms, resident after ${residentMiB(agent!, 'swapped').toFixed(1)} MiB`,
      );
      expect(prefetch!.swappedMiB).toBeGreaterThan(28);
      expect(prefetch!.advisedMiB).toBeGreaterThan(32);
      expect(holders(agent!, 'swapped')).toHaveLength(1);
    });

    it('reuses its swap device after an agent restart', async () => {
      await agent!.stop();
      await agent!.startDaemon();
      expect(agent!.logText()).toContain(`density-reclaim: reusing swap /dev/${device} (zram, 256 MiB, lz4, priority 100)`);
      expect(activeSwaps().filter((entry) => entry.filename.startsWith('/dev/zram'))).toHaveLength(1);
    });
  });
});
