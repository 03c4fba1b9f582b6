/**
 * FnCall through a real agent: tasks run in pooled container workers through
 * the guest agent, with their output, exit code, files and stdin; each task
 * finds its worker as new; tasks queue when every worker is busy; a task
 * past its timeout is killed and its worker replaced; the layers are
 * read-only and the scratch and the output are capped; bad tasks are refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL_FLEET, LABEL_LINEAGE } from '../../../core/live.js';
import { mountPointsUnder, runcContainers, type TestAgent } from '../../helpers/agent-fixture.js';
import { createFleet, eventually, invoke, rejection, startFncallAgent } from './helpers.js';

const b64 = (text: string) => Buffer.from(text).toString('base64');

describe('FnCall pool', () => {
  let agent: TestAgent;

  beforeAll(async () => {
    agent = await startFncallAgent();
    await createFleet(agent, 'fn', 2);
    await createFleet(agent, 'solo', 1);
    await createFleet(agent, 'small', 1, { outputCapBytes: 1000, workMiB: 2 });
  });
  afterAll(async () => {
    await agent?.dispose();
  });

  it('runs a task and answers with its stdout, stderr, exit code, duration and worker', async () => {
    const result = await invoke(agent, 'fn', {
      runtime: 'sh',
      code: 'echo "hello $WHO"; echo "args: $*"; echo "in: $(cat)"; pwd; echo oops >&2; exit 3',
      args: ['a', 'b c'],
      env: { WHO: 'fncall' },
      stdin: 'from stdin',
    });
    expect(result).toMatchObject({
      stdout: 'hello fncall\nargs: a b c\nin: from stdin\n/work\n',
      stderr: 'oops\n',
      exitCode: 3,
      timedOut: false,
      truncated: false,
      worker: expect.stringMatching(/^fn-[01]$/),
    });
    expect(result.durationMs).toBeGreaterThanOrEqual(0);
    expect(result.durationMs).toBeLessThan(5_000);
    expect(result.queuedMs).toBeGreaterThanOrEqual(0);
  });

  it('counts a task as activity for the worker that ran it, so an idle-stop TTL never reaps a busy pool', async () => {
    const before = Date.now();
    const result = await invoke(agent, 'solo', { runtime: 'sh', code: 'true' });
    const info = await agent.client.getSandbox(result.worker);
    expect(info.lastActivityAt).toBeDefined();
    expect(Date.parse(info.lastActivityAt!)).toBeGreaterThanOrEqual(before - 1);
  });

  it('gives the task its files under /work, in folders too, and runs interpreters named by path', async () => {
    const result = await invoke(agent, 'fn', {
      runtime: '/bin/sh',
      code: 'cat data/greeting.txt; wc -c < blob.bin; ls -R /work | sort',
      files: { 'data/greeting.txt': b64('hi from a file\n'), 'blob.bin': Buffer.alloc(1000, 7).toString('base64') },
    });
    expect(result.exitCode).toBe(0);
    expect(result.stdout.split('\n').slice(0, 2)).toEqual(['hi from a file', '1000']);
    expect(result.stdout).toContain('main');
  });

  it('finds nothing of the previous task on its worker: files, shared memory, message queues and processes are gone', async () => {
    const first = await invoke(agent, 'solo', {
      runtime: 'sh',
      code: 'echo secret > /work/left; echo secret > /tmp/left; echo secret > /dev/shm/left; touch /dev/mqueue/left; (setsid sleep 1000 &); sleep 1000 & echo started',
    });
    expect(first).toMatchObject({ exitCode: 0, stdout: 'started\n' });
    const second = await invoke(agent, 'solo', {
      runtime: 'sh',
      code: 'ls -A /work /tmp /dev/shm /dev/mqueue /.dsec/run; ps -o pid,comm | grep -c sleep; true',
    });
    expect(second.worker).toBe(first.worker);
    expect(second.stdout).toBe('/.dsec/run:\n\n/dev/mqueue:\n\n/dev/shm:\n\n/tmp:\n\n/work:\nmain.sh\n0\n');
  });

  it('keeps the layers read-only: writing to / fails, only the scratch folders take writes', async () => {
    const result = await invoke(agent, 'solo', {
      runtime: 'sh',
      code: 'touch /x 2>&1; touch /etc/x 2>&1; touch /dev/x 2>&1; echo ok > /work/y && echo ok > /tmp/y && echo scratch-ok',
    });
    expect(result.stdout).toBe(
      'touch: /x: Read-only file system\ntouch: /etc/x: Read-only file system\ntouch: /dev/x: Read-only file system\nscratch-ok\n',
    );
  });

  it('cuts stdout and stderr at the fleet output cap and caps the scratch at its size', async () => {
    const loud = await invoke(agent, 'small', { runtime: 'sh', code: 'head -c 5000 /dev/zero | tr "\\0" a; head -c 3000 /dev/zero | tr "\\0" b >&2' });
    expect(loud.stdout).toBe('a'.repeat(1000));
    expect(loud.stderr).toBe('b'.repeat(1000));
    expect(loud.truncated).toBe(true);
    const full = await invoke(agent, 'small', { runtime: 'sh', code: 'dd if=/dev/zero of=/work/big bs=1M count=8 2>&1 | head -1' });
    expect(full.stdout).toContain('No space left on device');
  });

  it('queues tasks while every worker is busy: N + 2 tasks on N workers all succeed', async () => {
    const results = await Promise.all(
      Array.from({ length: 4 }, (_, index) => invoke(agent, 'fn', { runtime: 'sh', code: `sleep 0.3; echo task-${index}` })),
    );
    expect(results.map((result) => result.stdout)).toEqual(['task-0\n', 'task-1\n', 'task-2\n', 'task-3\n']);
    expect(results.every((result) => result.exitCode === 0)).toBe(true);
    expect(new Set(results.map((result) => result.worker))).toEqual(new Set(['fn-0', 'fn-1']));
    // Two of them waited for a worker to come free.
    expect(results.filter((result) => result.queuedMs >= 200)).toHaveLength(2);
  });

  it('kills a task past its timeout, with what it left running, and replaces its worker', async () => {
    const before = await agent.client.listSandboxes({ [LABEL_FLEET]: 'solo' });
    const result = await invoke(agent, 'solo', { runtime: 'sh', code: 'echo begun; sleep 30 & sleep 30', timeoutMs: 300 });
    expect(result).toMatchObject({ stdout: 'begun\n', exitCode: null, timedOut: true, worker: 'solo-0' });
    expect(result.durationMs).toBeLessThan(5_000);
    await eventually('the worker to be re-created', async () => {
      const [now] = await agent.client.listSandboxes({ [LABEL_FLEET]: 'solo' });
      return now?.status === 'running' && now.createdAt !== before[0].createdAt;
    });
    const after = await invoke(agent, 'solo', { runtime: 'sh', code: 'ps -o comm | grep -c sleep; true' });
    expect(after).toMatchObject({ exitCode: 0, stdout: '0\n', worker: 'solo-0' });
  });

  it('keeps serving with the other workers while one is replaced', async () => {
    const before = new Map((await agent.client.listSandboxes({ [LABEL_FLEET]: 'fn' })).map((worker) => [worker.id, worker.createdAt]));
    const timedOut = invoke(agent, 'fn', { runtime: 'sh', code: 'sleep 30', timeoutMs: 1000 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const others = await Promise.all([0, 1, 2].map(() => invoke(agent, 'fn', { runtime: 'sh', code: 'echo ok' })));
    expect(others.every((result) => result.stdout === 'ok\n')).toBe(true);
    const replaced = await timedOut;
    expect(replaced.timedOut).toBe(true);
    expect(others.every((result) => result.worker !== replaced.worker)).toBe(true);
    await eventually('the fleet to be two running workers again, one of them new', async () => {
      const workers = await agent.client.listSandboxes({ [LABEL_FLEET]: 'fn' });
      const renewed = workers.find((worker) => worker.id === replaced.worker);
      return workers.length === 2 && workers.every((worker) => worker.status === 'running') && renewed?.createdAt !== before.get(replaced.worker);
    });
  });

  it('says a runtime the environment lacks is not valid, naming it', async () => {
    const missing = await rejection(invoke(agent, 'fn', { runtime: 'python3', code: 'print(1)' }));
    expect(missing).toMatchObject({ code: 'DSEC_FUNCTION_INVALID' });
    expect(missing.message).toContain("runtime python3 is not in the fleet's environment");
    const byPath = await rejection(invoke(agent, 'fn', { runtime: '/usr/bin/python3', code: 'print(1)' }));
    expect(byPath.message).toContain("runtime /usr/bin/python3 is not in the fleet's environment (not found there)");
  });

  it('refuses a bad task with DSEC_FUNCTION_INVALID and an unknown fleet with DSEC_FUNCTION_NO_WORKERS', async () => {
    const escaping = await rejection(invoke(agent, 'fn', { runtime: 'sh', code: 'true', files: { '../../etc/passwd': b64('x') } }));
    expect(escaping).toMatchObject({ code: 'DSEC_FUNCTION_INVALID', message: expect.stringContaining(`files: "../../etc/passwd" must not climb out with '..'`) });
    const runtime = await rejection(invoke(agent, 'fn', { runtime: 'cobol', code: 'true' }));
    expect(runtime).toMatchObject({ code: 'DSEC_FUNCTION_INVALID', message: expect.stringContaining('runtime "cobol" is not known') });
    const timeout = await rejection(invoke(agent, 'fn', { runtime: 'sh', code: 'true', timeoutMs: 86_400_000 }));
    expect(timeout).toMatchObject({ code: 'DSEC_FUNCTION_INVALID', message: expect.stringContaining('timeoutMs must be a whole number from 1 to 600000') });
    const nobody = await rejection(invoke(agent, 'nobody', { runtime: 'sh', code: 'true' }));
    expect(nobody).toMatchObject({ code: 'DSEC_FUNCTION_NO_WORKERS', message: expect.stringContaining('fleet nobody has no FnCall workers') });
  });

  it('refuses a task for a fleet name two projects use on one agent, rather than run it in either environment', async () => {
    const worker = (id: string, lineage: string) =>
      agent.client.createSandbox(
        agent.spec(id, { backend: 'fncall', labels: { [LABEL_FLEET]: 'shared', [LABEL_LINEAGE]: lineage }, resources: { cpu: 0.5, memoryMiB: 128, pids: 64 } }),
      );
    await Promise.all([worker('shared-a', 'project-a'), worker('shared-b', 'project-b')]);
    try {
      const mixed = await rejection(invoke(agent, 'shared', { runtime: 'sh', code: 'true' }));
      expect(mixed).toMatchObject({ code: 'DSEC_FUNCTION_AMBIGUOUS', message: expect.stringContaining('holds workers of 2 projects (lineages project-a, project-b)') });
    } finally {
      await Promise.all([agent.client.destroySandbox('shared-a'), agent.client.destroySandbox('shared-b')]);
    }
  });

  it('advertises invoke beside the container calls, which work on a worker as on any container sandbox', async () => {
    const node = await agent.client.node();
    expect(node.backends).toEqual(['container', 'fncall']);
    expect(node.capabilities?.fncall).toEqual(expect.arrayContaining(['exec', 'readFile', 'writeFile', 'update', 'pause', 'resume', 'usage', 'invoke']));
    expect(node.capabilities?.fncall).not.toContain('snapshot');
    expect(node.capabilities?.container).not.toContain('invoke');
    const listed = await agent.client.exec('solo-0', { cmd: ['/bin/sh', '-c', 'cat /proc/1/cmdline | tr "\\0" " "'] });
    expect(listed.stdout).toBe('/.dsec/guest --listen /.dsec/run/agent.sock ');
    expect(Buffer.from((await agent.client.readFile('solo-0', { path: '/etc/passwd' })).data, 'base64').toString()).toContain('root:x:0:0');
  });

  it('leaves no container, mount or cgroup of a destroyed worker', async () => {
    const [worker] = await createFleet(agent, 'gone', 1);
    expect((await invoke(agent, 'gone', { runtime: 'sh', code: 'echo up' })).stdout).toBe('up\n');
    await agent.client.destroySandbox(worker.id);
    expect(runcContainers()).not.toContain(agent.containerId(worker.id));
    expect(mountPointsUnder(`${agent.root}/sandboxes/${worker.id}`)).toEqual([]);
    const gone = await rejection(invoke(agent, 'gone', { runtime: 'sh', code: 'echo up' }));
    expect(gone.code).toBe('DSEC_FUNCTION_NO_WORKERS');
  });
});
