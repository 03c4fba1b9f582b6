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
import path from 'node:path';
import { mkdir } from 'node:fs/promises';
import type { Dsec } from '../dsec.js';
import { asBackendFailure, DsecError } from '../errors.js';
import type { NodeContext } from '../hooks.js';
import {
  LABEL_FLEET,
  selectorLabels,
  type BatchOutcome,
  type ExecResult,
  type NodeInfo,
  type NodeUsage,
  type SandboxInfo,
  type SandboxSpec,
} from '../live.js';
import { adoptPrevious } from './adopt.js';
import { ClaimService } from './claim-service.js';
import { PoolManager, type PlacementRecorder } from './pools.js';
import { backendHook } from './backend-hooks.js';
import { NodeDescriber } from './node-info.js';
import { trackBailer } from './bail-tracker.js';
import { SandboxCalls } from './calls.js';
import { ProcessCalls } from './processes.js';
import { forEachLimited } from './concurrency.js';
import { removeTree } from './files.js';
import { LayerService } from './layer-service.js';
import { PauseControl } from './pause.js';
import { DEFAULT_REAP_INTERVAL_MS, Reaper, reapViewOf, type ReapDecision, type ReapView } from './reaper.js';
import { SandboxSettings } from './settings.js';
import { SandboxStore, toInfo, type SandboxEntry } from './store.js';
import { UsageReporter } from './usage.js';
import { checkSandboxId, checkSpec, checkTarget } from './validate.js';

export interface NodeAgentOptions {
  readonly dsec: Dsec;
  /** The agent's folder: records, sockets, plugin data. */
  readonly root: string;
  /** @default os.hostname() */
  readonly name?: string;
  /** How often the reaper looks for sandboxes past their TTLs (0: never). @default 5000 */
  readonly reapIntervalMs?: number;
  /** A cluster agent: where it serves over TCP (`host:port`) and its labels, reported in nodeInfo() (node-info.ts). */
  readonly cluster?: { readonly address: string; readonly labels: Readonly<Record<string, string>> };
  /** A cluster agent: where the sandboxes its pools make are recorded (etcd placements). */
  readonly placements?: PlacementRecorder;
}

export class NodeAgent {
  readonly dsec: Dsec;
  readonly root: string;
  readonly node: NodeContext;
  readonly store: SandboxStore;
  /** Layer operations (publish, list, squash, snapshot, gc...); the API calls it directly. */
  readonly layers: LayerService;
  private readonly refusedBy: WeakMap<object, string>;
  private readonly pauses: PauseControl;
  /** Calls into a sandbox: exec, files, FnCall tasks (calls.ts); the API calls it directly. */
  readonly calls: SandboxCalls;
  /** Background commands and sessions (processes.ts); the API calls it directly. */
  readonly processes: ProcessCalls;
  private readonly settings: SandboxSettings;
  private readonly usage: UsageReporter;
  private readonly reaper: Reaper | undefined;
  private readonly describer: NodeDescriber;
  /** The warm pools of the fleets applied to this node (pools.ts). */
  readonly pools: PoolManager;
  /** Claims and pools: acquire, claim, renew, release; the pool records (claim-service.ts). The API calls it directly. */
  readonly claims: ClaimService;

  constructor(options: NodeAgentOptions) {
    this.dsec = options.dsec;
    this.root = options.root;
    this.node = Object.freeze({
      name: options.name ?? os.hostname(),
      root: options.root,
      log: options.dsec.log,
      capacity: Object.freeze({ cpu: os.cpus().length, memoryMiB: Math.floor(os.totalmem() / (1024 * 1024)) }),
      sandboxes: () => this.store.all().map((entry) => entry.ctx),
      recreateSandbox: (id: string, reason: string) => this.recreate(id, reason),
    });
    this.store = new SandboxStore(options.root, this.node);
    this.refusedBy = trackBailer(this.dsec.hooks.admit);
    this.pools = new PoolManager(
      {
        node: this.node,
        store: this.store,
        log: this.log,
        create: (spec) => this.createSandbox(spec),
        destroy: (id) => this.destroySandbox(id),
        persist: (entry) => this.store.persist(entry),
        ...(options.placements ? { placements: options.placements } : {}),
      },
      path.join(options.root, 'pools'),
    );
    this.claims = new ClaimService({ dsec: this.dsec, store: this.store, pools: this.pools, teardown: (entry) => this.teardown(entry) });
    const probe = (entry: SandboxEntry) => this.probe(entry, { force: true });
    this.layers = new LayerService({
      dsec: this.dsec,
      node: this.node,
      store: this.store,
      createSandbox: (spec) => this.createSandbox(spec),
      exec: (id, request) => this.exec(id, request),
      destroySandbox: (id) => this.destroySandbox(id),
      probe,
    });
    this.pauses = new PauseControl({ dsec: this.dsec, store: this.store, probe });
    this.calls = new SandboxCalls({
      dsec: this.dsec,
      node: this.node,
      store: this.store,
      pauses: this.pauses,
      probe: (entry) => this.probe(entry),
      checkHolder: (entry, holder) => this.claims.checkHolder(entry, holder),
    });
    this.processes = new ProcessCalls(this.dsec, this.calls);
    this.settings = new SandboxSettings(this.dsec, this.store);
    this.describer = new NodeDescriber({ dsec: this.dsec, node: this.node, sandboxCount: () => this.store.size, cluster: options.cluster });
    this.usage = new UsageReporter({ dsec: this.dsec, node: this.node, store: this.store, nodeInfo: () => this.nodeInfo() });
    const reapIntervalMs = options.reapIntervalMs ?? DEFAULT_REAP_INTERVAL_MS;
    this.reaper =
      reapIntervalMs > 0
        ? new Reaper({ intervalMs: reapIntervalMs, log: this.log, views: () => this.store.all().map(reapViewOf), reap: (id, decide) => this.reap(id, decide) })
        : undefined;
  }

  private get log() {
    return this.dsec.log;
  }

  // ------------------------------------------------------------------ start

  /**
   * Take over what a previous agent left (adopt.ts), then start the reaper
   * and the pools' refills.
   */
  async start(): Promise<void> {
    const { adopted, stopped, cleaned } = await adoptPrevious({
      dsec: this.dsec,
      node: this.node,
      store: this.store,
      pools: this.pools,
      teardown: (entry) => this.teardown(entry),
      probe: (entry) => this.probe(entry, { force: true }),
    });
    // The storage plugin opens its store now: its format (or why it fell back to trees) is in the log from the start.
    await this.describer.storageSummary().catch((error: Error) => this.log.warn(`the storage plugin could not open its store: ${error.message}`));
    this.log.info(
      `started with ${this.store.size} sandbox(es): re-adopted [${adopted.join(', ')}], stopped [${stopped.join(', ')}], ` +
        `cleaned up unfinished [${cleaned.join(', ')}]; backends [${this.dsec.backends.join(', ')}]; plugins [${this.dsec.plugins.join(', ')}]`,
    );
    // Node-wide set-up (a swap device, KSM); the agent serves without a tap that failed.
    await this.dsec.hooks.agentStarted.promise(this.node).catch((error: Error) => this.log.warn(`an agentStarted tap failed: ${error.message}`));
    this.reaper?.start();
    // Refills a crash left undone (a hand-out whose refill never started, a refill cleaned up half-made).
    this.pools.start();
  }

  /** Stop the reaper and wait (bounded) for operations in flight, before the process exits. Sandboxes keep running. */
  async drain(timeoutMs = 10_000): Promise<void> {
    this.pools.stop();
    await Promise.race([this.reaper?.stop(), new Promise((resolve) => setTimeout(resolve, timeoutMs).unref())]);
    await this.store.drain(timeoutMs);
  }

  // ------------------------------------------------------------- sandboxes

  async createSandbox(input: unknown): Promise<SandboxInfo> {
    const spec = checkSpec(input);
    backendHook(this.dsec, 'provision', spec.backend);
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
      // Density taps set the traits every process starts with; persisted with the storage notes, before anything runs.
      await this.dsec.hooks.prepare.promise(ctx);
      await this.store.persist(entry);
      const provisioned = await backendHook(this.dsec, 'provision', spec.backend).promise(ctx);
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
      throw asBackendFailure(error, spec.backend, 'create', spec.id);
    }
    this.log.info(`sandbox ${spec.id}: running on ${spec.backend} after ${Math.round(performance.now() - started)} ms`);
    // A pool's waiters may be waiting for just this one.
    this.pools.sandboxChanged(entry);
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

  /**
   * Stop and remove a sandbox. Idempotent: an unknown id is already gone.
   * `unlessClaimed`: refused (DSEC_SANDBOX_CLAIMED) when a holder has it now
   * (apply's deletes: a sandbox acquired since the plan was made is spared).
   * Its pool tops up after it.
   */
  async destroySandbox(idInput: unknown, options: { unlessClaimed?: boolean } = {}): Promise<{ id: string; existed: boolean }> {
    const id = checkSandboxId(idInput);
    return this.store.withLock(id, async () => {
      const entry = this.store.get(id);
      if (!entry) return { id, existed: false };
      if (options.unlessClaimed && entry.claim) throw new DsecError('DSEC_SANDBOX_CLAIMED', { id, holder: entry.claim.holder });
      await this.teardown(entry);
      this.log.info(`sandbox ${id}: destroyed`);
      this.pools.sandboxChanged(entry);
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
      this.usage.forget(id);
      // A write queued just before the delete may still be landing in the folder.
      await entry.writing?.catch(() => {});
      await removeTree(entry.ctx.dir);
    } catch (error) {
      if (!this.store.get(id)) this.store.add(entry);
      entry.removed = false;
      entry.ctx.status = 'failed';
      entry.error = `destroy failed: ${(error as Error).message}`;
      await this.store.persist(entry).catch(() => {});
      throw asBackendFailure(error, entry.ctx.spec.backend, 'destroy', id);
    }
  }

  /** Run a command in a sandbox; a paused one is resumed first (see calls.ts, as for the file calls). */
  exec(idInput: unknown, requestInput: unknown): Promise<ExecResult> {
    return this.calls.exec(idInput, requestInput);
  }

  /** Change a live sandbox's resources (the backend applies them), TTLs or density settings; see SandboxUpdate. */
  async updateSandbox(idInput: unknown, changeInput: unknown): Promise<SandboxInfo> {
    return this.settings.update(checkSandboxId(idInput), changeInput);
  }

  async pauseSandbox(idInput: unknown): Promise<SandboxInfo> {
    return this.pauses.pauseSandbox(checkSandboxId(idInput));
  }

  async resumeSandbox(idInput: unknown): Promise<SandboxInfo> {
    return this.pauses.resumeSandbox(checkSandboxId(idInput));
  }

  async pauseSandboxes(targetInput: unknown): Promise<BatchOutcome[]> {
    return this.pauses.pauseSandboxes(checkTarget(targetInput));
  }

  async resumeSandboxes(targetInput: unknown): Promise<BatchOutcome[]> {
    return this.pauses.resumeSandboxes(checkTarget(targetInput));
  }


  /**
   * The reaper's work on one sandbox, under its lock: decide again (a call
   * or a claim may have come meanwhile), destroy it, and create a fleet's
   * sandbox again with the same id and spec.
   */
  private reap(id: string, decide: (view: ReapView) => ReapDecision | undefined): Promise<void> {
    return this.renew(id, (entry) => {
      const decision = decide(reapViewOf(entry));
      if (!decision) return undefined;
      const pool = this.pools.poolOf(entry);
      if (pool && (entry.claim || entry.kept)) {
        // Used by a holder: recycled. Its pool made a fresh one when it was handed out.
        return { message: `reaped because ${decision.reason}; recycled`, createAgain: false };
      }
      if (pool) return { message: `reaped because ${decision.reason}; re-created from its pool's template`, createAgain: true, spec: { ...pool.template, id } };
      const fleet = entry.ctx.spec.labels[LABEL_FLEET];
      return { message: `reaped because ${decision.reason}${fleet !== undefined ? `; re-created for fleet ${fleet}` : ''}`, createAgain: fleet !== undefined };
    });
  }

  /** NodeContext.recreateSandbox: a backend's pooled sandbox destroyed and created again from its spec, under its lock. */
  private recreate(id: string, reason: string): Promise<void> {
    return this.renew(id, () => ({ message: `re-created because ${reason}`, createAgain: true }));
  }

  /** Under the sandbox's lock: if `decide` says so, tear it down and, with `createAgain`, create it anew from the same spec (same id). */
  private async renew(
    id: string,
    decide: (entry: SandboxEntry) => { message: string; createAgain: boolean; spec?: SandboxSpec } | undefined,
  ): Promise<void> {
    await this.store.withLock(id, async () => {
      const entry = this.store.get(id);
      const decision = entry && decide(entry);
      if (!entry || !decision) return;
      const spec = decision.spec ?? entry.ctx.spec;
      this.log.info(`sandbox ${id}: ${decision.message}`);
      await this.teardown(entry);
      if (decision.createAgain) await this.create(spec);
      else {
        if (this.pools.poolOf(entry)) await this.pools.dropPlacement(id);
        this.pools.sandboxChanged(entry);
      }
    });
  }

  async get(idInput: unknown): Promise<SandboxInfo> {
    const id = checkSandboxId(idInput);
    const entry = this.store.get(id);
    if (!entry) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
    await this.probe(entry);
    return toInfo(entry);
  }

  /** Sandboxes whose labels (their own and their claim's) include every `key=value` of the selector; with `holder`, only those it holds. */
  async list(selector: Readonly<Record<string, string>> = {}, options: { holder?: string } = {}): Promise<SandboxInfo[]> {
    const wanted = Object.entries(selector);
    const entries = this.store
      .all()
      .filter((entry) => options.holder === undefined || entry.claim?.holder === options.holder)
      .filter((entry) => {
        const labels = selectorLabels({ labels: entry.ctx.spec.labels, claim: entry.claim });
        return wanted.every(([key, value]) => labels[key] === value);
      });
    // Always ask the backend: refresh must see a sandbox killed a moment ago,
    // and the container backend's probe reads /proc without spawning anything.
    await forEachLimited(entries, 8, (entry) => this.probe(entry));
    return entries.map(toInfo).sort((a, b) => a.id.localeCompare(b.id));
  }

  /** What the node is and admits; the describeNode taps refine it (admission adds allocatable, requested, its policy). */
  nodeInfo(): Promise<NodeInfo> {
    return this.describer.describe();
  }

  /** `dsec nodes`: counts, requested and used CPU and memory, per fleet, and the density plugins' figures; see usage.ts. */
  nodeUsage(): Promise<NodeUsage> {
    return this.usage.report();
  }

  // ---------------------------------------------------------------- helpers

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
        if (seen !== 'paused') entry.pausedAt = undefined;
        await this.store.persist(entry);
      }
    } catch (error) {
      this.log.warn(`sandbox ${ctx.spec.id}: probe failed: ${(error as Error).message}`);
    }
  }
}

