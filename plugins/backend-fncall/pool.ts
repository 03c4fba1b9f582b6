/**
 * The FnCall pools of one node: per fleet, a FIFO queue of tasks and the
 * fleet's workers (its running fncall sandboxes, found by the fleet label).
 * A free worker takes the task at the head of its fleet's queue; when the
 * task is done the worker is reset (run-task.ts) and takes the next one, or,
 * if it cannot be trusted again (timeout, guest agent gone, failed reset),
 * it is replaced: the agent destroys it and creates it again from its spec
 * in the background, and the pool serves with the others meanwhile.
 *
 * The pool keeps in memory only what a worker is doing and its guest agent
 * connection. The sandboxes themselves are the agent's: the pool reads them
 * from the node each time, so a worker created, re-created or destroyed by
 * anyone is seen at once. A running worker the pool holds no connection to
 * (the agent restarted) is replaced rather than trusted: its socket is gone
 * after its first reset, and a task may have been cut off half-way.
 */
import {
  DsecError,
  LABEL_FLEET,
  type FunctionResult,
  type Logger,
  type NodeContext,
  type SandboxContext,
} from '../../core/plugin-api.js';
import { BACKEND_KIND } from './options.js';
import type { TaskOutcome, WorkerChannel } from './run-task.js';
import type { PreparedTask } from './task.js';

/** A worker the pool holds a connection to. */
interface Slot {
  readonly ctx: SandboxContext;
  readonly channel: WorkerChannel;
  /** The agent marked it running (the `started` hook): it may take tasks. */
  ready: boolean;
  busy: boolean;
}

interface Waiter {
  readonly task: PreparedTask;
  readonly queuedAt: number;
  readonly resolve: (result: FunctionResult) => void;
  readonly reject: (error: Error) => void;
}

export interface PoolHost {
  readonly log: Logger;
  /** Run one task on a worker (run-task.ts). */
  run(slot: { ctx: SandboxContext; channel: WorkerChannel }, task: PreparedTask): Promise<TaskOutcome>;
  /** The most tasks a fleet's queue holds. */
  readonly maxQueued: number;
}

/** A fleet's sandboxes as the pool sees them. */
interface FleetView {
  readonly free: Slot[];
  /** Busy, starting or being replaced: a task queued now will be served. */
  readonly coming: number;
  readonly total: number;
}

export class FncallPools {
  private readonly slots = new Map<string, Slot>();
  /** Sandbox ids the agent is destroying and creating again for the pool. */
  private readonly replacing = new Set<string>();
  /**
   * Workers given up on: never handed a task again, never asked to be
   * re-created twice. A re-created worker is a new context (same id), so a
   * re-create that did not happen (it failed, or the node cannot) ends here
   * rather than in a loop.
   */
  private readonly retired = new WeakSet<SandboxContext>();
  private readonly queues = new Map<string, Waiter[]>();
  private node: NodeContext | undefined;

  constructor(private readonly host: PoolHost) {}

  /** A worker was provisioned and its guest agent answers; it takes tasks once `ready`. */
  attach(ctx: SandboxContext, channel: WorkerChannel): void {
    this.node = ctx.node;
    this.slots.get(ctx.spec.id)?.channel.close();
    this.slots.set(ctx.spec.id, { ctx, channel, ready: false, busy: false });
  }

  /** The agent marked the worker running. */
  ready(ctx: SandboxContext): void {
    const slot = this.slots.get(ctx.spec.id);
    if (slot?.ctx !== ctx) return;
    slot.ready = true;
    this.dispatch(fleetOf(ctx));
  }

  /** The worker is being destroyed: forget it (a task running on it fails as its connection closes). */
  detach(ctx: SandboxContext): void {
    const slot = this.slots.get(ctx.spec.id);
    if (!slot) return;
    this.slots.delete(ctx.spec.id);
    slot.channel.close();
    const fleet = fleetOf(ctx);
    // Later: the agent is still in the middle of its destroy.
    if (fleet !== undefined) setImmediate(() => this.dispatch(fleet));
  }

  /** The worker's connection, for a check or a test. */
  channelOf(id: string): WorkerChannel | undefined {
    return this.slots.get(id)?.channel;
  }

  /** Queue a task for `fleet`; resolves once a worker ran it. `prepare` checks it against the fleet's settings. */
  async invoke(fleet: string, node: NodeContext, prepare: (spec: SandboxContext['spec']) => PreparedTask): Promise<FunctionResult> {
    this.node = node;
    const workers = this.workersOf(fleet);
    if (workers.length === 0) throw new DsecError('DSEC_FUNCTION_NO_WORKERS', { fleet, where: `node ${node.name}` });
    const task = prepare(workers[0].spec);
    const queue = this.queues.get(fleet) ?? [];
    if (queue.length >= this.host.maxQueued) {
      throw new DsecError('DSEC_FUNCTION_NO_WORKERS', { fleet, where: `node ${node.name} (every worker is busy and ${queue.length} tasks are queued, the most it holds)` });
    }
    this.queues.set(fleet, queue);
    return new Promise<FunctionResult>((resolve, reject) => {
      queue.push({ task, queuedAt: performance.now(), resolve, reject });
      this.dispatch(fleet);
    });
  }

  /** Hand queued tasks to free workers; refuse them when the fleet has no worker left that could ever serve. */
  private dispatch(fleet: string | undefined): void {
    if (fleet === undefined) return;
    const queue = this.queues.get(fleet);
    if (!queue || queue.length === 0) return;
    const view = this.view(fleet);
    for (const slot of view.free) {
      const waiter = queue.shift();
      if (!waiter) break;
      this.start(slot, waiter, fleet);
    }
    if (queue.length > 0 && view.free.length === 0 && view.coming === 0) {
      this.queues.delete(fleet);
      const where = `node ${this.node?.name ?? '?'}${view.total > 0 ? ` (its ${view.total} worker(s) are paused, stopped or failed)` : ''}`;
      for (const waiter of queue) waiter.reject(new DsecError('DSEC_FUNCTION_NO_WORKERS', { fleet, where }));
    }
  }

  private start(slot: Slot, waiter: Waiter, fleet: string): void {
    slot.busy = true;
    const startedAt = performance.now();
    const queuedMs = Math.round(startedAt - waiter.queuedAt);
    this.host
      .run(slot, waiter.task)
      .catch((error: Error): TaskOutcome => ({ error, replaceBecause: `running a task failed: ${error.message}` }))
      .then((outcome) => {
        slot.busy = false;
        if (outcome.replaceBecause !== undefined) this.replace(slot, outcome.replaceBecause);
        if (outcome.result) waiter.resolve({ ...outcome.result, queuedMs, worker: slot.ctx.spec.id });
        else waiter.reject(outcome.error ?? new Error('the task ended with neither a result nor an error'));
        this.dispatch(fleet);
      });
  }

  /** Take a worker out of the pool and have the agent create it again; the pool serves with the others meanwhile. */
  private replace(slot: Pick<Slot, 'ctx'> & { channel?: WorkerChannel }, reason: string): void {
    const { ctx } = slot;
    const id = ctx.spec.id;
    if (this.slots.get(id)?.ctx === ctx) this.slots.delete(id);
    slot.channel?.close();
    if (this.retired.has(ctx)) return;
    this.retired.add(ctx);
    if (this.replacing.has(id)) return;
    const recreate = ctx.node.recreateSandbox;
    if (!recreate) {
      this.host.log.warn(`fncall: worker ${id} should be replaced (${reason}), but this node cannot re-create sandboxes; it takes no more tasks`);
      return;
    }
    this.replacing.add(id);
    this.host.log.info(`fncall: replacing worker ${id} of fleet ${fleetOf(ctx) ?? '?'}: ${reason}`);
    recreate(id, reason)
      .catch((error: Error) => this.host.log.warn(`fncall: re-creating worker ${id} failed: ${error.message}`))
      .finally(() => {
        this.replacing.delete(id);
        this.dispatch(fleetOf(ctx));
      });
  }

  /** The fleet's fncall sandboxes on the node, as the agent holds them now. */
  private workersOf(fleet: string): SandboxContext[] {
    return (this.node?.sandboxes() ?? []).filter((ctx) => ctx.spec.backend === BACKEND_KIND && fleetOf(ctx) === fleet);
  }

  private view(fleet: string): FleetView {
    const free: Slot[] = [];
    let coming = 0;
    const workers = this.workersOf(fleet);
    for (const ctx of workers) {
      const id = ctx.spec.id;
      const slot = this.slots.get(id);
      const connected = slot?.ctx === ctx && !slot.channel.isClosed;
      if (connected && slot.busy) coming++;
      else if (connected && slot.ready && ctx.status === 'running') free.push(slot);
      else if (this.replacing.has(id) || ctx.status === 'creating' || (connected && ctx.status === 'running')) coming++;
      else if (ctx.status === 'running' && !this.retired.has(ctx)) {
        // Running, but not through a connection of ours: adopted from an earlier agent, or its guest went away.
        this.replace({ ctx, ...(slot?.ctx === ctx ? { channel: slot.channel } : {}) }, slot ? 'its guest agent connection closed' : 'it was adopted without a guest agent connection');
        if (this.replacing.has(id)) coming++;
      }
    }
    return { free, coming, total: workers.length };
  }
}

function fleetOf(ctx: SandboxContext): string | undefined {
  return ctx.spec.labels[LABEL_FLEET];
}
