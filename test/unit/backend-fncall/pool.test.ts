/**
 * The FnCall pool's scheduling, as pure logic: stand-in workers (a node's
 * sandbox list and connections that only record what they were given) and a
 * `run` whose outcome each test decides. What a real worker does with a task
 * is in test/integration/fncall.
 */
import { describe, expect, it } from 'vitest';
import { LABEL_FLEET, type FunctionResult, type NodeContext, type SandboxContext } from '../../../core/plugin-api.js';
import { FncallPools } from '../../../plugins/backend-fncall/pool.js';
import type { TaskOutcome, WorkerChannel } from '../../../plugins/backend-fncall/run-task.js';
import type { PreparedTask } from '../../../plugins/backend-fncall/task.js';

const silent = { info() {}, warn() {}, debug() {} };

function channel(): WorkerChannel & { closed: boolean } {
  const made = {
    closed: false,
    get isClosed() {
      return made.closed;
    },
    close() {
      made.closed = true;
    },
    exec: () => Promise.reject(new Error('not used')),
    writeFile: () => Promise.reject(new Error('not used')),
    stat: () => Promise.reject(new Error('not used')),
    reset: () => Promise.reject(new Error('not used')),
  };
  return made;
}

const task = (name: string) => ({ interpreter: 'sh', program: '/work/main.sh', files: [], args: [name], env: {}, timeoutMs: 1000 }) as PreparedTask;

/** A run that waits until the test settles it. */
interface Pending {
  readonly worker: string;
  readonly task: string;
  finish(outcome?: Partial<TaskOutcome>): void;
}

/** A re-create the node was asked for, done (like the agent: a new context of the same id, connected) when the test says. */
interface Recreate {
  readonly id: string;
  done(): void;
  /** The agent found nothing to do (the id was gone): resolves, changes nothing. */
  skip(): void;
}

function setUp(options: { maxQueued?: number } = {}) {
  const sandboxes: SandboxContext[] = [];
  const recreated: string[] = [];
  const recreates: Recreate[] = [];
  const pending: Pending[] = [];
  const node = {
    name: 'node-a',
    sandboxes: () => sandboxes,
    recreateSandbox: (id: string) => {
      recreated.push(id);
      return new Promise<void>((resolve) => {
        recreates.push({
          id,
          done: () => {
            const at = sandboxes.findIndex((ctx) => ctx.spec.id === id);
            const old = sandboxes[at];
            sandboxes.splice(at, 1);
            connect(worker(id, 'running', old.spec.labels[LABEL_FLEET]));
            resolve();
          },
          skip: () => resolve(),
        });
      });
    },
  } as unknown as NodeContext;
  const pools = new FncallPools({
    log: silent,
    maxQueued: options.maxQueued ?? 100,
    run: ({ ctx }, prepared) =>
      new Promise<TaskOutcome>((resolve) => {
        pending.push({
          worker: ctx.spec.id,
          task: prepared.args[0],
          finish: (outcome = {}) => resolve({ result: { stdout: prepared.args[0], stderr: '', exitCode: 0, timedOut: false, truncated: false, durationMs: 1 }, ...outcome }),
        });
      }),
  });
  const worker = (id: string, status: SandboxContext['status'] = 'running', fleet = 'fn') => {
    const ctx = { spec: { id, backend: 'fncall', labels: { [LABEL_FLEET]: fleet } }, node, status } as unknown as SandboxContext;
    sandboxes.push(ctx);
    return ctx;
  };
  const connect = (ctx: SandboxContext) => {
    const made = channel();
    pools.attach(ctx, made);
    pools.ready(ctx);
    return made;
  };
  const invoke = (name: string, fleet = 'fn') => pools.invoke(fleet, node, () => task(name));
  return { pools, node, sandboxes, recreated, recreates, pending, worker, connect, invoke };
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe('the FnCall pool', () => {
  it('runs tasks on free workers and queues the rest first come, first served', async () => {
    const { pending, worker, connect, invoke } = setUp();
    connect(worker('w0'));
    connect(worker('w1'));
    const results = ['t1', 't2', 't3', 't4'].map((name) => invoke(name));
    await tick();
    expect(pending.map((run) => `${run.task}@${run.worker}`)).toEqual(['t1@w0', 't2@w1']);
    pending[1].finish();
    await tick();
    pending[0].finish();
    await tick();
    expect(pending.map((run) => `${run.task}@${run.worker}`)).toEqual(['t1@w0', 't2@w1', 't3@w1', 't4@w0']);
    pending[2].finish();
    pending[3].finish();
    const answers: FunctionResult[] = await Promise.all(results);
    expect(answers.map((answer) => `${answer.stdout}@${answer.worker}`)).toEqual(['t1@w0', 't2@w1', 't3@w1', 't4@w0']);
    expect(answers[2].queuedMs).toBeGreaterThanOrEqual(0);
  });

  it('keeps fleets apart', async () => {
    const { pending, worker, connect, invoke } = setUp();
    connect(worker('a0', 'running', 'a'));
    connect(worker('b0', 'running', 'b'));
    void invoke('x', 'a');
    void invoke('y', 'a');
    void invoke('z', 'b');
    await tick();
    expect(pending.map((run) => `${run.task}@${run.worker}`)).toEqual(['x@a0', 'z@b0']);
  });

  it('replaces a worker whose task asks for it, and serves the queue with the others meanwhile', async () => {
    const { pools, pending, recreated, worker, connect, invoke } = setUp();
    const w0 = worker('w0');
    const first = connect(w0);
    connect(worker('w1'));
    const results = ['t1', 't2', 't3'].map((name) => invoke(name));
    await tick();
    pending[0].finish({ replaceBecause: 'a task ran past its timeout' });
    await tick();
    expect(recreated).toEqual(['w0']);
    expect(first.closed).toBe(true);
    expect(pools.channelOf('w0')).toBeUndefined();
    // w0 is out: t3 waits for w1.
    expect(pending.map((run) => `${run.task}@${run.worker}`)).toEqual(['t1@w0', 't2@w1']);
    pending[1].finish();
    await tick();
    expect(pending.at(-1)).toMatchObject({ task: 't3', worker: 'w1' });
    pending[2].finish();
    expect((await results[0]).stdout).toBe('t1');
    await Promise.all(results);
  });

  it('takes a re-created worker back once it is ready again', async () => {
    const { pending, recreates, worker, connect, invoke } = setUp();
    connect(worker('w0'));
    void invoke('t1');
    await tick();
    pending[0].finish({ replaceBecause: 'timeout' });
    const waiting = invoke('t2');
    await tick();
    expect(pending).toHaveLength(1);
    recreates[0].done();
    await tick();
    expect(pending.map((run) => `${run.task}@${run.worker}`)).toEqual(['t1@w0', 't2@w0']);
    pending[1].finish();
    expect((await waiting).worker).toBe('w0');
  });

  it('says DSEC_FUNCTION_NO_WORKERS when the fleet has no sandboxes on the node', async () => {
    const { worker, connect, invoke } = setUp();
    connect(worker('other', 'running', 'other'));
    await expect(invoke('t1')).rejects.toMatchObject({ code: 'DSEC_FUNCTION_NO_WORKERS', message: 'fleet fn has no FnCall workers on node node-a; apply a fleet with backend fncall first' });
  });

  it('refuses queued tasks once no worker of the fleet is left that could serve them', async () => {
    const { pools, pending, worker, connect, invoke, sandboxes } = setUp();
    const w0 = worker('w0');
    connect(w0);
    void invoke('t1');
    const queued = invoke('t2');
    await tick();
    w0.status = 'paused';
    pools.detach(w0);
    sandboxes[0] = { ...w0, status: 'paused' } as SandboxContext;
    pending[0].finish();
    await expect(queued).rejects.toMatchObject({
      code: 'DSEC_FUNCTION_NO_WORKERS',
      message: expect.stringContaining('node node-a (its 1 worker(s) are paused, stopped or failed)'),
    });
  });

  it('waits for a worker still being created rather than refusing', async () => {
    const { pending, worker, connect, invoke } = setUp();
    const w0 = worker('w0', 'creating');
    const result = invoke('t1');
    await tick();
    expect(pending).toHaveLength(0);
    w0.status = 'running';
    connect(w0);
    await tick();
    pending[0].finish();
    expect((await result).worker).toBe('w0');
  });

  it('re-creates a running worker it holds no connection to (adopted after an agent restart) before using it', async () => {
    const { recreated, recreates, pending, worker, invoke } = setUp();
    worker('w0');
    const result = invoke('t1');
    await tick();
    expect(recreated).toEqual(['w0']);
    expect(pending).toHaveLength(0);
    recreates[0].done();
    await tick();
    pending[0].finish();
    expect((await result).worker).toBe('w0');
  });

  it('asks once: a re-create that did not happen leaves the worker out and refuses what waited for it', async () => {
    const { recreated, recreates, worker, invoke } = setUp();
    worker('w0');
    const result = invoke('t1');
    await tick();
    recreates[0].skip();
    await expect(result).rejects.toMatchObject({ code: 'DSEC_FUNCTION_NO_WORKERS' });
    expect(recreated).toEqual(['w0']);
  });

  it('refuses a task past the most a queue holds', async () => {
    const { worker, connect, invoke } = setUp({ maxQueued: 1 });
    connect(worker('w0'));
    void invoke('t1');
    void invoke('t2');
    await expect(invoke('t3')).rejects.toMatchObject({ code: 'DSEC_FUNCTION_NO_WORKERS', message: expect.stringContaining('1 tasks are queued, the most it holds') });
  });
});
