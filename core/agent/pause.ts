/**
 * Pausing and resuming sandboxes, and waking a paused one for a call.
 *
 * Pause = the backend's `pause` tap freezes every process, then the `paused`
 * hook lets density taps reclaim memory (a failing tap is logged: the sandbox
 * stays paused). Resume = `resuming` (taps restore limits and prefetch), then
 * the backend's `resume` tap. Both run under the sandbox's lock.
 *
 * A paused sandbox is never in anyone's way: an exec (or file call) on it
 * goes through `awake`, which resumes it first. The count of calls in flight
 * and the `pausing` mark are read and set without an await in between, so a
 * pause never freezes a running exec, and a call arriving during a pause
 * waits for it and then resumes the sandbox.
 */
import type { Dsec } from '../dsec.js';
import { asBackendFailure, DsecError } from '../errors.js';
import type { BatchOutcome, SandboxInfo, SandboxStatus, SandboxTarget } from '../live.js';
import { backendHook } from './backend-hooks.js';
import { forEachLimited } from './concurrency.js';
import { toInfo, type SandboxEntry, type SandboxStore } from './store.js';

/** How many sandboxes of a batch call are paused or resumed at once. */
const BATCH_CONCURRENCY = 8;

export interface PauseHost {
  readonly dsec: Dsec;
  readonly store: SandboxStore;
  /** Ask the backend what became of the sandbox; the caller holds its lock. A vanished one becomes `stopped` (persisted). */
  probe(entry: SandboxEntry): Promise<void>;
}

/** A call (exec, file) admitted into a running sandbox; `done` when it finished. */
export interface AwakeCall {
  readonly entry: SandboxEntry;
  done(): void;
}

export class PauseControl {
  constructor(private readonly host: PauseHost) {}

  private get log() {
    return this.host.dsec.log;
  }

  /** Pause one sandbox by id (a no-op on a paused one). */
  pauseSandbox(id: string): Promise<SandboxInfo> {
    return this.host.store.withLock(id, async () => {
      const entry = this.found(id);
      await this.host.probe(entry);
      await this.pause(entry);
      return toInfo(entry);
    });
  }

  /** Resume one sandbox by id (a no-op on a running one). */
  resumeSandbox(id: string): Promise<SandboxInfo> {
    return this.host.store.withLock(id, async () => {
      const entry = this.found(id);
      await this.resume(entry);
      return toInfo(entry);
    });
  }

  pauseSandboxes(target: SandboxTarget): Promise<BatchOutcome[]> {
    return this.batch(target, (id) => this.pauseSandbox(id));
  }

  resumeSandboxes(target: SandboxTarget): Promise<BatchOutcome[]> {
    return this.batch(target, (id) => this.resumeSandbox(id));
  }

  /**
   * Freeze a running sandbox; the caller holds its lock. Refused while a
   * call runs in it: freezing an exec half-way would hold its caller until
   * someone resumes.
   */
  async pause(entry: SandboxEntry): Promise<void> {
    const { ctx } = entry;
    const { id, backend } = ctx.spec;
    if (ctx.status === 'paused') return;
    if (ctx.status !== 'running') throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: ctx.status });
    const hook = backendHook(this.host.dsec, 'pause', backend);
    const calls = entry.calls ?? 0;
    if (calls > 0) {
      throw new DsecError('DSEC_SANDBOX_BUSY', { id, operation: 'pause', reason: `${calls} exec(s) in flight; pause it once they finished` });
    }
    // From here a new call waits on the lock (see awake) instead of starting.
    entry.pausing = true;
    const started = performance.now();
    try {
      const done = await hook.promise(ctx);
      if (done !== true) throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend, operation: 'pause' });
    } catch (error) {
      entry.pausing = false;
      // Half-frozen or not at all: say what the backend sees now.
      await this.host.probe(entry);
      throw asBackendFailure(error, backend, 'pause', id);
    }
    ctx.status = 'paused';
    entry.pausedAt = new Date().toISOString();
    entry.pausing = false;
    const frozenMs = Math.round(performance.now() - started);
    await this.host.dsec.hooks.paused.promise(ctx).catch((error: Error) => this.log.warn(`sandbox ${id}: a paused tap failed (it stays paused): ${error.message}`));
    await this.host.store.persist(entry);
    this.log.info(`sandbox ${id}: paused (frozen in ${frozenMs} ms, ${Math.round(performance.now() - started)} ms with the paused taps)`);
  }

  /**
   * Thaw a paused sandbox; the caller holds its lock. One whose processes
   * were killed from outside becomes `stopped` (persisted) and is reported
   * as not running, never left looking paused.
   */
  async resume(entry: SandboxEntry): Promise<void> {
    const { ctx } = entry;
    const { id, backend } = ctx.spec;
    if (ctx.status === 'running') return;
    await this.host.probe(entry);
    if (statusNow(entry) === 'running') return; // thawed from outside meanwhile
    if (statusNow(entry) !== 'paused') throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: ctx.status });
    const hook = backendHook(this.host.dsec, 'resume', backend);
    const started = performance.now();
    await this.host.dsec.hooks.resuming.promise(ctx).catch((error: Error) => this.log.warn(`sandbox ${id}: a resuming tap failed (resuming anyway): ${error.message}`));
    try {
      const done = await hook.promise(ctx);
      if (done !== true) throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend, operation: 'resume' });
    } catch (error) {
      await this.host.probe(entry);
      if (statusNow(entry) === 'stopped') throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: ctx.status });
      throw asBackendFailure(error, backend, 'resume', id);
    }
    ctx.status = 'running';
    entry.pausedAt = undefined;
    // A process killed while frozen dies only once thawed: look again.
    await this.host.probe(entry);
    if (statusNow(entry) !== 'running') {
      this.log.warn(`sandbox ${id}: its processes were gone when it was resumed; it is ${ctx.status}`);
      throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: ctx.status });
    }
    await this.host.store.persist(entry);
    this.log.info(`sandbox ${id}: resumed in ${Math.round(performance.now() - started)} ms`);
  }

  /**
   * Admit a call into a sandbox: resumed first when paused (or being
   * paused), counted as in flight until `done`, which records the activity.
   */
  async awake(id: string): Promise<AwakeCall> {
    const current = this.found(id);
    // The fast path: check and mark with no await in between (see the header).
    if (current.ctx.status === 'running' && !current.pausing) return this.admit(current);
    return this.host.store.withLock(id, async () => {
      const entry = this.found(id);
      if (entry.ctx.status === 'paused') {
        this.log.info(`sandbox ${id}: resuming it for a call`);
        await this.resume(entry);
      }
      if (entry.ctx.status !== 'running') throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: entry.ctx.status });
      return this.admit(entry);
    });
  }

  private admit(entry: SandboxEntry): AwakeCall {
    entry.calls = (entry.calls ?? 0) + 1;
    entry.lastActivityAt = new Date().toISOString();
    let finished = false;
    return {
      entry,
      done: () => {
        if (finished) return;
        finished = true;
        entry.calls = Math.max(0, (entry.calls ?? 1) - 1);
        entry.lastActivityAt = new Date().toISOString();
        // Recorded for the idle reaper (in memory at once, on disk every few seconds); never awaited by the caller.
        this.host.store.persistActivity(entry);
      },
    };
  }

  /** Each targeted sandbox on its own, past failures: unknown ids are outcomes too. */
  private async batch(target: SandboxTarget, one: (id: string) => Promise<SandboxInfo>): Promise<BatchOutcome[]> {
    const ids = this.select(target);
    const outcomes: BatchOutcome[] = new Array(ids.length);
    await forEachLimited(
      ids.map((id, index) => ({ id, index })),
      BATCH_CONCURRENCY,
      async ({ id, index }) => {
        try {
          outcomes[index] = { id, ok: true, info: await one(id) };
        } catch (error) {
          const failure = error instanceof DsecError ? error : new DsecError('DSEC_AGENT_INTERNAL', { message: (error as Error).message });
          outcomes[index] = { id, ok: false, error: { code: failure.code, message: failure.message } };
        }
      },
    );
    return outcomes;
  }

  /** The ids named, then every other sandbox whose labels match (as `list` selects), in id order. */
  private select(target: SandboxTarget): string[] {
    const chosen = new Set(target.ids ?? []);
    const wanted = Object.entries(target.labels ?? {});
    if (target.labels !== undefined) {
      for (const entry of this.host.store.all()) {
        if (wanted.every(([key, value]) => entry.ctx.spec.labels[key] === value)) chosen.add(entry.ctx.spec.id);
      }
    }
    return [...chosen].sort();
  }

  private found(id: string): SandboxEntry {
    const entry = this.host.store.get(id);
    if (!entry) throw new DsecError('DSEC_SANDBOX_NOT_FOUND', { id });
    return entry;
  }
}

/** The status as it is now (a probe may have changed it since the compiler last looked). */
function statusNow(entry: SandboxEntry): SandboxStatus {
  return entry.ctx.status;
}
