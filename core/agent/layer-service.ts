/**
 * The node's layers, as the agent's API serves them: digest, publish, list,
 * unpublish, squash, snapshot a sandbox into a layer, garbage-collect,
 * list one layer's tree, and the store's stats. Storage plugins do the work
 * through the storage hooks; `build` and `published` layers are made here
 * (LayerBuilder), since they need a sandbox or nothing rather than a store.
 */
import type { Dsec } from '../dsec.js';
import { DsecError } from '../errors.js';
import type { NodeContext } from '../hooks.js';
import type { ExecRequest, ExecResult, LayerRecord, LayerRef, SandboxInfo, SandboxSpec, SquashRecord, StorageStats } from '../live.js';
import type { LayerModel } from '../model.js';
import { isAgentMadeLayer, LayerBuilder } from './build.js';
import { checkGcRequest, collectLayers, listLayer, snapshotsDir, type GcResult, type LayerListing } from './layer-admin.js';
import { checkSnapshotInput, snapshotToLayer } from './snapshot.js';
import type { SandboxEntry, SandboxStore } from './store.js';
import { checkSandboxId } from './validate.js';

/** What the layer service needs of the agent: its sandboxes (a build runs in one). */
export interface LayerServiceHost {
  readonly dsec: Dsec;
  readonly node: NodeContext;
  readonly store: SandboxStore;
  createSandbox(spec: SandboxSpec): Promise<SandboxInfo>;
  exec(id: string, request: ExecRequest): Promise<ExecResult>;
  destroySandbox(id: string): Promise<unknown>;
  /** Ask the backend what became of the sandbox; the caller holds its lock. */
  probe(entry: SandboxEntry): Promise<void>;
}

export class LayerService {
  private readonly builder: LayerBuilder;

  constructor(private readonly host: LayerServiceHost) {
    this.builder = new LayerBuilder({
      node: host.node,
      listLayers: () => this.listLayers(),
      createSandbox: (spec) => host.createSandbox(spec),
      exec: (id, request) => host.exec(id, request),
      snapshotSandbox: (id, request) => this.snapshotSandbox(id, request),
      destroySandbox: (id) => host.destroySandbox(id),
    });
  }

  private get hooks() {
    return this.host.dsec.hooks;
  }

  private get log() {
    return this.host.dsec.log;
  }

  async digestLayer(layer: LayerModel): Promise<string> {
    if (isAgentMadeLayer(layer)) return this.builder.digest(layer);
    const digest = await this.hooks.digestLayer.promise({ layer, node: this.host.node });
    if (digest === undefined) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'digestLayer' });
    return digest;
  }

  async publishLayer(layer: LayerModel): Promise<LayerRecord> {
    if (isAgentMadeLayer(layer)) return this.builder.publish(layer);
    const record = await this.hooks.publishLayer.promise({ layer, node: this.host.node });
    if (record === undefined) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'publishLayer' });
    this.log.info(`layer ${record.name}@${record.version} published (${record.digest})`);
    return record;
  }

  async listLayers(): Promise<LayerRecord[]> {
    // No storage plugin means no layers, which is the honest answer for refresh.
    return (await this.hooks.listLayers.promise(this.host.node)) ?? [];
  }

  async unpublishLayer(name: string, version: string): Promise<void> {
    const user = this.host.store.all().find((entry) => entry.ctx.spec.layers.some((layer) => layer.name === name && layer.version === version));
    if (user) throw new DsecError('DSEC_LAYER_IN_USE', { ref: `${name}@${version}`, id: user.ctx.spec.id });
    const done = await this.hooks.unpublishLayer.promise(this.host.node, name, version);
    if (done !== true) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'unpublishLayer' });
    this.log.info(`layer ${name}@${version} unpublished`);
  }

  /** Merge a run of consecutive published layers (bottom to top) into one image; see the squashLayers hook. */
  async squashLayers(input: unknown): Promise<SquashRecord> {
    const layers: LayerRef[] = [];
    const valid =
      Array.isArray(input) &&
      input.every((layer: Partial<LayerRef> | null) => {
        if (typeof layer?.name !== 'string' || typeof layer.version !== 'string' || typeof layer.digest !== 'string') return false;
        layers.push({ name: layer.name, version: layer.version, digest: layer.digest });
        return true;
      });
    if (!valid) throw new DsecError('DSEC_AGENT_REQUEST', { message: 'body must be {"layers": [{name, version, digest}, ...]}, bottom to top' });
    const record = await this.hooks.squashLayers.promise(this.host.node, layers);
    if (record === undefined) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'squashLayers' });
    this.log.info(`layers ${layers.map((layer) => `${layer.name}@${layer.version}`).join(' + ')} squashed into ${record.digest}`);
    return record;
  }

  /** Publish a sandbox's writable layer as `name@version` (`{as, kind?, exclude?}`); see snapshot.ts. */
  async snapshotSandbox(idInput: unknown, input: unknown): Promise<LayerRecord> {
    const id = checkSandboxId(idInput);
    const request = checkSnapshotInput(input);
    return this.host.store.withLock(id, async () => {
      const entry = this.host.store.get(id);
      if (!entry) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
      await this.host.probe(entry);
      if (entry.ctx.status !== 'running' && entry.ctx.status !== 'paused') {
        throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: entry.ctx.status });
      }
      return snapshotToLayer(entry.ctx, request, {
        hooks: this.hooks,
        tempRoot: snapshotsDir(this.host.node),
        publish: (layer) => this.publishLayer(layer),
        log: this.log,
      });
    });
  }

  /** Unpublish the layers no sandbox and no config layer (`keep`) uses; see layer-admin.ts. */
  async gcLayers(input: unknown): Promise<GcResult> {
    return collectLayers(checkGcRequest(input), {
      listLayers: () => this.listLayers(),
      sandboxes: () => this.host.store.all().map((entry) => entry.ctx.spec),
      unpublish: (name, version) => this.unpublishLayer(name, version),
    });
  }

  /** Every entry of a published layer. */
  async layerListing(name: string, version: string): Promise<LayerListing> {
    return listLayer(name, version, { hooks: this.hooks, node: this.host.node, listLayers: () => this.listLayers() });
  }

  /** The storage plugin's format and mounts, with read counters. */
  async storageStats(): Promise<StorageStats> {
    const stats = await this.hooks.storageStats.promise(this.host.node);
    if (stats === undefined) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'storageStats' });
    return stats;
  }
}
