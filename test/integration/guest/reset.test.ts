/**
 * dsec-reset through the real dsec-guest as PID 1 of its own pid namespace
 * (unshare --pid --fork --mount-proc), as in a microVM or a FnCall worker:
 * every other process is killed and reaped, the directories are emptied but
 * kept, the SysV IPC objects of its IPC namespace are removed (each agent
 * of these tests has an IPC namespace of its own: the host's objects are
 * never touched), and the agent answers on as before. As PID 1 it also reaps
 * orphans without losing the exit status of the commands it runs.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GuestAgentClient } from '../../../core/guest/index.js';
import { SANDBOX_CAPABILITIES } from '../../../plugins/backend-container/bundle.js';
import { alive, buildGuestAgent, startDsecGuest, startQemuGa, type DsecGuestOptions, type RunningAgent } from './fixture.js';

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

async function connectedAgent(pidNamespace: boolean, options: DsecGuestOptions = {}): Promise<{ agent: RunningAgent; client: GuestAgentClient }> {
  const agent = await startDsecGuest({ pidNamespace, ...options });
  agents.push(agent);
  const client = await GuestAgentClient.connect(agent.socket, { id: 'sbx-reset', timeoutMs: 10_000 });
  clients.push(client);
  return { agent, client };
}

/**
 * SysV objects of every kind, made by processes of the agent's: with ipcmk
 * (util-linux), one queue as another user (uid 1234: a root agent without
 * CAP_SYS_ADMIN may remove it only as that user), and a segment a background
 * process still has attached. Returns how many it made.
 */
async function makeIpcObjects(client: GuestAgentClient): Promise<number> {
  const attachAndStay = [
    'import ctypes, os, sys, time',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'libc.shmat.restype = ctypes.c_void_p',
    'segment = libc.shmget(0, 4096, 0o1600)', // IPC_PRIVATE, IPC_CREAT | 0600
    'assert segment >= 0 and libc.shmat(segment, None, 0) not in (None, ctypes.c_void_p(-1).value)',
    'if os.fork() == 0:',
    '    time.sleep(1000)', // the child keeps the segment attached
    'sys.exit(0)',
  ].join('\n');
  const made = await client.exec({
    path: '/bin/sh',
    args: ['-c', `set -e; ipcmk -M 4096; ipcmk -Q; ipcmk -S 3; setpriv --reuid 1234 --regid 1234 --clear-groups ipcmk -Q; python3 -c '${attachAndStay}'`],
  });
  expect(made).toMatchObject({ exitCode: 0, stderr: Buffer.from('') });
  expect(await ipcObjects(client)).toHaveLength(5);
  return 5;
}

/** The SysV IPC objects of the agent's IPC namespace, as lines of /proc/sysvipc (headers left out). */
async function ipcObjects(client: GuestAgentClient): Promise<string[]> {
  const listed = await client.exec({ path: '/bin/sh', args: ['-c', 'tail -q -n +2 /proc/sysvipc/shm /proc/sysvipc/msg /proc/sysvipc/sem'] });
  return listed.stdout.toString().split('\n').filter((line) => line.trim() !== '');
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

  it('as PID 1 removes every SysV shared memory segment, message queue and semaphore set of its IPC namespace, attached ones too', async () => {
    const { client } = await connectedAgent(true);
    const made = await makeIpcObjects(client);
    const first = await client.reset([]);
    expect(first).toEqual({ killed: 1, ipcRemoved: made }); // killed: the process holding the segment
    expect(await ipcObjects(client)).toEqual([]);
    expect(await client.reset([])).toEqual({ killed: 0, ipcRemoved: 0 });
  });

  it('removes the IPC objects of other users with only the capabilities a container sandbox\'s root has (no CAP_SYS_ADMIN)', async () => {
    const { agent, client } = await connectedAgent(true, { capabilities: SANDBOX_CAPABILITIES });
    const status = await client.exec({ path: '/bin/sh', args: ['-c', 'sed -n "s/^CapEff:\\t//p" /proc/1/status'] });
    const CAP_SYS_ADMIN = 21n;
    expect((BigInt(`0x${status.stdout.toString().trim()}`) >> CAP_SYS_ADMIN) & 1n).toBe(0n); // the agent really lacks it
    const made = await makeIpcObjects(client);
    expect(await client.reset([])).toEqual({ killed: 1, ipcRemoved: made });
    expect(await ipcObjects(client)).toEqual([]);
    // Acting as the owner for the removal did not leave the agent as that user.
    expect((await client.exec({ path: 'id', args: ['-u'] })).stdout.toString()).toBe('0\n');
    await client.writeFile(join(agent.dir, 'after-reset.txt'), Buffer.from('x'));
    expect(statSync(join(agent.dir, 'after-reset.txt')).uid).toBe(0);
    // Nor did it change the agent's credentials, which would have cleared its parent-death
    // signal: it still dies with unshare (--kill-child), as a worker dies with its runc.
    const agentPid = Number(readFileSync(`/proc/${agent.process.pid}/task/${agent.process.pid}/children`, 'utf8').trim());
    expect(alive(agentPid)).toBe(true);
    agents.splice(agents.indexOf(agent), 1);
    try {
      await agent.stop();
      for (let waited = 0; alive(agentPid) && waited < 2_000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(alive(agentPid)).toBe(false);
    } finally {
      if (alive(agentPid)) process.kill(agentPid, 'SIGKILL');
    }
  });

  it('leaves the IPC objects alone when it is not PID 1 (it does not own the IPC namespace then)', async () => {
    const { client } = await connectedAgent(false, { ipcNamespace: true });
    await client.exec({ path: 'ipcmk', args: ['-Q'] });
    expect(await client.reset([])).toEqual({ killed: 0, ipcRemoved: 0 });
    expect(await ipcObjects(client)).toHaveLength(1);
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
