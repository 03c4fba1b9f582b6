/**
 * The node agent: owns the sandboxes of one node and drives each through the
 * lifecycle hooks. It knows no backend or storage by name; everything real
 * happens in plugin taps. The HTTP server (server.ts) is a thin skin on this.
 *
 * A failed create is cleaned up through the destroy hooks and its record is
 * KEPT with status `failed` and the error, so `list` (and so `plan`) shows
 * what went wrong; destroying it, or creating the same id again, removes it.
 */
import os from 'node:os';
import { mkdir } from 'node:fs/promises';
import type { Dsec } from '../dsec.js';
import { DsecError } from '../errors.js';
import type { NodeContext } from '../hooks.js';
import type { ExecRequest, ExecResult, LayerRecord, LayerRef, NodeInfo, SandboxInfo, SandboxSpec, SquashRecord, StorageStats } from '../live.js';
import type { LayerModel, Resources } from '../model.js';
import { DSEC_VERSION } from '../version.js';
import { trackBailer } from './bail-tracker.js';
import { isAgentMadeLayer, isBuildSandbox, LayerBuilder } from './build.js';
import { removeTree } from './files.js';
import { checkGcRequest, cleanInterrupted, collectLayers, listLayer, snapshotsDir, type GcResult, type LayerListing } from './layer-admin.js';
import { checkSnapshotInput, snapshotToLayer } from './snapshot.js';
import { SandboxStore, toInfo, type SandboxEntry } from './store.js';
import { checkExecRequest, checkResources, checkSandboxId, checkSpec } from './validate.js';

export interface NodeAgentOptions {
  readonly dsec: Dsec;
  /** The agent's folder: records, sockets, plugin data. */
  readonly root: string;
  /** @default os.hostname() */
  readonly name?: string;
}

export class NodeAgent {
  readonly dsec: Dsec;
  readonly root: string;
  readonly node: NodeContext;
  private readonly store: SandboxStore;
  private readonly refusedBy: WeakMap<object, string>;
  /** Makes `build` and `published` layers, which take a sandbox (or nothing) rather than a storage plugin. */
  private readonly builder: LayerBuilder;

  constructor(options: NodeAgentOptions) {
    this.dsec = options.dsec;
    this.root = options.root;
    this.node = Object.freeze({
      name: options.name ?? os.hostname(),
      root: options.root,
      log: options.dsec.log,
      capacity: Object.freeze({ cpu: os.cpus().length, memoryMiB: Math.floor(os.totalmem() / (1024 * 1024)) }),
      sandboxes: () => this.store.all().map((entry) => entry.ctx),
    });
    this.store = new SandboxStore(options.root, this.node);
    this.refusedBy = trackBailer(this.dsec.hooks.admit);
    this.builder = new LayerBuilder(this);
  }

  private get log() {
    return this.dsec.log;
  }

  // ------------------------------------------------------------------ start

  /**
   * Take over what a previous agent left: running sandboxes are re-adopted,
   * ones whose processes are gone are kept as `stopped` (so refresh sees the
   * drift), and creates that never finished are cleaned up.
   */
  async start(): Promise<void> {
    await mkdir(this.store.dir, { recursive: true, mode: 0o700 });
    const { records, orphans, unreadable } = await this.store.readAll();
    const adopted: string[] = [];
    const stopped: string[] = [];
    const cleaned: string[] = [];
    for (const { dir, error } of unreadable) this.log.warn(`ignoring ${dir}: unreadable record: ${error}`);
    for (const dir of orphans) {
      await removeTree(dir).catch((error: Error) => this.log.warn(`could not remove ${dir}: ${error.message}`));
    }
    for (const entry of records) {
      const id = entry.ctx.spec.id;
      if (entry.ctx.status === 'creating') {
        this.store.add(entry);
        await this.teardown(entry).then(
          () => cleaned.push(id),
          (error: Error) => this.log.warn(`sandbox ${id}: cleaning up an unfinished create failed: ${error.message}`),
        );
        continue;
      }
      this.store.add(entry);
      if (entry.ctx.status === 'failed') continue;
      await this.probe(entry, { force: true });
      (entry.ctx.status === 'stopped' ? stopped : adopted).push(id);
    }
    // A layer build never outlives its agent: its sandbox goes, and the next apply builds again.
    for (const entry of this.store.all().filter((candidate) => isBuildSandbox(candidate.ctx.spec))) {
      await this.teardown(entry).then(
        () => cleaned.push(entry.ctx.spec.id),
        (error: Error) => this.log.warn(`sandbox ${entry.ctx.spec.id}: removing an interrupted layer build failed: ${error.message}`),
      );
    }
    await cleanInterrupted(this.dsec.hooks, this.node).then(
      (released) => cleaned.push(...released),
      (error: Error) => this.log.warn(`cleaning up interrupted layer listings and snapshots failed: ${error.message}`),
    );
    // The storage plugin opens its store now: its format (or why it fell back to trees) is in the log from the start.
    await this.dsec.hooks.storageStats
      .promise(this.node)
      .catch((error: Error) => this.log.warn(`the storage plugin could not open its store: ${error.message}`));
    this.log.info(
      `started with ${this.store.size} sandbox(es): re-adopted [${adopted.join(', ')}], stopped [${stopped.join(', ')}], ` +
        `cleaned up unfinished [${cleaned.join(', ')}]; backends [${this.dsec.backends.join(', ')}]; plugins [${this.dsec.plugins.join(', ')}]`,
    );
  }

  /** Wait (bounded) for operations in flight, before the process exits. Sandboxes keep running. */
  async drain(timeoutMs = 10_000): Promise<void> {
    await this.store.drain(timeoutMs);
  }

  // ------------------------------------------------------------- sandboxes

  async createSandbox(input: unknown): Promise<SandboxInfo> {
    const spec = checkSpec(input);
    this.backendHook('provision', spec.backend, true);
    return this.store.withLock(spec.id, async () => {
      const existing = this.store.get(spec.id);
      if (existing) {
        await this.probe(existing, { force: true });
        if (existing.ctx.status === 'running' || existing.ctx.status === 'paused') return toInfo(existing);
        // A stopped or failed sandbox of this id: start again from nothing.
        this.log.info(`sandbox ${spec.id}: replacing the ${existing.ctx.status} one with a new create`);
        await this.teardown(existing);
      }
      return this.create(spec);
    });
  }

  private async create(spec: SandboxSpec): Promise<SandboxInfo> {
    const entry = this.store.newEntry(spec);
    const { ctx } = entry;
    const started = performance.now();
    await mkdir(ctx.dir, { recursive: true, mode: 0o700 });
    this.store.add(entry);
    // Three durable writes, each before what it protects: `creating` before
    // anything exists outside the folder (a restarted agent then cleans up);
    // the storage plugin's notes before the backend starts (what it mounted
    // may be needed to undo it); `running` before the caller hears of it.
    await this.store.persist(entry);
    try {
      const reason = await this.dsec.hooks.admit.promise(ctx);
      if (reason !== undefined) {
        throw new DsecError('DSEC_ADMISSION_REFUSED', { id: spec.id, plugin: this.refusedBy.get(ctx) ?? 'a plugin', reason });
      }
      await this.dsec.hooks.resolveLayers.promise(ctx);
      await this.store.persist(entry);
      const provisioned = await this.backendHook('provision', spec.backend, true).promise(ctx);
      if (provisioned !== true) {
        throw new DsecError('DSEC_BACKEND_FAILED', { backend: spec.backend, operation: 'provision', id: spec.id, message: 'no tap reported it running' });
      }
      ctx.status = 'running';
      // Tuning taps must not fail a running sandbox: report and go on.
      await this.dsec.hooks.started
        .promise(ctx)
        .catch((error: Error) => this.log.warn(`sandbox ${spec.id}: a started tap failed: ${error.message}`));
      // One write after the started taps, not one before them too: a crash in
      // between leaves `creating` on disk, and a create nobody was told of is
      // rightly cleaned up on restart.
      await this.store.persist(entry);
    } catch (error) {
      await this.failCreate(entry, error);
      throw asDsecError(error, spec.backend, 'create', spec.id);
    }
    this.log.info(`sandbox ${spec.id}: running on ${spec.backend} after ${Math.round(performance.now() - started)} ms`);
    return toInfo(entry);
  }

  /** Undo what a failed create made, and keep the record as `failed` with the reason. */
  private async failCreate(entry: SandboxEntry, error: unknown): Promise<void> {
    const id = entry.ctx.spec.id;
    let message = (error as Error).message;
    this.log.warn(`sandbox ${id}: create failed: ${message}`);
    try {
      await this.dsec.hooks.destroy.promise(entry.ctx);
    } catch (cleanupError) {
      message += `; cleaning up also failed: ${(cleanupError as Error).message}`;
      this.log.warn(`sandbox ${id}: cleanup after the failed create failed: ${(cleanupError as Error).message}`);
    }
    entry.ctx.status = 'failed';
    entry.error = message;
    await this.store.persist(entry).catch((writeError: Error) => this.log.warn(`sandbox ${id}: ${writeError.message}`));
  }

  /** Stop and remove a sandbox. Idempotent: an unknown id is already gone. */
  async destroySandbox(idInput: unknown): Promise<{ id: string; existed: boolean }> {
    const id = checkSandboxId(idInput);
    return this.store.withLock(id, async () => {
      const entry = this.store.get(id);
      if (!entry) return { id, existed: false };
      await this.teardown(entry);
      this.log.info(`sandbox ${id}: destroyed`);
      return { id, existed: true };
    });
  }

  /** Destroy hooks, then the folder and the record. On failure the record stays, marked failed. */
  private async teardown(entry: SandboxEntry): Promise<void> {
    const id = entry.ctx.spec.id;
    try {
      await this.dsec.hooks.destroy.promise(entry.ctx);
      await entry.writing?.catch(() => {});
      this.store.delete(id);
      // A write queued just before the delete may still be landing in the folder.
      await entry.writing?.catch(() => {});
      await removeTree(entry.ctx.dir);
    } catch (error) {
      if (!this.store.get(id)) this.store.add(entry);
      entry.removed = false;
      entry.ctx.status = 'failed';
      entry.error = `destroy failed: ${(error as Error).message}`;
      await this.store.persist(entry).catch(() => {});
      throw asDsecError(error, entry.ctx.spec.backend, 'destroy', id);
    }
  }

  async exec(idInput: unknown, requestInput: unknown): Promise<ExecResult> {
    const id = checkSandboxId(idInput);
    const request: ExecRequest = checkExecRequest(requestInput);
    const entry = this.running(id);
    const hook = this.backendHook('exec', entry.ctx.spec.backend);
    let result: ExecResult | undefined;
    try {
      result = await hook.promise(entry.ctx, request);
    } catch (error) {
      // The sandbox may have died since we last looked: say that, rather than the runtime's words.
      await this.probe(entry);
      if (entry.ctx.status !== 'running') throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: entry.ctx.status });
      throw error;
    }
    if (result === undefined) throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: entry.ctx.spec.backend, operation: 'exec' });
    entry.lastActivityAt = new Date().toISOString();
    // Recorded for the idle reaper; not worth making the caller wait for the fsync.
    void this.store.persist(entry).catch((error: Error) => this.log.warn(`sandbox ${id}: ${error.message}`));
    return result;
  }

  async updateSandbox(idInput: unknown, resourcesInput: unknown): Promise<SandboxInfo> {
    const id = checkSandboxId(idInput);
    return this.store.withLock(id, async () => {
      const entry = this.running(id);
      const problems: string[] = [];
      const resources: Resources = checkResources(resourcesInput, entry.ctx.spec.resources, problems);
      if (problems.length > 0) throw new DsecError('DSEC_AGENT_REQUEST', { message: problems.join('; ') });
      const done = await this.backendHook('update', entry.ctx.spec.backend).promise(entry.ctx, resources);
      if (done !== true) throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: entry.ctx.spec.backend, operation: 'update' });
      entry.ctx.spec = { ...entry.ctx.spec, resources };
      await this.store.persist(entry);
      this.log.info(`sandbox ${id}: resources now cpu=${resources.cpu} memoryMiB=${resources.memoryMiB} pids=${resources.pids}`);
      return toInfo(entry);
    });
  }

  async get(idInput: unknown): Promise<SandboxInfo> {
    const id = checkSandboxId(idInput);
    const entry = this.store.get(id);
    if (!entry) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
    await this.probe(entry);
    return toInfo(entry);
  }

  /** Sandboxes whose labels include every `key=value` of the selector. */
  async list(selector: Readonly<Record<string, string>> = {}): Promise<SandboxInfo[]> {
    const wanted = Object.entries(selector);
    const entries = this.store
      .all()
      .filter((entry) => wanted.every(([key, value]) => entry.ctx.spec.labels[key] === value));
    // Always ask the backend: refresh must see a sandbox killed a moment ago,
    // and the container backend's probe reads /proc without spawning anything.
    await forEachLimited(entries, 8, (entry) => this.probe(entry));
    return entries.map(toInfo).sort((a, b) => a.id.localeCompare(b.id));
  }

  async nodeInfo(): Promise<NodeInfo> {
    const storage = await this.dsec.hooks.storageStats.promise(this.node).catch(() => undefined);
    return {
      name: this.node.name,
      backends: this.dsec.backends,
      capacity: { cpu: os.cpus().length, memoryMiB: Math.floor(os.totalmem() / (1024 * 1024)) },
      sandboxes: this.store.size,
      agentVersion: DSEC_VERSION,
      pid: process.pid,
      ...(storage ? { storage: { plugin: storage.plugin, format: storage.format, ...(storage.reason ? { reason: storage.reason } : {}) } } : {}),
    };
  }

  // ----------------------------------------------------------------- layers

  async digestLayer(layer: LayerModel): Promise<string> {
    if (isAgentMadeLayer(layer)) return this.builder.digest(layer);
    const digest = await this.dsec.hooks.digestLayer.promise({ layer, node: this.node });
    if (digest === undefined) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'digestLayer' });
    return digest;
  }

  async publishLayer(layer: LayerModel): Promise<LayerRecord> {
    if (isAgentMadeLayer(layer)) return this.builder.publish(layer);
    const record = await this.dsec.hooks.publishLayer.promise({ layer, node: this.node });
    if (record === undefined) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'publishLayer' });
    this.log.info(`layer ${record.name}@${record.version} published (${record.digest})`);
    return record;
  }

  async listLayers(): Promise<LayerRecord[]> {
    // No storage plugin means no layers, which is the honest answer for refresh.
    return (await this.dsec.hooks.listLayers.promise(this.node)) ?? [];
  }

  async unpublishLayer(name: string, version: string): Promise<void> {
    const user = this.store.all().find((entry) => entry.ctx.spec.layers.some((layer) => layer.name === name && layer.version === version));
    if (user) throw new DsecError('DSEC_LAYER_IN_USE', { ref: `${name}@${version}`, id: user.ctx.spec.id });
    const done = await this.dsec.hooks.unpublishLayer.promise(this.node, name, version);
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
    const record = await this.dsec.hooks.squashLayers.promise(this.node, layers);
    if (record === undefined) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'squashLayers' });
    this.log.info(`layers ${layers.map((layer) => `${layer.name}@${layer.version}`).join(' + ')} squashed into ${record.digest}`);
    return record;
  }

  /** Publish a sandbox's writable layer as `name@version` (`{as, kind?, exclude?}`); see snapshot.ts. */
  async snapshotSandbox(idInput: unknown, input: unknown): Promise<LayerRecord> {
    const id = checkSandboxId(idInput);
    const request = checkSnapshotInput(input);
    return this.store.withLock(id, async () => {
      const entry = this.store.get(id);
      if (!entry) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
      await this.probe(entry, { force: true });
      if (entry.ctx.status !== 'running' && entry.ctx.status !== 'paused') {
        throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: entry.ctx.status });
      }
      return snapshotToLayer(entry.ctx, request, { hooks: this.dsec.hooks, tempRoot: snapshotsDir(this.node), publish: (layer) => this.publishLayer(layer), log: this.log });
    });
  }

  /** Unpublish the layers no sandbox and no config layer (`keep`) uses; see layer-admin.ts. */
  async gcLayers(input: unknown): Promise<GcResult> {
    return collectLayers(checkGcRequest(input), {
      listLayers: () => this.listLayers(),
      sandboxes: () => this.store.all().map((entry) => entry.ctx.spec),
      unpublish: (name, version) => this.unpublishLayer(name, version),
    });
  }

  /** Every entry of a published layer. */
  async layerListing(name: string, version: string): Promise<LayerListing> {
    return listLayer(name, version, { hooks: this.dsec.hooks, node: this.node, listLayers: () => this.listLayers() });
  }

  /** The storage plugin's format and mounts, with read counters. */
  async storageStats(): Promise<StorageStats> {
    const stats = await this.dsec.hooks.storageStats.promise(this.node);
    if (stats === undefined) throw new DsecError('DSEC_STORAGE_MISSING', { operation: 'storageStats' });
    return stats;
  }

  // ---------------------------------------------------------------- helpers

  private running(id: string): SandboxEntry {
    const entry = this.store.get(id);
    if (!entry) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
    if (entry.ctx.status !== 'running') throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: entry.ctx.status });
    return entry;
  }

  /** The HookMap hook for a backend kind; none tapped -> UNKNOWN (provision) or UNSUPPORTED (the rest). */
  private backendHook<K extends 'provision' | 'exec' | 'update' | 'probe'>(kind: K, backend: string, isProvision = false) {
    const hook = this.dsec.hooks[kind].get(backend) as ReturnType<Dsec['hooks'][K]['for']> | undefined;
    if (!hook || !hook.isUsed()) {
      if (isProvision) throw new DsecError('DSEC_BACKEND_UNKNOWN', { backend, known: this.dsec.backends.join(', ') || 'none' });
      throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend, operation: kind });
    }
    return hook;
  }

  /** Ask the backend what became of a sandbox we believe is up; a vanished one becomes `stopped`. */
  private async probe(entry: SandboxEntry, options: { force?: boolean } = {}): Promise<void> {
    const { ctx } = entry;
    const up = ctx.status === 'running' || ctx.status === 'paused';
    if (!up && !(options.force && ctx.status === 'stopped')) return;
    // `force`: the caller holds the lock; otherwise an operation in flight knows better.
    if (this.store.isBusy(ctx.spec.id) && !options.force) return;
    const hook = this.dsec.hooks.probe.get(ctx.spec.backend);
    if (!hook || !hook.isUsed()) return;
    try {
      const seen = await hook.promise(ctx);
      if (seen !== undefined && seen !== ctx.status) {
        this.log.info(`sandbox ${ctx.spec.id}: was ${ctx.status}, the backend reports ${seen}`);
        ctx.status = seen;
        await this.store.persist(entry);
      }
    } catch (error) {
      this.log.warn(`sandbox ${ctx.spec.id}: probe failed: ${(error as Error).message}`);
    }
  }
}

function asDsecError(error: unknown, backend: string, operation: string, id: string): DsecError {
  if (error instanceof DsecError) return error;
  return new DsecError('DSEC_BACKEND_FAILED', { backend, operation, id, message: (error as Error).message }, { cause: error });
}

async function forEachLimited<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await work(items[next++]);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
