/**
 * A misbehaving sandbox is contained and reported: a fork bomb stops at the
 * pids limit, a memory hog is OOM-killed inside its own sandbox, `yes` is cut
 * at the output cap, a hung command is killed at its timeout; and limits can
 * be changed on a running sandbox. Each time the agent and the neighbouring
 * sandbox keep answering.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existingCgroupDirs } from '../../../plugins/backend-container/cgroups.js';
import { cgroupsPathOf } from '../../../plugins/backend-container/index.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

const MIB = 1024 * 1024;
let agent: TestAgent;

/** A file of the sandbox's cgroup in one controller, read on the host. */
async function cgroupFile(sandboxId: string, controller: string, file: string): Promise<string> {
  const dirs = await existingCgroupDirs(cgroupsPathOf(agent.containerId(sandboxId)));
  const dir = dirs.find((candidate) => candidate.split(path.sep).includes(controller));
  if (!dir) throw new Error(`no ${controller} cgroup for ${sandboxId} among ${dirs.join(', ')}`);
  return readFileSync(path.join(dir, file), 'utf8').trim();
}

async function neighbourAnswers(): Promise<void> {
  await expect(agent.client.health()).resolves.toMatchObject({ ok: true });
  const echo = await agent.client.exec('neighbour', { cmd: ['echo', 'still here'] });
  expect(echo).toMatchObject({ exitCode: 0, stdout: 'still here\n' });
}

beforeAll(async () => {
  agent = await TestAgent.start();
  await agent.client.createSandbox(agent.spec('neighbour', { resources: { cpu: 0.5, memoryMiB: 64, pids: 64 } }));
});

afterAll(async () => {
  await agent?.dispose();
});

describe('container sandbox limits', () => {
  it('stops a fork bomb at the pids limit, and the sandbox and the agent survive', async () => {
    await agent.client.createSandbox(agent.spec('bomb', { resources: { cpu: 0.5, memoryMiB: 128, pids: 48 } }));
    // Each copy starts two more and stays; ash gives up on the fork that the limit refuses.
    const bomb = await agent.client.exec('bomb', {
      cmd: ['/bin/sh', '-c', 'bomb() { bomb & bomb & while :; do sleep 1; done; }; bomb'],
      timeoutMs: 5_000,
    });
    expect(bomb.stderr).toContain("can't fork");
    expect(Number(await cgroupFile('bomb', 'pids', 'pids.max'))).toBe(48);
    expect(Number(await cgroupFile('bomb', 'pids', 'pids.current'))).toBeLessThanOrEqual(48);
    expect(Number(await cgroupFile('bomb', 'pids', 'pids.events').then((text) => text.split(' ')[1]))).toBeGreaterThan(0);
    expect((await agent.client.getSandbox('bomb')).status).toBe('running');
    await neighbourAnswers();
    await agent.client.destroySandbox('bomb');
    expect(await existingCgroupDirs(cgroupsPathOf(agent.containerId('bomb')))).toEqual([]);
  });

  it('OOM-kills a memory hog inside its own sandbox only', async () => {
    await agent.client.createSandbox(agent.spec('hog', { resources: { cpu: 1, memoryMiB: 64, pids: 64 } }));
    try {
      // tail keeps the last lines in memory; 400 MiB of zeros is one line that never ends.
      const hog = await agent.client.exec('hog', { cmd: ['/bin/sh', '-c', 'head -c 400m /dev/zero | tail > /dev/null'], timeoutMs: 30_000 });
      expect(hog).toMatchObject({ exitCode: 137, signal: 'SIGKILL', timedOut: false });
      expect(Number(await cgroupFile('hog', 'memory', 'memory.limit_in_bytes'))).toBe(64 * MIB);
      expect(await cgroupFile('hog', 'memory', 'memory.oom_control')).toMatch(/oom_kill [1-9]/);
      expect((await agent.client.exec('hog', { cmd: ['echo', 'alive'] })).stdout).toBe('alive\n');
      await neighbourAnswers();
    } finally {
      await agent.client.destroySandbox('hog');
    }
  });

  it('cuts captured output at the cap and says so', async () => {
    const result = await agent.client.exec('neighbour', { cmd: ['/bin/sh', '-c', 'yes | head -c 5000000; echo done >&2'] });
    expect(result.truncated).toBe(true);
    expect(result.stdout.length).toBe(1024 * 1024);
    expect(result.stderr).toBe('done\n');
    expect(result.exitCode).toBe(0);
    const small = await agent.client.exec('neighbour', { cmd: ['/bin/sh', '-c', 'yes | head -c 100000'], maxOutputBytes: 1000 });
    expect(small).toMatchObject({ truncated: true, exitCode: 0 });
    expect(small.stdout.length).toBe(1000);
  });

  it('kills a command at its timeout and returns quickly', async () => {
    const started = Date.now();
    const result = await agent.client.exec('neighbour', { cmd: ['sleep', '30'], timeoutMs: 500 });
    expect(result).toMatchObject({ timedOut: true, signal: 'SIGKILL' });
    expect(Date.now() - started).toBeLessThan(5_000);
    // The killed command's sleep is gone; the init (the exec server) is still there.
    const leftover = await agent.client.exec('neighbour', {
      cmd: ['/bin/sh', '-c', 'ps -o args > /tmp/ps.txt; grep -c "^sleep 30$" /tmp/ps.txt; grep -c "^/.dsec/guest --fds 3,4" /tmp/ps.txt; true'],
    });
    expect(leftover.stdout).toBe('0\n1\n');
  });

  it('returns without waiting for processes the command left in the background', async () => {
    const started = Date.now();
    const result = await agent.client.exec('neighbour', { cmd: ['/bin/sh', '-c', 'sleep 300 & echo started'] });
    expect(result).toMatchObject({ exitCode: 0, stdout: 'started\n', timedOut: false });
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('changes the memory, pids and CPU limits of a running sandbox', async () => {
    await agent.client.createSandbox(agent.spec('resize', { resources: { cpu: 1, memoryMiB: 128, pids: 64 } }));
    try {
      expect(Number(await cgroupFile('resize', 'memory', 'memory.limit_in_bytes'))).toBe(128 * MIB);
      const updated = await agent.client.updateSandbox('resize', { cpu: 0.5, memoryMiB: 200, pids: 100 });
      expect(updated.resources).toEqual({ cpu: 0.5, memoryMiB: 200, pids: 100 });
      expect(Number(await cgroupFile('resize', 'memory', 'memory.limit_in_bytes'))).toBe(200 * MIB);
      expect(Number(await cgroupFile('resize', 'memory', 'memory.memsw.limit_in_bytes'))).toBe(200 * MIB);
      expect(Number(await cgroupFile('resize', 'pids', 'pids.max'))).toBe(100);
      expect(Number(await cgroupFile('resize', 'cpu', 'cpu.cfs_quota_us'))).toBe(50_000);
      const inside = await agent.client.exec('resize', { cmd: ['cat', '/sys/fs/cgroup/memory/memory.limit_in_bytes'] });
      expect(Number(inside.stdout.trim())).toBe(200 * MIB);
      const shrunk = await agent.client.updateSandbox('resize', { memoryMiB: 96 });
      expect(shrunk.resources.memoryMiB).toBe(96);
      expect(Number(await cgroupFile('resize', 'memory', 'memory.limit_in_bytes'))).toBe(96 * MIB);
    } finally {
      await agent.client.destroySandbox('resize');
    }
  });
});
