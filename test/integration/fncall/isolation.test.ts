/**
 * FnCall tasks cannot reach past the reset between them: a task (root in
 * its worker) cannot read the guest agent's /proc/1/environ, ptrace it or
 * take its connection, and the SysV IPC objects it leaves (a shared memory
 * segment still attached, a message queue, a semaphore set, a queue of
 * another user) are gone for the next task on the same worker, which the
 * reset cleaned rather than replaced.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL_FLEET } from '../../../core/live.js';
import type { TestAgent } from '../../helpers/agent-fixture.js';
import { createFleet, invoke, startFncallAgent } from './helpers.js';

const PROBE_SOURCE = new URL('./sysv-probe.c', import.meta.url).pathname;
const IPC_OBJECTS = 'cat /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem | grep -vc key; true';

describe('FnCall isolation between tasks', () => {
  let agent: TestAgent;
  let scratch: string;
  let probe: string;

  beforeAll(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'dsec-fncall-isolation-'));
    // The workers' busybox has neither ipcmk nor ptrace: the task brings its own static tool.
    execFileSync('gcc', ['-static', '-Os', '-s', '-o', join(scratch, 'sysv-probe'), PROBE_SOURCE]);
    probe = readFileSync(join(scratch, 'sysv-probe')).toString('base64');
    agent = await startFncallAgent();
    await createFleet(agent, 'iso', 1);
  });
  afterAll(async () => {
    try {
      await agent?.dispose();
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it('keeps a root task out of the guest agent: no /proc/1/environ or mem, no pidfd_getfd, no ptrace', async () => {
    const result = await invoke(agent, 'iso', { runtime: 'sh', code: 'chmod +x probe && ./probe reach 1 && id -u', files: { probe } });
    expect(result).toMatchObject({ exitCode: 0, stderr: '' });
    expect(result.stdout).toBe('environ EACCES\nmem EACCES\npidfd_getfd EPERM\nptrace EPERM\n0\n');
  });

  it('leaves no SysV shared memory, message queue or semaphore of a task to the next task on the worker', async () => {
    const [before] = await agent.client.listSandboxes({ [LABEL_FLEET]: 'iso' });
    const first = await invoke(agent, 'iso', { runtime: 'sh', code: `chmod +x probe && ./probe make && ${IPC_OBJECTS}`, files: { probe } });
    expect(first).toMatchObject({ exitCode: 0, stdout: 'made 4\n4\n', stderr: '' });
    const second = await invoke(agent, 'iso', { runtime: 'sh', code: IPC_OBJECTS });
    expect(second).toMatchObject({ exitCode: 0, stdout: '0\n', worker: first.worker });
    // Cleaned by the reset, not by replacing the worker (a failed reset replaces it).
    const [after] = await agent.client.listSandboxes({ [LABEL_FLEET]: 'iso' });
    expect(after.createdAt).toBe(before.createdAt);
  });
});
