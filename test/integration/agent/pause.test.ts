/**
 * Pausing and resuming sandboxes through the agent's API, with the real
 * container backend: a paused sandbox is frozen and woken by any exec, a
 * pause never freezes an exec in flight, a sandbox killed while paused ends
 * up `stopped` with a clear error (and the agent keeps answering), and a
 * batch call by label acts on each sandbox on its own.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL_FLEET } from '../../../core/live.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;

/** The host pid of a sandbox's init, from the agent's record of it. */
function initPid(id: string): number {
  const record = JSON.parse(readFileSync(path.join(agent.root, 'sandboxes', id, 'record.json'), 'utf8'));
  return record.backend.initPid as number;
}

/** The freezer state of a sandbox's cgroup (cgroup v1). */
function freezerState(id: string): string {
  return readFileSync(`/sys/fs/cgroup/freezer/dsec/${agent.containerId(id)}/freezer.state`, 'utf8').trim();
}

beforeAll(async () => {
  agent = await TestAgent.start();
});

afterAll(async () => {
  await agent?.dispose();
});

describe('pause and resume', () => {
  it('pauses a sandbox (frozen, status paused, pausedAt set) and resumes it so execs run again', async () => {
    await agent.client.createSandbox(agent.spec('pr-basic'));
    const paused = await agent.client.pauseSandbox('pr-basic');
    expect(paused.status).toBe('paused');
    expect(Date.parse(paused.pausedAt!)).toBeGreaterThan(0);
    expect(freezerState('pr-basic')).toBe('FROZEN');
    expect((await agent.client.getSandbox('pr-basic')).status).toBe('paused');
    // Pausing a paused sandbox changes nothing.
    expect((await agent.client.pauseSandbox('pr-basic')).pausedAt).toBe(paused.pausedAt);

    const resumed = await agent.client.resumeSandbox('pr-basic');
    expect(resumed.status).toBe('running');
    expect(resumed.pausedAt).toBeUndefined();
    expect(freezerState('pr-basic')).toBe('THAWED');
    const result = await agent.client.exec('pr-basic', { cmd: ['echo', 'awake'] });
    expect(result.stdout).toBe('awake\n');
    expect(Date.parse((await agent.client.getSandbox('pr-basic')).lastActivityAt!)).toBeGreaterThan(Date.parse(resumed.createdAt));
    // Resuming a running sandbox changes nothing.
    expect((await agent.client.resumeSandbox('pr-basic')).status).toBe('running');
  });

  it('resumes a paused sandbox transparently when an exec arrives, and counts the exec as activity', async () => {
    await agent.client.createSandbox(agent.spec('pr-auto'));
    await agent.client.exec('pr-auto', { cmd: ['sh', '-c', 'echo kept > /tmp/note'] });
    const paused = await agent.client.pauseSandbox('pr-auto');
    const result = await agent.client.exec('pr-auto', { cmd: ['cat', '/tmp/note'] });
    expect(result).toMatchObject({ exitCode: 0, stdout: 'kept\n' });
    const info = await agent.client.getSandbox('pr-auto');
    expect(info.status).toBe('running');
    expect(Date.parse(info.lastActivityAt!)).toBeGreaterThanOrEqual(Date.parse(paused.pausedAt!));
    expect(freezerState('pr-auto')).toBe('THAWED');
  });

  it('refuses to pause a sandbox while an exec runs in it, and pauses it once the exec finished', async () => {
    await agent.client.createSandbox(agent.spec('pr-busy'));
    const running = agent.client.exec('pr-busy', { cmd: ['sleep', '2'] });
    await new Promise((resolve) => setTimeout(resolve, 300));
    await expect(agent.client.pauseSandbox('pr-busy')).rejects.toMatchObject({
      code: 'DSEC_SANDBOX_BUSY',
      params: { id: 'pr-busy', operation: 'pause' },
      message: expect.stringMatching(/sandbox pr-busy cannot pause now: 1 exec\(s\) in flight/),
    });
    expect((await running).exitCode).toBe(0);
    expect((await agent.client.pauseSandbox('pr-busy')).status).toBe('paused');
    await agent.client.resumeSandbox('pr-busy');
  });

  it('lets execs that arrive during a pause wait for it and then resume the sandbox', async () => {
    await agent.client.createSandbox(agent.spec('pr-race'));
    const pausing = agent.client.pauseSandbox('pr-race');
    const execs = Array.from({ length: 3 }, (_, index) => agent.client.exec('pr-race', { cmd: ['echo', String(index)] }));
    await pausing.catch(() => undefined);
    const results = await Promise.all(execs);
    expect(results.map((result) => result.stdout)).toEqual(['0\n', '1\n', '2\n']);
    expect((await agent.client.getSandbox('pr-race')).status).toBe('running');
  });

  it('reports a sandbox whose init was killed while paused as stopped on resume, and keeps answering', async () => {
    await agent.client.createSandbox(agent.spec('pr-killed'));
    await agent.client.pauseSandbox('pr-killed');
    process.kill(initPid('pr-killed'), 'SIGKILL');
    await expect(agent.client.resumeSandbox('pr-killed')).rejects.toMatchObject({
      code: 'DSEC_SANDBOX_NOT_RUNNING',
      message: 'sandbox pr-killed is stopped, not running',
    });
    expect((await agent.client.getSandbox('pr-killed')).status).toBe('stopped');
    await expect(agent.client.exec('pr-killed', { cmd: ['true'] })).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_RUNNING' });
    await expect(agent.client.pauseSandbox('pr-killed')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_RUNNING' });
    expect((await agent.client.health()).ok).toBe(true);
    expect((await agent.client.destroySandbox('pr-killed')).existed).toBe(true);
  });

  it('pauses and resumes every sandbox of a label in one call, each on its own, and names unknown ids', async () => {
    const labels = { [LABEL_FLEET]: 'batch', job: 'j1' };
    await Promise.all(['pr-b1', 'pr-b2', 'pr-b3'].map((id) => agent.client.createSandbox(agent.spec(id, { labels }))));
    await agent.client.createSandbox(agent.spec('pr-other', { labels: { job: 'j2' } }));
    const paused = await agent.client.pauseSandboxes({ labels: { job: 'j1' }, ids: ['pr-ghost'] });
    expect(paused.map((outcome) => [outcome.id, outcome.ok])).toEqual([
      ['pr-b1', true],
      ['pr-b2', true],
      ['pr-b3', true],
      ['pr-ghost', false],
    ]);
    expect(paused.find((outcome) => outcome.id === 'pr-ghost')).toMatchObject({ ok: false, error: { code: 'DSEC_SANDBOX_NOT_FOUND', message: 'no sandbox pr-ghost' } });
    const states = Object.fromEntries((await agent.client.listSandboxes()).map((info) => [info.id, info.status]));
    expect(states).toMatchObject({ 'pr-b1': 'paused', 'pr-b2': 'paused', 'pr-b3': 'paused', 'pr-other': 'running' });

    const resumed = await agent.client.resumeSandboxes({ labels: { job: 'j1' } });
    expect(resumed.every((outcome) => outcome.ok && outcome.info.status === 'running')).toBe(true);
    expect(resumed).toHaveLength(3);
  });

  it('refuses a batch call that names no sandbox, rather than acting on all of them', async () => {
    await expect(agent.client.pauseSandboxes({})).rejects.toMatchObject({
      code: 'DSEC_AGENT_REQUEST',
      message: expect.stringMatching(/ids and\/or labels \(a batch call never means every sandbox\)/),
    });
    await expect(agent.client.resumeSandboxes({ labels: {} })).rejects.toMatchObject({ code: 'DSEC_AGENT_REQUEST' });
    await expect(agent.client.request('POST', '/v1/sandboxes/pause', { ids: ['Bad Id'] })).rejects.toMatchObject({ code: 'DSEC_AGENT_REQUEST' });
    await expect(agent.client.pauseSandbox('pr-nobody')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_FOUND' });
  });
});
