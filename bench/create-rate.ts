/**
 * Sandbox creation rate: dsec (Provider.createSandbox through the node agent,
 * parallelism 10 like `apply`) against the bare runtime doing the same work
 * (overlay mount + `runc run --detach` of a prepared bundle, same layers,
 * same parallelism). Three rounds each, medians reported; the target is dsec
 * at >= 0.5x the bare rate. Needs root and runc; cleans up everything.
 *
 *   npm run build && node dist/bench/create-rate.js [--count 50] [--parallel 10] [--rounds 3]
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { stopAgent } from '../core/agent/daemon.js';
import type { LayerRef, SandboxSpec } from '../core/live.js';
import { bundleConfig } from '../plugins/backend-container/bundle.js';
import { removeCgroupDirs } from '../plugins/backend-container/cgroups.js';
import { cgroupsPathOf } from '../plugins/backend-container/index.js';
import { mountOverlay, unmountAll } from '../plugins/backend-container/rootfs.js';
import { findRuntime, runRuntime, startDetached, type Runtime } from '../plugins/backend-container/runtime.js';
import { createLocalProvider, type LocalProvider } from '../providers/local/index.js';

interface Settings {
  count: number;
  parallel: number;
  rounds: number;
}

const RESOURCES = { cpu: 0.25, memoryMiB: 64, pids: 64 };

function parseSettings(argv: readonly string[]): Settings {
  const settings: Settings = { count: 50, parallel: 10, rounds: 3 };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i]?.replace(/^--/, '') as keyof Settings;
    const value = Number(argv[i + 1]);
    if (!(key in settings) || !Number.isInteger(value) || value < 1) throw new Error(`usage: create-rate [--count N] [--parallel N] [--rounds N]`);
    settings[key] = value;
  }
  return settings;
}

/** Run `work` over 0..count-1 with at most `limit` in flight; resolves to the wall time in seconds. */
async function timed(count: number, limit: number, work: (index: number) => Promise<void>): Promise<number> {
  const started = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < count) await work(next++);
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  return (performance.now() - started) / 1000;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

function spec(id: string, layer: LayerRef): SandboxSpec {
  return { id, backend: 'container', layers: [layer], env: {}, workdir: '/', user: 'root', resources: RESOURCES, network: 'none', qos: 'best-effort', labels: { bench: 'create-rate' } };
}

/** dsec: create `count` sandboxes through the provider; returns seconds, then destroys them (untimed). */
async function dsecRound(provider: LocalProvider, layer: LayerRef, settings: Settings, round: number): Promise<number> {
  const ids = Array.from({ length: settings.count }, (_, i) => `bench-${round}-${i}`);
  try {
    return await timed(settings.count, settings.parallel, async (i) => {
      await provider.createSandbox(spec(ids[i], layer));
    });
  } finally {
    await timed(ids.length, settings.parallel, async (i) => provider.destroySandbox(ids[i]));
  }
}

/** The bare runtime: the same overlay and config.json, mounted and started by hand. */
async function bareRound(runtime: Runtime, lowerDirs: readonly string[], work: string, settings: Settings, round: number): Promise<number> {
  const bundles = Array.from({ length: settings.count }, (_, i) => {
    const dir = path.join(work, `bare-${round}-${i}`);
    const cid = `dsecbench-bare-${process.pid}-${round}-${i}`;
    for (const sub of ['upper', 'work', 'rootfs']) mkdirSync(path.join(dir, sub), { recursive: true });
    const config = bundleConfig({
      sandboxId: `bare-${i}`,
      rootfs: path.join(dir, 'rootfs'),
      env: {},
      workdir: '/',
      user: { uid: 0, gid: 0 },
      resources: RESOURCES,
      qos: 'best-effort',
      cgroupsPath: cgroupsPathOf(cid),
      maxOpenFiles: 1024,
    });
    writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
    return { dir, cid };
  });
  try {
    return await timed(bundles.length, settings.parallel, async (i) => {
      const { dir, cid } = bundles[i];
      await mountOverlay({ lowerDirs, upperDir: path.join(dir, 'upper'), workDir: path.join(dir, 'work'), target: path.join(dir, 'rootfs') });
      await startDetached(runtime, ['run', '--detach', '--bundle', dir, cid], path.join(dir, 'init.log'));
    });
  } finally {
    await timed(bundles.length, settings.parallel, async (i) => {
      const { dir, cid } = bundles[i];
      await runRuntime(runtime, ['delete', '--force', cid]);
      await unmountAll(path.join(dir, 'rootfs'));
      await removeCgroupDirs(cgroupsPathOf(cid)).catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    });
  }
}

async function main(): Promise<void> {
  const settings = parseSettings(process.argv.slice(2));
  const runtime = findRuntime('runc');
  const work = realpathSync(mkdtempSync(path.join(tmpdir(), 'dsec-bench-')));
  const provider = createLocalProvider({ stateDir: path.join(work, '.dsec'), baseDir: work });
  const rows: { round: number; dsec: number; bare: number }[] = [];
  try {
    const layer = await provider.publishLayer({ ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } });
    // The bare runtime gets exactly the layer trees the storage plugin gave dsec's sandboxes.
    await provider.createSandbox(spec('bench-probe', layer));
    const record = JSON.parse(readFileSync(path.join(provider.root, 'sandboxes/bench-probe/record.json'), 'utf8')) as { lowerDirs: string[] };
    await provider.destroySandbox('bench-probe');

    for (let round = 1; round <= settings.rounds; round++) {
      // Alternate the order, so neither side always runs on a warmer machine.
      const runDsec = async () => settings.count / (await dsecRound(provider, layer, settings, round));
      const runBare = async () => settings.count / (await bareRound(runtime, record.lowerDirs, work, settings, round));
      let dsec: number;
      let bare: number;
      if (round % 2) {
        dsec = await runDsec();
        bare = await runBare();
      } else {
        bare = await runBare();
        dsec = await runDsec();
      }
      rows.push({ round, dsec, bare });
    }
  } finally {
    await provider.close();
    await stopAgent(provider.root).catch(() => {});
    try {
      for (const id of execFileSync('runc', ['list', '--quiet'], { encoding: 'utf8' }).split('\n')) {
        if (id.startsWith(`dsecbench-bare-${process.pid}-`)) execFileSync('runc', ['delete', '--force', id]);
      }
    } catch {
      // nothing left to delete
    }
    await unmountAll(work).catch(() => {});
    rmSync(work, { recursive: true, force: true });
  }

  const format = (n: number) => n.toFixed(1).padStart(8);
  const medianDsec = median(rows.map((row) => row.dsec));
  const medianBare = median(rows.map((row) => row.bare));
  const ratio = medianDsec / medianBare;
  process.stdout.write(`create rate: ${settings.count} container sandboxes per round, parallelism ${settings.parallel}\n\n`);
  process.stdout.write(`round    dsec/s    bare/s   ratio\n`);
  for (const row of rows) process.stdout.write(`${String(row.round).padEnd(5)}${format(row.dsec)}  ${format(row.bare)}  ${(row.dsec / row.bare).toFixed(2).padStart(6)}\n`);
  process.stdout.write(`median${format(medianDsec).slice(1)}  ${format(medianBare)}  ${ratio.toFixed(2).padStart(6)}\n\n`);
  process.stdout.write(`target dsec >= 0.5x bare: ${ratio >= 0.5 ? 'met' : 'NOT met'} (${ratio.toFixed(2)}x)\n`);
}

main().catch((error: Error) => {
  process.stderr.write(`create-rate: ${error.stack ?? error.message}\n`);
  process.exit(1);
});
