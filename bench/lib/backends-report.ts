/**
 * The printed report of bench/backends.ts: create-to-first-exec latency per
 * backend (median and p90 over the rounds, with the split into create and
 * first exec), the fncall warm pool's invoke latency beside it, memory per
 * idle sandbox three ways, the VMs' accelerator (and why) and guest memory,
 * and the ratios microVM and VM against container.
 */
import os from 'node:os';
import { fixed, median, table } from './measure.js';
import type { QemuMachine } from './sandbox-memory.js';
import { percentile } from './sandbox-memory.js';

export interface LatencySample {
  /** Create request until the agent answered it (running). */
  readonly createMs: number;
  /** The first exec (fncall: the fleet's first invoke) until it answered. */
  readonly execMs: number;
  readonly totalMs: number;
}

export interface IdleFigures {
  readonly count: number;
  /** The backend's own figure (the agent's usage report), per sandbox. */
  readonly accountingMiB: number;
  /** PSS of the sandbox's processes, per sandbox. */
  readonly pssMiB: number;
  /** MemAvailable drop (against the mean of the readings before the create and after the destroy), per sandbox. */
  readonly hostMiB: number;
  /** MemAvailable after the destroy minus before the create (the rest of the machine moving), MiB in all. */
  readonly driftMiB: number;
}

export interface BackendFigures {
  readonly backend: string;
  /** The untimed warm-up's create-to-first-exec: the first of its kind on a fresh agent (KVM probe, boot files built). */
  warmupMs?: number;
  readonly latency: LatencySample[];
  /** fncall only: invokes on a warm pool, ms each. */
  readonly warmInvokeMs: number[];
  readonly idle: IdleFigures[];
}

export interface VmNote {
  readonly accel: string;
  readonly reason: string;
  readonly machine: QemuMachine;
}

export type VmNotes = { microvm?: VmNote; vm?: VmNote };

interface ReportSettings {
  readonly settleSeconds: number;
  readonly guestMemoryMiB: number;
}

const ms = (value: number) => fixed(value, 0);
const mib = (value: number) => fixed(value, 1);
/** A ratio of two positive figures; '-' otherwise (a host drop at or below zero is noise, not a cost). */
const ratio = (top: number, bottom: number) => (top > 0 && bottom > 0 && Number.isFinite(top / bottom) ? `${fixed(top / bottom, 1)}x` : '-');

export function renderBackends(all: readonly BackendFigures[], notes: VmNotes, settings: ReportSettings): string {
  const out: string[] = [];
  const memTotal = Math.round(os.totalmem() / 2 ** 30);
  out.push(
    `backends: ${all.map((figures) => figures.backend).join(', ')} on one node agent (storage-local, no density plugins), ${os.cpus().length} cores, ${memTotal} GiB, kernel ${os.release()}, ${new Date().toISOString().slice(0, 10)}\n`,
    `  every sandbox: 1 CPU, ${settings.guestMemoryMiB} MiB (the VMs' guest memory, the containers' limit), one busybox layer; the full VM boots the test image (bench/lib/vm-image.ts)\n\n`,
  );

  out.push('create-to-first-exec, ms: from the create request to the first `echo ok` answered (fncall: a new pool of one worker, create -> its first invoke)\n');
  const total = (figures: BackendFigures) => figures.latency.map((sample) => sample.totalMs);
  out.push(
    table(
      ['backend', 'rounds', 'create', 'first exec', 'total median', 'total p90', 'min', 'max', 'warm-up (first of its kind)'],
      all.map((figures) => [
        figures.backend,
        String(figures.latency.length),
        ms(median(figures.latency.map((sample) => sample.createMs))),
        ms(median(figures.latency.map((sample) => sample.execMs))),
        ms(median(total(figures))),
        ms(percentile(total(figures), 90)),
        ms(Math.min(...total(figures))),
        ms(Math.max(...total(figures))),
        figures.warmupMs === undefined ? '-' : ms(figures.warmupMs),
      ]),
    ),
  );
  out.push('  create and first exec are medians of their own; warm-up: the first sandbox of its kind on the fresh agent, untimed in the rounds\n');
  const fncall = all.find((figures) => figures.backend === 'fncall');
  if (fncall && fncall.warmInvokeMs.length > 0) {
    out.push(
      `  fncall on a warm pool (one worker, created once): an invoke of \`sh\` running \`echo ok\` takes ${ms(median(fncall.warmInvokeMs))} ms median, ` +
        `${ms(percentile(fncall.warmInvokeMs, 90))} ms p90 (${fncall.warmInvokeMs.length} invokes, one at a time, between the other backends' rounds)\n`,
    );
  }

  out.push(`\nmemory per idle sandbox, MiB: K alive at once, read ${settings.settleSeconds} s after the last answered (medians over memory rounds)\n`);
  const idle = (figures: BackendFigures, key: keyof IdleFigures) => median(figures.idle.map((entry) => entry[key]));
  out.push(
    table(
      ['backend', 'K', "backend's figure", 'PSS', 'host (MemAvailable drop / K)', 'host per round', 'baseline drift per round, MiB'],
      all.map((figures) => [
        figures.backend,
        String(idle(figures, 'count')),
        mib(idle(figures, 'accountingMiB')),
        mib(idle(figures, 'pssMiB')),
        mib(idle(figures, 'hostMiB')),
        figures.idle.map((entry) => fixed(entry.hostMiB, 1)).join(' / '),
        figures.idle.map((entry) => fixed(entry.driftMiB, 0)).join(' / '),
      ]),
    ),
  );
  out.push(
    "  backend's figure: what the agent's usage report says. container and fncall: the cgroup's memory (memory.usage_in_bytes on v1, page cache included);\n" +
      '  microvm: qemu RssAnon + RssShmem; vm: qemu VmRSS. PSS: /proc/<pid>/smaps_rollup of qemu, or summed over the container cgroup\'s processes.\n' +
      '  host: MemAvailable against the mean of the readings before the create and after the destroy (steady drift cancels);\n' +
      '  drift: MemAvailable after the destroy minus before the create, the rest of the machine moving meanwhile\n',
  );

  const vmLines = (['microvm', 'vm'] as const).filter((kind) => notes[kind]);
  if (vmLines.length > 0) {
    out.push('\nVMs: accelerator and machine\n');
    for (const kind of vmLines) {
      const note = notes[kind]!;
      out.push(
        `  ${kind.padEnd(8)} ${note.accel.toUpperCase()} (${note.reason}); guest memory ${note.machine.memoryMiB} MiB, ${note.machine.vcpus} vCPU, -accel ${note.machine.accelArg}\n`,
      );
    }
  }

  const container = all.find((figures) => figures.backend === 'container');
  const others = all.filter((figures) => figures.backend === 'microvm' || figures.backend === 'vm' || figures.backend === 'fncall');
  if (container && others.length > 0) {
    out.push('\nratios against container (medians)\n');
    out.push(
      table(
        ['', 'create-to-first-exec', 'host memory', 'PSS', "backend's figure"],
        others.map((figures) => [
          `${figures.backend} / container`,
          ratio(median(total(figures)), median(total(container))),
          ratio(idle(figures, 'hostMiB'), idle(container, 'hostMiB')),
          ratio(idle(figures, 'pssMiB'), idle(container, 'pssMiB')),
          ratio(idle(figures, 'accountingMiB'), idle(container, 'accountingMiB')),
        ]),
      ),
    );
    if (!(idle(container, 'hostMiB') > 0)) {
      out.push(`  host memory: '-' as the container's own drop is not above zero here (below what MemAvailable resolves with K = ${idle(container, 'count')}; try --idle-count container=100)\n`);
    }
    if (fncall && fncall.warmInvokeMs.length > 0) {
      out.push(`  fncall warm invoke / container create-to-first-exec: ${fixed(median(fncall.warmInvokeMs) / median(total(container)), 3)}\n`);
    }
  }
  return out.join('');
}
