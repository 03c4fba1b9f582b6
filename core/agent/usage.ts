/**
 * The node's usage report (`GET /v1/node/usage`, what `dsec nodes` shows):
 * sandbox counts by backend and status, what they request, what they use
 * (each running or paused sandbox's backend `usage` tap, read a bounded
 * number at a time), the host's memory, per-fleet figures, then the
 * `nodeUsage` hook for the density plugins' sections.
 *
 * CPU use is a rate: the CPU seconds a sandbox used since the previous
 * report, over the wall time between the two. The previous reading is kept
 * in memory only, one small record per sandbox, dropped when it goes.
 */
import { readFile } from 'node:fs/promises';
import type { Dsec } from '../dsec.js';
import type { NodeContext } from '../hooks.js';
import { LABEL_FLEET, type FleetUsage, type NodeInfo, type NodeUsage, type SandboxStatus, type SandboxUsage } from '../live.js';
import { forEachLimited } from './concurrency.js';
import type { SandboxEntry, SandboxStore } from './store.js';

/** Per-sandbox reads at once: each is a few cgroup files, but there may be thousands of sandboxes. */
const USAGE_CONCURRENCY = 16;
/** The fleet of sandboxes without a dsec.io/fleet label. */
export const NO_FLEET = '-';

interface CpuReading {
  readonly cpuSeconds: number;
  readonly atMs: number;
}

type Amount = { cpu: number; memoryMiB: number };

export interface UsageHost {
  readonly dsec: Dsec;
  readonly node: NodeContext;
  readonly store: SandboxStore;
  nodeInfo(): Promise<NodeInfo>;
}

export class UsageReporter {
  private readonly lastCpu = new Map<string, CpuReading>();

  constructor(private readonly host: UsageHost) {}

  /** Forget a sandbox that went (or was replaced: its counters start again). */
  forget(id: string): void {
    this.lastCpu.delete(id);
  }

  async report(): Promise<NodeUsage> {
    const info = await this.host.nodeInfo();
    const entries = this.host.store.all();
    const sandboxes: Record<string, Partial<Record<SandboxStatus, number>>> = {};
    const requested: Amount = { cpu: 0, memoryMiB: 0 };
    const used: Amount = { cpu: 0, memoryMiB: 0 };
    const fleets = new Map<string, { sandboxes: number; requested: Amount; used: Amount }>();
    const measured = await this.measure(entries);
    for (const entry of entries) {
      const { spec, status } = entry.ctx;
      const byStatus = (sandboxes[spec.backend] ??= {});
      byStatus[status] = (byStatus[status] ?? 0) + 1;
      const fleetName = spec.labels[LABEL_FLEET] ?? NO_FLEET;
      let fleet = fleets.get(fleetName);
      if (!fleet) fleets.set(fleetName, (fleet = { sandboxes: 0, requested: { cpu: 0, memoryMiB: 0 }, used: { cpu: 0, memoryMiB: 0 } }));
      fleet.sandboxes++;
      if (status === 'creating' || status === 'running' || status === 'paused') {
        add(requested, spec.resources);
        add(fleet.requested, spec.resources);
      }
      const use = measured.get(spec.id);
      if (use) {
        add(used, use);
        add(fleet.used, use);
      }
    }
    const usage: NodeUsage = {
      node: info.name,
      capacity: info.capacity,
      ...(info.allocatable ? { allocatable: info.allocatable } : {}),
      sandboxes,
      requested: rounded(requested),
      used: rounded(used),
      host: await hostMemory(),
      memory: {},
      qos: {},
      fleets: [...fleets.entries()]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([fleet, figures]): FleetUsage => ({ fleet, sandboxes: figures.sandboxes, requested: rounded(figures.requested), used: rounded(figures.used) })),
    };
    await this.host.dsec.hooks.nodeUsage
      .promise(this.host.node, usage)
      .catch((error: Error) => this.host.dsec.log.warn(`a nodeUsage tap failed (its figures are missing): ${error.message}`));
    return usage;
  }

  /** CPU cores and resident MiB per running or paused sandbox whose backend reports usage. */
  private async measure(entries: readonly SandboxEntry[]): Promise<Map<string, Amount>> {
    const measured = new Map<string, Amount>();
    const live = entries.filter((entry) => entry.ctx.status === 'running' || entry.ctx.status === 'paused');
    await forEachLimited(live, USAGE_CONCURRENCY, async (entry) => {
      const hook = this.host.dsec.hooks.usage.get(entry.ctx.spec.backend);
      if (!hook || !hook.isUsed()) return;
      let reading: SandboxUsage | undefined;
      try {
        reading = await hook.promise(entry.ctx);
      } catch (error) {
        this.host.dsec.log.debug(`sandbox ${entry.ctx.spec.id}: usage: ${(error as Error).message}`);
        return;
      }
      if (!reading) return;
      measured.set(entry.ctx.spec.id, { cpu: this.cpuRate(entry, reading.cpuSeconds), memoryMiB: reading.memoryMiB });
    });
    return measured;
  }

  /** Cores used since the previous report (or, the first time, on average since it was created). */
  private cpuRate(entry: SandboxEntry, cpuSeconds: number): number {
    const id = entry.ctx.spec.id;
    const nowMs = Date.now();
    const previous = this.lastCpu.get(id);
    this.lastCpu.set(id, { cpuSeconds, atMs: nowMs });
    // A counter that went back belongs to a new sandbox of the same id (a reaped fleet sandbox's replacement).
    if (previous && cpuSeconds >= previous.cpuSeconds && nowMs > previous.atMs) {
      return (cpuSeconds - previous.cpuSeconds) / ((nowMs - previous.atMs) / 1000);
    }
    const ageSeconds = (nowMs - Date.parse(entry.ctx.createdAt)) / 1000;
    return ageSeconds > 0 ? cpuSeconds / ageSeconds : 0;
  }
}

function add(total: Amount, amount: { cpu: number; memoryMiB: number }): void {
  total.cpu += amount.cpu;
  total.memoryMiB += amount.memoryMiB;
}

function rounded(amount: Amount): Amount {
  return { cpu: Math.round(amount.cpu * 1000) / 1000, memoryMiB: Math.round(amount.memoryMiB * 10) / 10 };
}

/** MemTotal and MemAvailable from /proc/meminfo, in MiB. */
export async function hostMemory(): Promise<{ memoryMiB: number; availableMiB: number }> {
  const text = await readFile('/proc/meminfo', 'utf8').catch(() => '');
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { memoryMiB: Math.floor(kib('MemTotal') / 1024), availableMiB: Math.floor(kib('MemAvailable') / 1024) };
}
