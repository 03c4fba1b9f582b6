/**
 * The four backends side by side, in one run on one real node agent
 * (storage-local and the four backend plugins, no density plugins: no KSM
 * merging, no paging out):
 *
 *   latency  create-to-first-exec: from the create request until the first
 *            exec (`sh -c 'echo ok'`) answered `ok`. For fncall, a fresh pool
 *            of one worker (its fleet's first invoke), and beside it the
 *            per-task latency of an invoke on a warm pool (the reason fncall
 *            exists). Rounds interleave the backends in an order that rotates;
 *            VMs take fewer rounds (seconds per boot under TCG).
 *   memory   K idle sandboxes of a backend alive at once (each answered
 *            `echo ok`), after a settle time: the backend's own accounting
 *            (the agent's usage report: cgroup memory for containers and
 *            fncall workers, qemu's resident memory for VMs), the PSS of the
 *            sandbox's processes (qemu, or the container's cgroup.procs;
 *            shared pages split fairly), and the host's MemAvailable drop
 *            (against the mean of the readings before the create and after
 *            the destroy, so steady drift of other work cancels), all per
 *            sandbox. Backends take turns, in an order that rotates per
 *            memory round; one backend's sandboxes are all destroyed before
 *            the next one's start.
 *
 * Printed: a table, the accelerator (KVM or TCG, with the probe's reason)
 * and the guest memory beside the VM figures, and the ratios microVM and VM
 * against container. No target: figures. Needs root, runc, qemu and the
 * guest kernel for the VM backends. Cleans up every sandbox and qemu, even
 * on failure or ^C.
 *
 *   npm run build && node dist/bench/backends.js [--backends container,fncall,microvm,vm]
 *     [--rounds N | --rounds container=15,fncall=15,microvm=5,vm=5] [--idle-count N | --idle-count container=20,vm=3]
 *     [--settle 15] [--memory-rounds 3] [--guest-memory 256] [--invokes 20]
 */
import { mkdtemp, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { LABEL_FLEET, type DiskImageRef, type LayerRef, type SandboxInfo, type SandboxSpec } from '../core/live.js';
import { renderBackends, type BackendFigures, type IdleFigures, type LatencySample, type VmNotes } from './lib/backends-report.js';
import { LayerAgent, refOf, sandboxSpec } from './lib/layer-agent.js';
import { pool } from './lib/measure.js';
import { runWhenMain } from './lib/main.js';
import {
  cgroupPssMiB,
  killQemuUnder,
  probedAccel,
  pssMiB,
  qemuMachineOf,
  readSandboxRecord,
  sampledMemAvailableMiB,
  sleep,
} from './lib/sandbox-memory.js';
import { buildTestVmImage } from './lib/vm-image.js';

export const BACKENDS = ['container', 'fncall', 'microvm', 'vm'] as const;
export type Backend = (typeof BACKENDS)[number];
const isVm = (backend: Backend) => backend === 'microvm' || backend === 'vm';

export interface BackendsSettings {
  backends: Backend[];
  /** Latency rounds per backend. */
  rounds: Record<Backend, number>;
  /** Idle sandboxes alive at once in the memory phase, per backend. */
  idle: Record<Backend, number>;
  /** Seconds between the last idle sandbox answering and the reading (and, up to 5, after the destroy before the baseline again). */
  settleSeconds: number;
  memoryRounds: number;
  /** Every sandbox's memory (the VMs' guest memory, the containers' limit), MiB. */
  guestMemoryMiB: number;
  /** Invokes on the warm pool per latency round. */
  invokes: number;
}

const USAGE =
  'usage: backends [--backends container,fncall,microvm,vm] [--rounds N|backend=N,...] [--idle-count N|backend=N,...] ' +
  '[--settle S] [--memory-rounds N] [--guest-memory MiB] [--invokes N]';

export function parseBackendsArgs(argv: readonly string[]): BackendsSettings {
  const settings: BackendsSettings = {
    backends: [...BACKENDS],
    rounds: { container: 15, fncall: 15, microvm: 5, vm: 5 },
    idle: { container: 20, fncall: 20, microvm: 3, vm: 3 },
    settleSeconds: 15,
    memoryRounds: 3,
    guestMemoryMiB: 256,
    invokes: 20,
  };
  const whole = (text: string | undefined, min: number) => {
    const value = Number(text);
    if (!Number.isInteger(value) || value < min) throw new Error(USAGE);
    return value;
  };
  const perBackend = (text: string | undefined, into: Record<Backend, number>) => {
    if (text !== undefined && /^\d+$/.test(text)) {
      for (const backend of BACKENDS) into[backend] = whole(text, 1);
      return;
    }
    for (const pair of (text ?? '').split(',')) {
      const [name, value] = pair.split('=');
      if (!BACKENDS.includes(name as Backend)) throw new Error(`${USAGE}\n(unknown backend '${name}')`);
      into[name as Backend] = whole(value, 1);
    }
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = argv[++i];
    if (flag === '--backends') {
      const names = (value ?? '').split(',').filter(Boolean);
      const unknown = names.filter((name) => !BACKENDS.includes(name as Backend));
      if (names.length === 0 || unknown.length > 0) throw new Error(`${USAGE}\n(unknown backend(s): ${unknown.join(', ')})`);
      settings.backends = BACKENDS.filter((backend) => names.includes(backend));
    } else if (flag === '--rounds') perBackend(value, settings.rounds);
    else if (flag === '--idle-count') perBackend(value, settings.idle);
    else if (flag === '--settle') settings.settleSeconds = whole(value, 0);
    else if (flag === '--memory-rounds') settings.memoryRounds = whole(value, 1);
    else if (flag === '--guest-memory') settings.guestMemoryMiB = whole(value, 128);
    else if (flag === '--invokes') settings.invokes = whole(value, 1);
    else throw new Error(USAGE);
  }
  return settings;
}

const ECHO = { runtime: 'sh', code: 'echo ok' };
/** A create (a VM boot under TCG on a loaded machine included) or destroy longer than this is a hang. */
const REQUEST_TIMEOUT_MS = 180_000;
const WARM_FLEET = 'warm';

let interrupted = false;
const checkInterrupted = () => {
  if (interrupted) throw new Error('interrupted');
};

/** Sleep in short steps, so a ^C during a settle is seen at once. */
async function settle(seconds: number): Promise<void> {
  const until = Date.now() + seconds * 1000;
  while (Date.now() < until) {
    checkInterrupted();
    await sleep(Math.min(250, until - Date.now()));
  }
}

export async function runBackends(settings: BackendsSettings): Promise<boolean> {
  const work = await realpath(await mkdtemp(path.join(tmpdir(), 'dsec-bench-backends-')));
  const onSignal = () => {
    if (interrupted) {
      killQemuUnder(work); // leaving at once: at least no VM keeps running
      process.exit(130);
    }
    interrupted = true;
    process.stderr.write('backends: interrupted; finishing the step in flight, then cleaning up (^C again: kill the VMs, leave the rest behind)\n');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const figures = new Map<Backend, BackendFigures>(settings.backends.map((backend) => [backend, { backend, latency: [], warmInvokeMs: [], idle: [] }]));
  const notes: VmNotes = {};
  let agent: LayerAgent | undefined;
  try {
    const image = settings.backends.includes('vm') ? await buildTestVmImage() : undefined;
    agent = await LayerAgent.start(work, [
      { name: 'storage-local', options: {} },
      { name: 'backend-container', options: {} },
      { name: 'backend-fncall', options: {} },
      { name: 'backend-microvm', options: {} },
      { name: 'backend-vm', options: {} },
    ]);
    const layer = refOf(await agent.publish({ ref: 'busybox@1.0.0', name: 'busybox', version: '1.0.0', kind: 'base', source: { type: 'busybox', path: '/bin/busybox' } }));
    const bench = new Bench(agent, layer, image, settings);

    // Warm-up, untimed: the KVM probe, the microVM's kernel, initramfs and layer image, the VM image are made once here.
    for (const backend of settings.backends) {
      const warm = await bench.firstExec(backend, `warm-${backend}`);
      figures.get(backend)!.warmupMs = warm.totalMs;
      process.stderr.write(`backends: warm-up ${backend}: ${(warm.totalMs / 1000).toFixed(1)} s\n`);
      checkInterrupted();
    }
    if (settings.backends.includes('fncall')) await bench.create('fncall', `${WARM_FLEET}-0`, WARM_FLEET);

    const maxRounds = Math.max(...settings.backends.map((backend) => settings.rounds[backend]));
    for (let round = 0; round < maxRounds; round++) {
      for (const backend of rotated(settings.backends, round).filter((name) => round < settings.rounds[name])) {
        checkInterrupted();
        figures.get(backend)!.latency.push(await bench.firstExec(backend, `lat-${backend}-${round}`));
        if (backend === 'fncall') figures.get(backend)!.warmInvokeMs.push(...(await bench.warmInvokes(settings.invokes)));
      }
      process.stderr.write(`backends: latency round ${round + 1}/${maxRounds} done\n`);
    }
    if (settings.backends.includes('fncall')) await agent.destroy([`${WARM_FLEET}-0`], 1);

    for (let round = 0; round < settings.memoryRounds; round++) {
      for (const backend of rotated(settings.backends, round)) {
        checkInterrupted();
        const idle = await bench.idlePhase(backend, settings.idle[backend], round, notes);
        figures.get(backend)!.idle.push(idle);
        process.stderr.write(`backends: memory ${backend} (${idle.count} idle): host ${idle.hostMiB.toFixed(1)} MiB per sandbox\n`);
      }
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    const problems = agent ? await agent.dispose() : [];
    const left = killQemuUnder(work);
    if (left > 0) problems.push(`${left} qemu process(es) were still running under ${work} after the agent stopped: killed`);
    await rm(work, { recursive: true, force: true }).catch((error: Error) => problems.push(`removing ${work}: ${error.message}`));
    for (const problem of problems) process.stderr.write(`backends: cleanup: ${problem}\n`);
  }
  process.stdout.write(renderBackends([...figures.values()], notes, settings));
  return true;
}

/** The backends in the order of round `round`: rotated by one each round, so none is always first. */
function rotated<T>(items: readonly T[], round: number): T[] {
  return items.map((_, index) => items[(index + round) % items.length]);
}

class Bench {
  constructor(
    private readonly agent: LayerAgent,
    private readonly layer: LayerRef,
    private readonly image: DiskImageRef | undefined,
    private readonly settings: BackendsSettings,
  ) {}

  spec(backend: Backend, id: string, fleet?: string): SandboxSpec {
    return sandboxSpec(id, [this.layer], { bench: 'backends', ...(fleet ? { [LABEL_FLEET]: fleet } : {}) }, {
      backend,
      resources: { cpu: 1, memoryMiB: this.settings.guestMemoryMiB, pids: 256 },
      ...(backend === 'vm' ? { image: this.image } : {}),
    });
  }

  async create(backend: Backend, id: string, fleet?: string): Promise<void> {
    const info = await this.agent.client.request<SandboxInfo>('POST', '/v1/sandboxes', { spec: this.spec(backend, id, fleet) }, REQUEST_TIMEOUT_MS);
    if (info.status !== 'running') throw new Error(`${backend} sandbox ${id} is ${info.status} after create: ${info.error ?? ''}\n${this.agent.logTail(10)}`);
  }

  async echo(backend: Backend, id: string): Promise<void> {
    const result = await this.agent.client.exec(id, { cmd: ['sh', '-c', 'echo ok'], timeoutMs: 60_000 });
    if (result.exitCode !== 0 || result.stdout !== 'ok\n') throw new Error(`exec in the ${backend} sandbox ${id} answered ${JSON.stringify(result)}`);
  }

  async invoke(fleet: string): Promise<void> {
    const result = await this.agent.client.request<{ exitCode: number | null; stdout: string }>(
      'POST',
      `/v1/functions/${encodeURIComponent(fleet)}/invoke`,
      ECHO,
      REQUEST_TIMEOUT_MS,
    );
    if (result.exitCode !== 0 || result.stdout !== 'ok\n') throw new Error(`an invoke on fleet ${fleet} answered ${JSON.stringify(result)}`);
  }

  /**
   * One sandbox from the create request to its first exec's answer, then
   * destroyed (untimed). For fncall the sandbox is the one worker of a new
   * fleet, and the first exec is that fleet's first invoke.
   */
  async firstExec(backend: Backend, id: string): Promise<LatencySample> {
    const fleet = backend === 'fncall' ? id : undefined;
    const started = performance.now();
    try {
      await this.create(backend, id, fleet);
      const created = performance.now();
      if (fleet) await this.invoke(fleet);
      else await this.echo(backend, id);
      const answered = performance.now();
      return { createMs: created - started, execMs: answered - created, totalMs: answered - started };
    } finally {
      await this.agent.destroy([id], 1);
    }
  }

  /** `count` invokes one after the other on the warm pool: each one's latency, ms. */
  async warmInvokes(count: number): Promise<number[]> {
    const latencies: number[] = [];
    for (let i = 0; i < count; i++) {
      const started = performance.now();
      await this.invoke(WARM_FLEET);
      latencies.push(performance.now() - started);
    }
    return latencies;
  }

  /**
   * `count` idle sandboxes of one backend at once: MemAvailable before,
   * create them (each answering `echo ok`), settle, read the three figures,
   * destroy them, settle, MemAvailable again (the drift says how much the
   * rest of the machine moved meanwhile).
   */
  async idlePhase(backend: Backend, count: number, round: number, notes: VmNotes): Promise<IdleFigures> {
    const fleet = `idle-${backend}-${round}`;
    const ids = Array.from({ length: count }, (_, index) => `${fleet}-${index}`);
    const before = await sampledMemAvailableMiB();
    let reading: Omit<IdleFigures, 'driftMiB' | 'hostMiB'> & { loaded: number };
    try {
      await pool(count, isVm(backend) ? 2 : 4, async (index) => {
        checkInterrupted();
        await this.create(backend, ids[index], fleet);
        await this.echo(backend, ids[index]);
      });
      await settle(this.settings.settleSeconds);
      const usage = await this.agent.client.nodeUsage();
      const accounted = usage.fleets.find((entry) => entry.fleet === fleet)?.used.memoryMiB ?? Number.NaN;
      let pss = 0;
      for (const id of ids) pss += this.pssOf(backend, id, notes);
      const loaded = await sampledMemAvailableMiB();
      reading = { count, accountingMiB: accounted / count, pssMiB: pss / count, loaded };
    } finally {
      await this.agent.destroy(ids, 4);
    }
    await settle(Math.min(this.settings.settleSeconds, 5));
    const after = await sampledMemAvailableMiB();
    // The baseline is the mean of before and after: a machine whose other work drifts steadily cancels out.
    const { loaded, ...figures } = reading;
    return { ...figures, hostMiB: ((before + after) / 2 - loaded) / count, driftMiB: after - before };
  }

  /** The PSS of one sandbox's processes; for a VM, its machine and accelerator are noted on the way. */
  private pssOf(backend: Backend, id: string, notes: VmNotes): number {
    const record = readSandboxRecord(this.agent.sandboxDir(id));
    if (!isVm(backend)) {
      const dir = record.cgroups?.memory ?? record.cgroups?.unified;
      if (!dir) throw new Error(`the ${backend} sandbox ${id} has no memory cgroup on record`);
      return cgroupPssMiB(dir);
    }
    const pid = record.backend.pid;
    if (pid === undefined) throw new Error(`the ${backend} sandbox ${id} has no qemu pid on record`);
    const args = record.backend.args ?? record.backend.argv ?? [];
    const probe = probedAccel(path.join(this.agent.root, 'backend-microvm')) ?? probedAccel(path.join(this.agent.root, 'backend-vm'));
    notes[backend as 'microvm' | 'vm'] ??= {
      accel: record.backend.accel ?? '?',
      reason: record.backend.accelReason ?? probe?.reason ?? '(no reason on record)',
      machine: qemuMachineOf(args),
    };
    return pssMiB(pid);
  }
}

runWhenMain(import.meta.url, 'backends', (argv) => runBackends(parseBackendsArgs(argv)));
