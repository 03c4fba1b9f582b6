/**
 * Sandboxes outlive the agent: after a SIGKILL and a restart the agent
 * re-adopts the running ones (state intact, exec works), reports one killed
 * from outside as stopped, and cleans up a create that never finished.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SandboxSpec } from '../../../core/live.js';
import { mountPointsUnder, runcContainers, TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;

const spec = (id: string): SandboxSpec => agent.spec(id, { labels: { test: 'restart' } });

function runcStatus(cid: string): string {
  try {
    return JSON.parse(execFileSync('runc', ['state', cid], { encoding: 'utf8' })).status as string;
  } catch {
    return 'missing';
  }
}

beforeAll(async () => {
  agent = await TestAgent.start();
});

afterAll(async () => {
  await agent?.dispose();
});

describe('agent restart', () => {
  it('re-adopts running sandboxes after SIGKILL, reports one killed from outside as stopped, and cleans an unfinished create', async () => {
    for (const id of ['keep', 'victim', 'half']) await agent.client.createSandbox(spec(id));
    const write = await agent.client.exec('keep', { cmd: ['/bin/sh', '-c', 'echo before-restart > /root/state.txt'] });
    expect(write.exitCode).toBe(0);
    const firstPid = await agent.pid();

    await agent.kill();
    expect(runcStatus(agent.containerId('keep'))).toBe('running');
    // While the agent is down: one sandbox dies, and one record looks like a create cut short.
    execFileSync('runc', ['kill', agent.containerId('victim'), 'KILL']);
    const halfRecord = path.join(agent.root, 'sandboxes/half/record.json');
    const record = JSON.parse(readFileSync(halfRecord, 'utf8'));
    writeFileSync(halfRecord, JSON.stringify({ ...record, status: 'creating' }));

    await agent.startDaemon();
    expect(await agent.pid()).not.toBe(firstPid);

    const listed = Object.fromEntries((await agent.client.listSandboxes({ test: 'restart' })).map((s) => [s.id, s.status]));
    expect(listed).toEqual({ keep: 'running', victim: 'stopped' });
    const read = await agent.client.exec('keep', { cmd: ['cat', '/root/state.txt'] });
    expect(read).toMatchObject({ exitCode: 0, stdout: 'before-restart\n' });
    await expect(agent.client.exec('victim', { cmd: ['true'] })).rejects.toMatchObject({ code: 'DSEC_SANDBOX_NOT_RUNNING' });

    expect(runcContainers()).not.toContain(agent.containerId('half'));
    expect(existsSync(path.join(agent.root, 'sandboxes/half'))).toBe(false);
    expect(mountPointsUnder(path.join(agent.root, 'sandboxes/half'))).toEqual([]);
    expect(agent.logText()).toMatch(/re-adopted \[keep\], stopped \[victim\], cleaned up unfinished \[half\]/);

    await agent.client.destroySandbox('victim');
    expect(runcContainers()).not.toContain(agent.containerId('victim'));
    expect(mountPointsUnder(path.join(agent.root, 'sandboxes'))).toEqual([path.join(agent.root, 'sandboxes/keep/rootfs')]);
  });

  it('notices a sandbox killed from outside while it runs', async () => {
    await agent.client.createSandbox(spec('outside'));
    execFileSync('runc', ['kill', agent.containerId('outside'), 'KILL']);
    for (let i = 0; i < 50 && runcStatus(agent.containerId('outside')) === 'running'; i++) await new Promise((r) => setTimeout(r, 20));
    expect((await agent.client.getSandbox('outside')).status).toBe('stopped');
    // Creating the same id again replaces the dead one with a running one.
    const again = await agent.client.createSandbox(spec('outside'));
    expect(again.status).toBe('running');
    expect((await agent.client.exec('outside', { cmd: ['echo', 'back'] })).stdout).toBe('back\n');
    await agent.client.destroySandbox('outside');
  });

  it('reports a sandbox paused from outside as paused, and running again once resumed', async () => {
    await agent.client.createSandbox(spec('frozen'));
    execFileSync('runc', ['pause', agent.containerId('frozen')]);
    expect((await agent.client.getSandbox('frozen')).status).toBe('paused');
    execFileSync('runc', ['resume', agent.containerId('frozen')]);
    expect((await agent.client.getSandbox('frozen')).status).toBe('running');
    expect((await agent.client.exec('frozen', { cmd: ['echo', 'thawed'] })).stdout).toBe('thawed\n');
    await agent.client.destroySandbox('frozen');
  });

  it('stops on request, leaving sandboxes running for the next agent', async () => {
    await agent.stop();
    expect(await agent.pid()).toBeNull();
    expect(runcStatus(agent.containerId('keep'))).toBe('running');
    expect(existsSync(agent.socket)).toBe(false);
    await agent.startDaemon();
    expect((await agent.client.getSandbox('keep')).status).toBe('running');
  });
});
