/**
 * An in-memory Provider for unit tests of the engine's pure logic. Honest:
 * it stores layers and sandboxes in Maps, enforces layer immutability and
 * in-use checks, is idempotent where the real one is, and counts how many
 * calls run at once.
 */
import { DsecError } from '../../../core/errors.js';
import {
  RESERVED_LABEL_PREFIX,
  type BatchOutcome,
  type LayerRecord,
  type LiveView,
  type NodeInfo,
  type NodeUsage,
  type PoolInfo,
  type SandboxInfo,
  type SandboxSpec,
  type SandboxTarget,
  type SandboxUpdate,
} from '../../../core/live.js';
import type { LayerModel } from '../../../core/model.js';
import type { FleetPoolRequest, Provider } from '../../../core/provider.js';

export class FakeProvider implements Provider {
  readonly name = 'fake';
  readonly layers = new Map<string, LayerRecord>();
  readonly sandboxes = new Map<string, SandboxInfo>();
  /** What digestLayer/publishLayer compute for a layer ref; defaults to `sha256:<ref>`. */
  readonly contents = new Map<string, string>();
  /** Make a call fail: return an error to throw. */
  failWhen: (call: string, target: string) => Error | undefined = () => undefined;
  delayMs = 0;
  running = 0;
  maxRunning = 0;
  readonly calls: string[] = [];
  /** Every updateSandbox call's change, in order. */
  readonly updates: { id: string; change: SandboxUpdate }[] = [];
  /** The density settings each sandbox was created or last updated with. */
  readonly densities = new Map<string, SandboxSpec['density']>();
  /** What nodes() reports besides the basics: an admission policy, say. */
  nodeExtras: Partial<NodeInfo> = {};
  private clock = Date.parse('2025-01-01T00:00:00Z');

  digestOf(layer: { ref: string }): string {
    return this.contents.get(layer.ref) ?? `sha256:${layer.ref}`;
  }

  private async track<T>(call: string, target: string, body: () => T): Promise<T> {
    this.calls.push(`${call} ${target}`);
    this.running += 1;
    this.maxRunning = Math.max(this.maxRunning, this.running);
    try {
      if (this.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
      else await Promise.resolve();
      const error = this.failWhen(call, target);
      if (error) throw error;
      return body();
    } finally {
      this.running -= 1;
    }
  }

  async refresh(): Promise<LiveView> {
    return {
      nodes: await this.nodes(),
      layers: [...this.layers.values()],
      sandboxes: [...this.sandboxes.values()],
      ...(this.keepsPools ? { pools: [...this.pools.values()] } : {}),
    };
  }

  async digestLayer(layer: LayerModel): Promise<string> {
    return this.digestOf(layer);
  }

  publishLayer(layer: LayerModel): Promise<LayerRecord> {
    return this.track('publishLayer', layer.ref, () => {
      const digest = this.digestOf(layer);
      const existing = this.layers.get(layer.ref);
      if (existing && existing.digest !== digest) {
        throw new DsecError('DSEC_LAYER_IMMUTABLE', { ref: layer.ref, existing: existing.digest, digest });
      }
      if (existing) return existing;
      const record: LayerRecord = {
        name: layer.name,
        version: layer.version,
        kind: layer.kind,
        digest,
        sizeBytes: 1,
        files: 1,
        publishedAt: new Date(this.clock).toISOString(),
      };
      this.layers.set(layer.ref, record);
      return record;
    });
  }

  unpublishLayer(name: string, version: string): Promise<void> {
    const ref = `${name}@${version}`;
    return this.track('unpublishLayer', ref, () => {
      if (!this.layers.has(ref)) throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref });
      for (const sandbox of this.sandboxes.values()) {
        if (sandbox.layers.some((layer) => `${layer.name}@${layer.version}` === ref)) {
          throw new DsecError('DSEC_LAYER_IN_USE', { ref, id: sandbox.id });
        }
      }
      this.layers.delete(ref);
    });
  }

  createSandbox(spec: SandboxSpec): Promise<SandboxInfo> {
    return this.track('createSandbox', spec.id, () => {
      const existing = this.sandboxes.get(spec.id);
      if (existing) return existing;
      for (const layer of spec.layers) {
        if (this.layers.get(`${layer.name}@${layer.version}`)?.digest !== layer.digest) {
          throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref: `${layer.name}@${layer.version}` });
        }
      }
      this.clock += 1000;
      const info: SandboxInfo = {
        id: spec.id,
        node: 'node-1',
        backend: spec.backend,
        status: 'running',
        labels: spec.labels,
        resources: spec.resources,
        layers: spec.layers,
        createdAt: new Date(this.clock).toISOString(),
        ...(spec.ttl ? { ttl: spec.ttl } : {}),
      };
      this.densities.set(spec.id, spec.density);
      this.sandboxes.set(spec.id, info);
      return info;
    });
  }

  updateSandbox(id: string, change: SandboxUpdate): Promise<SandboxInfo> {
    return this.track('updateSandbox', id, () => {
      const existing = this.sandboxes.get(id);
      if (!existing) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
      this.updates.push({ id, change });
      const { ttl: _ttl, ...rest } = existing;
      const ttl = change.ttl ?? existing.ttl;
      // As the agent does: dsec's own labels stay, the rest is replaced by the fleet's.
      const reserved = Object.fromEntries(Object.entries(existing.labels).filter(([key]) => key.startsWith(RESERVED_LABEL_PREFIX)));
      const updated: SandboxInfo = {
        ...rest,
        resources: change.resources ?? existing.resources,
        ...(ttl && Object.keys(ttl).length > 0 ? { ttl } : {}),
        ...(change.labels ? { labels: { ...change.labels, ...reserved } } : {}),
      };
      if (change.density) this.densities.set(id, change.density);
      this.sandboxes.set(id, updated);
      return updated;
    });
  }

  private batch(target: SandboxTarget, status: 'paused' | 'running'): Promise<BatchOutcome[]> {
    return this.track(status === 'paused' ? 'pauseSandboxes' : 'resumeSandboxes', JSON.stringify(target), () => {
      const ids = new Set(target.ids ?? []);
      const labels = Object.entries(target.labels ?? {});
      const outcomes: BatchOutcome[] = [];
      for (const id of ids) {
        if (!this.sandboxes.has(id)) {
          outcomes.push({ id, ok: false, error: { code: 'DSEC_SANDBOX_NOT_FOUND', message: `no sandbox ${id}` } });
        }
      }
      for (const sandbox of this.sandboxes.values()) {
        const picked = ids.has(sandbox.id) || (labels.length > 0 && labels.every(([key, value]) => sandbox.labels[key] === value));
        if (!picked) continue;
        const info: SandboxInfo = { ...sandbox, status };
        this.sandboxes.set(sandbox.id, info);
        outcomes.push({ id: sandbox.id, ok: true, info });
      }
      return outcomes;
    });
  }

  pauseSandboxes(target: SandboxTarget): Promise<BatchOutcome[]> {
    return this.batch(target, 'paused');
  }

  resumeSandboxes(target: SandboxTarget): Promise<BatchOutcome[]> {
    return this.batch(target, 'running');
  }

  /** The engine never claims; here only so the fake is a whole Provider. */
  async claimSandbox(): Promise<never> {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'fake', operation: 'claim' });
  }

  async releaseSandbox(): Promise<never> {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'fake', operation: 'release' });
  }

  async acquireSandbox(): Promise<never> {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'fake', operation: 'acquire' });
  }

  async sandboxAgent(): Promise<never> {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'fake', operation: 'calls into a sandbox' });
  }

  async renewClaim(): Promise<never> {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'fake', operation: 'renew' });
  }

  /**
   * Pool records as a node keeps them, once `keepsPools` is on (refresh then
   * reports them, so the planner checks them); every setPool call, in order.
   */
  keepsPools = false;
  readonly pools = new Map<string, PoolInfo>();
  readonly poolCalls: FleetPoolRequest[] = [];

  async setPool(pool: FleetPoolRequest): Promise<void> {
    this.poolCalls.push(pool);
    const { shares, ...spec } = pool;
    const ready = Object.values(shares).reduce((sum, count) => sum + count, 0);
    this.pools.set(`${pool.lineage}/${pool.fleet}`, {
      ...spec,
      ready,
      node: 'node-1',
      digest: 'fake',
      counts: { ready, creating: 0, claimed: 0, kept: 0, waiting: 0 },
    });
  }

  async deletePool(fleet: string, lineage: string): Promise<void> {
    this.pools.delete(`${lineage}/${fleet}`);
  }

  async nodeUsage(): Promise<NodeUsage[]> {
    return [];
  }

  destroySandbox(id: string, options: { unlessClaimed?: boolean } = {}): Promise<void> {
    return this.track('destroySandbox', id, () => {
      const claim = this.sandboxes.get(id)?.claim;
      if (options.unlessClaimed && claim) throw new DsecError('DSEC_SANDBOX_CLAIMED', { id, holder: claim.holder });
      this.sandboxes.delete(id);
    });
  }

  async exec(): Promise<never> {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'fake', operation: 'exec' });
  }

  async readFile(): Promise<never> {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'fake', operation: 'readFile' });
  }

  async writeFile(): Promise<never> {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'fake', operation: 'writeFile' });
  }

  async invokeFunction(): Promise<never> {
    throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'fake', operation: 'invoke' });
  }

  async listSandboxes(labels?: Readonly<Record<string, string>>): Promise<SandboxInfo[]> {
    return [...this.sandboxes.values()].filter((sandbox) =>
      Object.entries(labels ?? {}).every(([key, value]) => sandbox.labels[key] === value),
    );
  }

  async nodes(): Promise<NodeInfo[]> {
    return [
      {
        name: 'node-1',
        backends: ['container'],
        capacity: { cpu: 2, memoryMiB: 4096 },
        sandboxes: this.sandboxes.size,
        agentVersion: 'fake',
        pid: process.pid,
        ...this.nodeExtras,
      },
    ];
  }

  async close(): Promise<void> {}
}
