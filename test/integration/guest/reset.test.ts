/**
 * dsec-reset through the real dsec-guest as PID 1 of its own pid namespace
 * (unshare --pid --fork --mount-proc), as in a microVM or a FnCall worker:
 * every other process is killed and reaped, the directories are emptied but
 * kept, and the agent answers on as before. As PID 1 it also reaps orphans
 * without losing the exit status of the commands it runs.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GuestAgentClient } from '../../../core/guest/index.js';
import { buildGuestAgent, startDsecGuest, startQemuGa, type RunningAgent } from './fixture.js';

const agents: RunningAgent[] = [];
const clients: GuestAgentClient[] = [];
const dirs: string[] = [];

beforeAll(() => {
  buildGuestAgent();
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  for (const agent of agents.splice(0)) await agent.stop();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function connectedAgent(pidNamespace: boolean): Promise<{ agent: RunningAgent; client: GuestAgentClient }> {
  const agent = await startDsecGuest({ pidNamespace });
  agents.push(agent);
  const client = await GuestAgentClient.connect(agent.socket, { id: 'sbx-reset', timeoutMs: 10_000 });
  clients.push(client);
  return { agent, client };
}

/** The pids the agent's namespace shows (its own /proc), besides the agent and the one listing them. */
async function otherProcesses(client: GuestAgentClient): Promise<string[]> {
  const result = await client.exec({ path: '/bin/sh', args: ['-c', 'for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] || [ "$p" = $$ ] || echo "$p $(cat $d/comm 2>/dev/null)"; done'] });
  return result.stdout.toString().split('\n').filter((line) => line !== '');
}

describe('dsec-guest reset', () => {
  it('runs as PID 1 of its namespace, kills every other process there and empties the directories, keeping them', async () => {
    const { agent, client } = await connectedAgent(true);
    expect((await client.exec({ path: '/bin/sh', args: ['-c', 'echo $PPID'] })).stdout.toString()).toBe('1\n');
    // Background processes, one in a session of its own (out of the exec's process group).
    await client.exec({ path: '/bin/sh', args: ['-c', 'sleep 1000 & setsid sleep 1001 & exit 0'] });
    expect((await otherProcesses(client)).length).toBeGreaterThanOrEqual(2);

    const work = join(agent.dir, 'work');
    const outside = join(agent.dir, 'outside');
    mkdirSync(join(work, 'nested/deeper'), { recursive: true });
    mkdirSync(outside);
    writeFileSync(join(work, 'file.txt'), 'x');
    writeFileSync(join(work, 'nested/deeper/file.txt'), 'x');
    writeFileSync(join(work, '.hidden'), 'x');
    writeFileSync(join(outside, 'keep.txt'), 'kept');
    symlinkSync(outside, join(work, 'link-to-outside'));
    const tmp = join(agent.dir, 'tmp');
    mkdirSync(join(tmp, 'x'), { recursive: true });

    const { killed } = await client.reset([work, tmp, join(agent.dir, 'not-there')]);
    expect(killed).toBeGreaterThanOrEqual(2);
    expect(await otherProcesses(client)).toEqual([]);
    expect(readdirSync(work)).toEqual([]);
    expect(readdirSync(tmp)).toEqual([]);
    expect(readFileSync(join(outside, 'keep.txt'), 'utf8')).toBe('kept'); // the symlink went, not its target
    expect((await client.exec({ path: 'echo', args: ['still here'] })).stdout.toString()).toBe('still here\n');
  });

  it('kills what an earlier command left running, and a second reset finds nothing to kill', async () => {
    const { client } = await connectedAgent(true);
    await client.exec({ path: '/bin/sh', args: ['-c', 'sleep 1000 & exit 0'] });
    const first = await client.reset([]);
    expect(first.killed).toBeGreaterThanOrEqual(1);
    expect((await client.reset([])).killed).toBe(0);
  });

  it('refuses relative paths and / without killing anything', async () => {
    const { client } = await connectedAgent(true);
    await client.exec({ path: '/bin/sh', args: ['-c', 'sleep 1000 & exit 0'] });
    await expect(client.reset(['relative'])).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED', message: expect.stringContaining('absolute') });
    await expect(client.reset(['/'])).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED' });
    expect((await otherProcesses(client)).length).toBe(1);
  });

  it('as PID 1 reaps orphans and still reports the exit codes of its own commands', async () => {
    const { client } = await connectedAgent(true);
    for (let i = 0; i < 20; i++) {
      // The orphans exit while the next command runs: reaping them must not take that command's status.
      const result = await client.exec({ path: '/bin/sh', args: ['-c', `(sleep 0.0$i; exit 7) & exit ${i % 5}`] });
      expect(result.exitCode).toBe(i % 5);
    }
    await new Promise((resolve) => setTimeout(resolve, 300));
    const zombies = await client.exec({ path: '/bin/sh', args: ['-c', 'grep -l "^State:.*Z" /proc/[0-9]*/status 2>/dev/null; true'] });
    expect(zombies.stdout.toString()).toBe('');
  });

  it('outside a pid namespace kills only its own descendants, never the host\'s processes', async () => {
    const { client } = await connectedAgent(false);
    const dir = mkdtempSync(join(tmpdir(), 'dsec-reset-'));
    dirs.push(dir);
    const { spawn } = await import('node:child_process');
    const bystander = spawn('sleep', ['1000'], { stdio: 'ignore' });
    try {
      await client.exec({ path: '/bin/sh', args: ['-c', `sleep 1000 & echo $! > ${dir}/pid; exit 0`] });
      const descendant = Number(readFileSync(join(dir, 'pid'), 'utf8'));
      const { killed } = await client.reset([]);
      expect(killed).toBe(1);
      expect(existsSync(`/proc/${descendant}`)).toBe(false);
      expect(bystander.exitCode).toBeNull();
      expect(existsSync(`/proc/${bystander.pid}`)).toBe(true);
    } finally {
      bystander.kill('SIGKILL');
    }
  });

  it('is a clear DSEC_BACKEND_UNSUPPORTED with a plain QEMU guest agent', async () => {
    const qga = await startQemuGa();
    agents.push(qga);
    const client = await GuestAgentClient.connect(qga.socket, { id: 'vm-1', timeoutMs: 10_000 });
    clients.push(client);
    await expect(client.reset(['/tmp/x'])).rejects.toMatchObject({
      code: 'DSEC_BACKEND_UNSUPPORTED',
      message: expect.stringMatching(/guest agent 7\.\d+\.\d+ of sandbox vm-1 does not support reset/),
    });
  });
});
