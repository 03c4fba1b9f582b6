/**
 * Density: how many idle sandboxes one GiB of host memory holds, with the
 * density plugins off, with memory sharing (KSM) on, and with the idle ones
 * paused (frozen, their memory pushed to a zram swap device).
 *
 * Each sandbox is what an agent's sandbox looks like while the model thinks:
 * a container whose init is a shell, plus a resident process (a shell
 * holding a few MiB of data every sandbox of the job has: the same file
 * read into a variable) started through exec. The sandboxes are started
 * `count` at a time through the real node agent (runc, overlayfs, EROFS
 * layers), the host's memory is read from /proc/meminfo once it settled,
 * and the cost per sandbox is the growth of "used" (MemTotal -
 * MemAvailable) over the baseline taken right before, divided by the count.
 * Everything counts: the processes, page tables, cgroups, mounts, the
 * compressed swap.
 *
 * Phases, one after the other in one run (the machine's noise is shared):
 *
 *   off                  memorySharing false; nothing paused
 *   paused (no sharing)  the same sandboxes, all paused in one call by label
 *   sharing              new sandboxes, memorySharing true; after KSM settled
 *   sharing + paused     those, all paused in one call
 *
 * Also printed: the agent's own resident memory per sandbox (its RSS with
 * `count` sandboxes minus its RSS with none), one sandbox's resident memory
 * before and after its pause, and resume latency (resume + the first exec).
 *
 * Targets (the issue's): sandboxes per GiB with the plugins on >= 2x off;
 * the agent under 2 MiB per sandbox. Needs root, runc, overlayfs, zram and
 * KSM. Cleans up everything (sandboxes, the zram device, KSM settings).
 *
 *   npm run build && node dist/bench/density.js [--count 500] [--parallel 8] [--data-mib 4] [--swap-mib 4096] [--data code|hex]
 */
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { LayerRef, SandboxSpec } from '../core/live.js';
import type { LayerModel, PluginRef } from '../core/model.js';
import { cgroupsPathOf, containerId } from '../plugins/backend-container/index.js';
import { releaseSwap } from '../plugins/density-reclaim/zram.js';
import { LayerAgent, refOf, sandboxSpec } from './lib/layer-agent.js';
import { fixed, median, pool, table } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';

export interface DensitySettings {
  count: number;
  parallel: number;
  dataMiB: number;
  swapMiB: number;
  data: DataKind;
}

export function parseDensityArgs(argv: readonly string[]): DensitySettings {
  const settings: DensitySettings = { count: 500, parallel: 8, dataMiB: 4, swapMiB: 4096, data: 'code' };
  const keys: Record<string, 'count' | 'parallel' | 'dataMiB' | 'swapMiB'> = { '--count': 'count', '--parallel': 'parallel', '--data-mib': 'dataMiB', '--swap-mib': 'swapMiB' };
  for (let i = 0; i < argv.length; i += 2) {
    if (argv[i] === '--data' && (argv[i + 1] === 'code' || argv[i + 1] === 'hex')) {
      settings.data = argv[i + 1] as DataKind;
      continue;
    }
    const key = keys[argv[i]];
    const value = Number(argv[i + 1]);
    if (!key || !Number.isInteger(value) || value < 1) throw new Error('usage: density [--count N] [--parallel N] [--data-mib N] [--swap-mib N] [--data code|hex]');
    settings[key] = value;
  }
  return settings;
}

const KSM = '/sys/kernel/mm/ksm';
const RESOURCES = { cpu: 0.1, memoryMiB: 64, pids: 32 };
/** The resident process: a shell holding the shared file in a variable, then idling. */
const HOLDER = "(sh -c 'x=$(cat /data/blob.txt); while :; do sleep 3600; done' </dev/null >/dev/null 2>&1 &)";

interface Phase {
  readonly name: string;
  readonly sandboxes: number;
  /** Growth of the host's MemTotal - MemAvailable over the phase's baseline: everything, other processes' noise included. */
  readonly usedMiB: number;
  /** What the sandboxes are charged: their memory cgroups (merged pages once) + the RAM zram holds for their swapped pages. */
  readonly chargedMiB: number;
  readonly agentRssMiB: number;
}

async function meminfo(): Promise<{ totalMiB: number; availableMiB: number }> {
  const text = await readFile('/proc/meminfo', 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? Number.NaN) / 1024;
  return { totalMiB: field('MemTotal'), availableMiB: field('MemAvailable') };
}

async function usedMiB(): Promise<number> {
  const { totalMiB, availableMiB } = await meminfo();
  return totalMiB - availableMiB;
}

/** "Used" once it stops moving: three readings a second apart within 0.5% (at most `maxSeconds`). */
async function settledUsedMiB(maxSeconds = 30): Promise<number> {
  const readings: number[] = [];
  for (let second = 0; second < maxSeconds; second++) {
    readings.push(await usedMiB());
    const last = readings.slice(-3);
    if (last.length === 3 && Math.max(...last) - Math.min(...last) < 0.005 * Math.max(...last)) break;
    await sleep(1000);
  }
  return median(readings.slice(-3));
}

function cgroupMemoryFile(agent: LayerAgent, id: string): string {
  return path.join('/sys/fs/cgroup/memory', cgroupsPathOf(containerId(agent.root, id)), 'memory.usage_in_bytes');
}

async function cgroupMiB(file: string): Promise<number> {
  return Number((await readFile(file, 'utf8')).trim()) / (1024 * 1024);
}

async function processRssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN) / 1024;
}

const readKsm = async (name: string) => Number((await readFile(path.join(KSM, name), 'utf8')).trim());

/** Wait until KSM's merged pages stop growing: two full scans with less than 1% growth (at most `maxSeconds`). */
async function ksmSettled(maxSeconds = 180): Promise<number> {
  const started = Date.now();
  let previous = -1;
  let scans = await readKsm('full_scans');
  while ((Date.now() - started) / 1000 < maxSeconds) {
    await sleep(2000);
    const nowScans = await readKsm('full_scans');
    if (nowScans < scans + 2) continue;
    scans = nowScans;
    const sharing = await readKsm('pages_sharing');
    if (previous >= 0 && sharing - previous <= 0.01 * Math.max(sharing, 1)) return sharing;
    previous = sharing;
  }
  return readKsm('pages_sharing');
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function specs(prefix: string, count: number, layers: readonly LayerRef[], memorySharing: boolean): SandboxSpec[] {
  return Array.from({ length: count }, (_, index) =>
    sandboxSpec(`${prefix}-${String(index).padStart(4, '0')}`, layers, {}, {
      resources: RESOURCES,
      labels: { bench: 'density', phase: prefix },
      density: { memorySharing, reclaimOnPause: true },
    }),
  );
}

async function startHolders(agent: LayerAgent, all: readonly SandboxSpec[], parallel: number): Promise<number> {
  return pool(all.length, parallel, async (index) => {
    await agent.startReady(all[index]);
    const result = await agent.client.exec(all[index].id, { cmd: ['sh', '-c', HOLDER], timeoutMs: 30_000 });
    if (result.exitCode !== 0) throw new Error(`starting the resident process in ${all[index].id}: ${result.stderr}`);
    // The holder must be there (and hold its data) for the figures to mean anything.
    const check = await agent.client.exec(all[index].id, { cmd: ['sh', '-c', 'ps | grep -c "[w]hile :"'], timeoutMs: 30_000 });
    if (!(Number(check.stdout.trim()) >= 1)) throw new Error(`no resident process in ${all[index].id}: ${check.stdout} ${check.stderr}`);
  });
}

/** Pause every sandbox of a phase in one call by label; resolves to the seconds it took. */
async function pauseAll(agent: LayerAgent, phase: string): Promise<number> {
  const started = performance.now();
  const outcomes = await agent.client.pauseSandboxes({ labels: { bench: 'density', phase } });
  const failed = outcomes.filter((outcome) => !outcome.ok);
  if (failed.length > 0) throw new Error(`${failed.length} pause(s) failed, e.g. ${JSON.stringify(failed[0])}`);
  return (performance.now() - started) / 1000;
}

/** Resume each sandbox and run its first exec, one at a time: what a rollout waits for. */
async function resumeLatencies(agent: LayerAgent, which: readonly SandboxSpec[]): Promise<number[]> {
  const latencies: number[] = [];
  for (const spec of which) {
    const started = performance.now();
    await agent.client.resumeSandbox(spec.id);
    const result = await agent.client.exec(spec.id, { cmd: ['true'] });
    if (result.exitCode !== 0) throw new Error(`exec after resume in ${spec.id}: ${result.stderr}`);
    latencies.push(performance.now() - started);
  }
  return latencies;
}

/** One phase's figures, `used` over the baseline taken before its sandboxes started. */
async function measurePhase(name: string, agent: LayerAgent, count: number, baselineMiB: number, agentPid: number): Promise<Phase> {
  const usedMiB = (await settledUsedMiB()) - baselineMiB;
  const usage = await agent.client.nodeUsage();
  const chargedMiB = usage.used.memoryMiB + (usage.memory.swap?.compressedMiB ?? 0);
  return { name, sandboxes: count, usedMiB, chargedMiB, agentRssMiB: await processRssMiB(agentPid) };
}

/**
 * The data every sandbox holds. `code`: source-code-like lines drawn from a
 * small vocabulary by a fixed pseudo-random stream, which is what an agent's
 * workspace mostly is, and compresses about 3:1 with zram's LZ compressors.
 * `hex`: hex digits of the same stream, which LZ compressors (no entropy
 * coding) barely shrink: the worst case for reclaim into zram.
 */
export function blobText(kind: DataKind, bytes: number): string {
  // xorshift32: fixed seed, so every sandbox (and every run) holds the same bytes.
  let seed = 0x2545f491;
  const next = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>>= 0);
  };
  const words = ['self', 'value', 'result', 'items', 'index', 'config', 'request', 'response', 'error', 'path', 'data', 'count',
    'return', 'import', 'from', 'def', 'class', 'if', 'else', 'for', 'in', 'not', 'None', 'True', 'False', 'len', 'range', 'open',
    'parse', 'load', 'save', 'update', 'append', 'key', 'name', 'node', 'tree', 'buffer', 'offset', 'length', 'token', 'state'];
  const chunks: string[] = [];
  let total = 0;
  while (total < bytes) {
    let line: string;
    if (kind === 'hex') {
      line = Array.from({ length: 16 }, () => next().toString(16).padStart(8, '0')).join('') + '\n';
    } else {
      const indent = ' '.repeat(4 * (next() % 4));
      const tokens = Array.from({ length: 3 + (next() % 6) }, () => words[next() % words.length]);
      line = `${indent}${tokens[0]} = ${tokens.slice(1).join('.')}(${next() % 1000})\n`;
    }
    chunks.push(line);
    total += line.length;
  }
  return chunks.join('');
}

export type DataKind = 'code' | 'hex';

async function writeLayers(work: string, dataMiB: number, kind: DataKind): Promise<LayerModel[]> {
  const data = path.join(work, 'data');
  await mkdir(path.join(data, 'data'), { recursive: true });
  await writeFile(path.join(data, 'data', 'blob.txt'), blobText(kind, dataMiB * 1024 * 1024));
  return [
    { ref: 'base@1.0.0', name: 'base', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } },
    { ref: 'data@1.0.0', name: 'data', version: '1.0.0', kind: 'workspace', source: { type: 'dir', path: data } },
  ];
}

export async function runDensity(settings: DensitySettings): Promise<boolean> {
  const work = await realpath(await mkdtemp(path.join(tmpdir(), 'dsec-bench-density-')));
  const ksmBefore = { run: await readKsm('run'), pagesToScan: await readKsm('pages_to_scan'), sleep: await readKsm('sleep_millisecs') };
  const plugins: PluginRef[] = [
    { name: 'storage-local', options: {} },
    { name: 'backend-container', options: {} },
    // Requests add up to count x 64 MiB: the policy must overcommit memory, which is the point.
    { name: 'density-admission', options: { overcommit: { cpu: 100, memory: 8 } } },
    { name: 'density-memory', options: { maxPagesToScan: 20000, sleepMillisecs: 10 } },
    { name: 'density-reclaim', options: { swap: { zramMiB: settings.swapMiB } } },
    { name: 'density-qos', options: {} },
  ];
  let agent: LayerAgent | undefined;
  const phases: Phase[] = [];
  const notes: string[] = [];
  let ok = false;
  try {
    agent = await LayerAgent.start(work, plugins);
    const layers = await writeLayers(work, settings.dataMiB, settings.data);
    const refs: LayerRef[] = [];
    for (const layer of layers) refs.push(refOf(await agent.publish(layer)));
    const agentPid = (await agent.client.node()).pid;
    const idleAgentMiB = await processRssMiB(agentPid);

    // off: no sharing, nothing paused.
    let baseline = await settledUsedMiB();
    const off = specs('off', settings.count, refs, false);
    const offSeconds = await startHolders(agent, off, settings.parallel);
    phases.push(await measurePhase('off', agent, settings.count, baseline, agentPid));
    // paused alone (no sharing): what reclaim gives by itself.
    const offProbe = cgroupMemoryFile(agent, off[0].id);
    const offProbeBeforeMiB = await cgroupMiB(offProbe);
    await pauseAll(agent, 'off');
    const offProbeAfterMiB = await cgroupMiB(offProbe);
    phases.push(await measurePhase('paused (no sharing)', agent, settings.count, baseline, agentPid));
    const resumeUnsharedMs = await resumeLatencies(agent, off.slice(0, 20));
    await agent.destroy(off.map((spec) => spec.id), settings.parallel);

    // sharing: KSM merges the identical pages.
    baseline = await settledUsedMiB();
    const shared = specs('shared', settings.count, refs, true);
    const sharedSeconds = await startHolders(agent, shared, settings.parallel);
    const pagesSharing = await ksmSettled();
    phases.push(await measurePhase('sharing (KSM)', agent, settings.count, baseline, agentPid));

    // paused: the same sandboxes, all paused in one call.
    const probe = shared[0].id;
    const probeMemory = cgroupMemoryFile(agent, probe);
    const probeBeforeMiB = await cgroupMiB(probeMemory);
    const before = await agent.client.nodeUsage();
    const pauseSeconds = await pauseAll(agent, 'shared');
    phases.push(await measurePhase('sharing + paused', agent, settings.count, baseline, agentPid));
    const after = await agent.client.nodeUsage();
    const probeAfterMiB = await cgroupMiB(probeMemory);

    const resumeMs = await resumeLatencies(agent, shared.slice(0, 20));

    const off0 = phases[0];
    const perGiB = (phase: Phase) => phase.sandboxes / (phase.usedMiB / 1024);
    const chargedPerGiB = (phase: Phase) => phase.sandboxes / (phase.chargedMiB / 1024);
    const rows = phases.map((phase) => [
      phase.name,
      String(phase.sandboxes),
      fixed(phase.usedMiB, 0),
      fixed(phase.usedMiB / phase.sandboxes, 2),
      fixed(perGiB(phase), 0),
      `${fixed(perGiB(phase) / perGiB(off0), 2)}x`,
      fixed(phase.chargedMiB, 0),
      fixed(chargedPerGiB(phase), 0),
      `${fixed(chargedPerGiB(phase) / chargedPerGiB(off0), 2)}x`,
    ]);
    process.stdout.write(
      table(['phase', 'sandboxes', 'host MiB used', 'MiB/sandbox', 'sandboxes/GiB', 'vs off', 'charged MiB', 'sandboxes/GiB', 'vs off'], rows),
    );
    process.stdout.write('  host: MemTotal - MemAvailable growth (all of the machine); charged: the sandboxes\' memory cgroups + zram\'s RAM\n');
    const agentPerSandboxMiB = Math.max(...phases.map((phase) => (phase.agentRssMiB - idleAgentMiB) / phase.sandboxes));
    notes.push(
      `start: ${settings.count} sandboxes + resident process in ${fixed(offSeconds)} s (off) and ${fixed(sharedSeconds)} s (sharing); ` +
        `KSM pages_sharing ${pagesSharing} (${fixed((pagesSharing * 4) / 1024, 0)} MiB saved)`,
      `pause of ${settings.count} by label in one call: ${fixed(pauseSeconds)} s; node memory used by sandboxes ` +
        `${fixed(before.used.memoryMiB, 0)} -> ${fixed(after.used.memoryMiB, 0)} MiB, reclaimed ${fixed(after.memory.reclaimedMiB ?? 0, 0)} MiB, ` +
        `swap ${after.memory.swap ? `${fixed(after.memory.swap.usedMiB, 0)} MiB in ${fixed(after.memory.swap.compressedMiB ?? Number.NaN, 0)} MiB compressed` : 'none'}`,
      `one paused idle sandbox, resident (its cgroup's memory.usage_in_bytes) before -> after the pause: ` +
        `${fixed(offProbeBeforeMiB, 2)} -> ${fixed(offProbeAfterMiB, 2)} MiB unshared (${off[0].id}), ${fixed(probeBeforeMiB, 2)} -> ${fixed(probeAfterMiB, 2)} MiB shared (${probe})`,
      `resume + first exec (one at a time, ${resumeMs.length} each): median ${fixed(median(resumeUnsharedMs), 0)} ms, max ${fixed(Math.max(...resumeUnsharedMs), 0)} ms unshared (${settings.dataMiB} MiB back from swap); ` +
        `median ${fixed(median(resumeMs), 0)} ms, max ${fixed(Math.max(...resumeMs), 0)} ms shared`,
      `agent RSS: ${fixed(idleAgentMiB)} MiB idle; ${fixed(agentPerSandboxMiB * 1024, 0)} KiB per sandbox at ${settings.count} (target < 2048 KiB)`,
    );
    // A phase whose host growth is not positive drowned in the machine's noise (small counts): it proves nothing.
    const best = Math.max(0, ...phases.slice(1).filter((phase) => phase.usedMiB > 0).map(perGiB));
    ok = best / perGiB(off0) >= 2 && agentPerSandboxMiB < 2;
    notes.push(`target: plugins on >= 2x off: ${fixed(best / perGiB(off0), 2)}x; agent < 2 MiB per sandbox: ${agentPerSandboxMiB < 2 ? 'yes' : 'no'} -> ${ok ? 'met' : 'MISSED'}`);
    process.stdout.write(notes.map((note) => `  ${note}\n`).join(''));
  } finally {
    if (agent) {
      const problems = await agent.dispose();
      for (const problem of problems) process.stderr.write(`cleanup: ${problem}\n`);
    }
    await releaseBenchSwap(path.join(work, 'agent'));
    await writeFile(path.join(KSM, 'run'), String(ksmBefore.run)).catch(() => undefined);
    await writeFile(path.join(KSM, 'pages_to_scan'), String(ksmBefore.pagesToScan)).catch(() => undefined);
    await writeFile(path.join(KSM, 'sleep_millisecs'), String(ksmBefore.sleep)).catch(() => undefined);
    await rm(work, { recursive: true, force: true });
  }
  return ok;
}

/** The zram device density-reclaim set up for this agent root, torn down. */
async function releaseBenchSwap(root: string): Promise<void> {
  await releaseSwap(root).catch((error: Error) => process.stderr.write(`cleanup: zram: ${error.message}\n`));
}

runWhenMain(import.meta.url, 'density', (argv) => runDensity(parseDensityArgs(argv)), { exit: true });
