/**
 * exec through the real dsec-guest (compiled by the build, run on the host
 * with --listen) and GuestAgentClient: output, exit codes, stdin, env, cwd,
 * users, timeouts that kill the whole process group, output caps, and many
 * requests in a row and at once on one connection.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GuestAgentClient } from '../../../core/guest/index.js';
import { alive, buildGuestAgent, startDsecGuest, type RunningAgent } from './fixture.js';

let agent: RunningAgent;
let client: GuestAgentClient;

beforeAll(async () => {
  buildGuestAgent();
  agent = await startDsecGuest();
  client = await GuestAgentClient.connect(agent.socket, { id: 'sbx-exec', timeoutMs: 10_000 });
});

afterAll(async () => {
  try {
    client?.close();
  } finally {
    await agent?.stop();
  }
});

const sh = (script: string, more: Partial<Parameters<GuestAgentClient['exec']>[0]> = {}) => client.exec({ path: '/bin/sh', args: ['-c', script], ...more });

describe('dsec-guest exec', () => {
  it('reports itself as dsec-guest with the dsec extensions in guest-info', async () => {
    const info = await client.info();
    expect(info.dsec).toBe(true);
    expect(info.version).toMatch(/^dsec-guest \d+\.\d+\.\d+$/);
    expect(info.commands).toEqual(expect.arrayContaining(['guest-exec', 'guest-file-open', 'dsec-exec', 'dsec-reset', 'dsec-stat', 'dsec-mkdirs']));
    await client.ping();
  });

  it('returns stdout, stderr and the exit code of a command', async () => {
    const result = await sh('echo out; echo err >&2; exit 3');
    expect(result.stdout.toString()).toBe('out\n');
    expect(result.stderr.toString()).toBe('err\n');
    expect(result.exitCode).toBe(3);
    expect(result.signal).toBeUndefined();
    expect(result.timedOut).toBe(false);
    expect(result.truncated).toBe(false);
    expect(result.durationMs).toBeGreaterThanOrEqual(0);
  });

  it('looks a bare command name up in PATH and passes arguments through unchanged', async () => {
    const result = await client.exec({ path: 'printf', args: ['%s|', 'a b', '', "c'd\"e", 'é😀'] });
    expect(result.stdout.toString()).toBe("a b||c'd\"e|é😀|");
  });

  it('feeds stdin (text or bytes) and carries binary output intact', async () => {
    expect((await client.exec({ path: 'cat', stdin: 'hello\n' })).stdout.toString()).toBe('hello\n');
    const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const result = await client.exec({ path: 'cat', stdin: bytes });
    expect(result.stdout.equals(bytes)).toBe(true);
  });

  it('feeds a large stdin while reading a large stdout without deadlocking on full pipes', async () => {
    const input = Buffer.alloc(3 * 1024 * 1024, 'x');
    const result = await client.exec({ path: 'cat', stdin: input, maxOutputBytes: 4 * 1024 * 1024 });
    expect(result.stdout.length).toBe(input.length);
    expect(result.truncated).toBe(false);
  });

  it('sets the environment over a base PATH and HOME, and the working directory', async () => {
    const result = await sh('echo "$FOO|$HOME|$PATH"; pwd', { env: { FOO: 'bar baz' }, cwd: agent.dir });
    const [line, cwd] = result.stdout.toString().split('\n');
    expect(line).toBe('bar baz|/root|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
    expect(cwd).toBe(agent.dir);
    expect((await sh('echo $PATH', { env: { PATH: '/bin' } })).stdout.toString()).toBe('/bin\n');
    expect((await sh('pwd')).stdout.toString()).toBe('/\n');
  });

  it('runs as a user given by name, by uid, or as uid:gid, with that user\'s home', async () => {
    const byName = await sh('id -u; id -g; echo $HOME', { user: 'nobody' });
    expect(byName.stdout.toString()).toBe('65534\n65534\n/nonexistent\n');
    expect((await sh('id -u; id -g', { user: '1234' })).stdout.toString()).toBe('1234\n1234\n');
    expect((await sh('id -u; id -g; id -G', { user: '1234:567' })).stdout.toString()).toBe('1234\n567\n567\n');
    expect((await sh('id -u', { user: 'root' })).stdout.toString()).toBe('0\n');
  });

  it('refuses an unknown user and a missing working directory with DSEC_GUEST_COMMAND_FAILED naming them', async () => {
    await expect(sh('true', { user: 'no-such-user' })).rejects.toMatchObject({
      code: 'DSEC_GUEST_COMMAND_FAILED',
      message: expect.stringMatching(/sandbox sbx-exec refused dsec-exec: no user 'no-such-user' in \/etc\/passwd/),
    });
    await expect(sh('true', { cwd: '/no/such/dir' })).rejects.toMatchObject({
      code: 'DSEC_GUEST_COMMAND_FAILED',
      message: expect.stringContaining('failed to change directory to /no/such/dir: No such file or directory'),
    });
  });

  it('answers 127 for a command that is not there and 126 for one that is not executable, as a shell does', async () => {
    const missing = await client.exec({ path: 'no-such-command' });
    expect(missing.exitCode).toBe(127);
    expect(missing.stderr.toString()).toContain('no-such-command: No such file or directory');
    const notExecutable = await client.exec({ path: '/etc/passwd' });
    expect(notExecutable.exitCode).toBe(126);
    expect(notExecutable.stderr.toString()).toContain('Permission denied');
  });

  it('reports a process ended by a signal with a null exit code and the signal number', async () => {
    const result = await sh('kill -TERM $$');
    expect(result.exitCode).toBeNull();
    expect(result.signal).toBe(15);
    expect(result.timedOut).toBe(false);
  });

  it('kills the whole process group at the timeout, background processes included', async () => {
    const pidFile = join(agent.dir, 'background.pid');
    const started = Date.now();
    const result = await sh(`sleep 60 & echo $! > ${pidFile}; echo started; sleep 60`, { timeoutMs: 300 });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(result.timedOut).toBe(true);
    expect(result.exitCode).toBeNull();
    expect(result.signal).toBe(9);
    expect(result.stdout.toString()).toBe('started\n');
    const background = Number(readFileSync(pidFile, 'utf8'));
    for (let i = 0; i < 100 && alive(background); i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(alive(background)).toBe(false);
  });

  it('answers when the command exits even if a background process keeps its output open', async () => {
    const pidFile = join(agent.dir, 'daemon.pid');
    const started = Date.now();
    const result = await sh(`sleep 30 & echo $! > ${pidFile}; echo done`, { timeoutMs: 20_000 });
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(result.exitCode).toBe(0);
    expect(result.stdout.toString()).toBe('done\n');
    process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
  });

  it('keeps at most maxOutputBytes of each stream and says it cut them', async () => {
    const result = await sh('head -c 100000 /dev/zero; head -c 50 /dev/zero >&2', { maxOutputBytes: 1000 });
    expect(result.stdout.length).toBe(1000);
    expect(result.stderr.length).toBe(50);
    expect(result.truncated).toBe(true);
    expect(result.exitCode).toBe(0);
    const exact = await sh('head -c 1000 /dev/zero', { maxOutputBytes: 1000 });
    expect(exact.truncated).toBe(false);
    const none = await sh('echo hidden', { maxOutputBytes: 0 });
    expect(none.stdout.length).toBe(0);
    expect(none.truncated).toBe(true);
  });

  it('carries 8 MiB of output in one answer', async () => {
    const result = await sh('head -c 8388608 /dev/urandom', { maxOutputBytes: 8 * 1024 * 1024 });
    expect(result.stdout.length).toBe(8 * 1024 * 1024);
    expect(result.truncated).toBe(false);
  });

  it('answers 300 requests in a row and 30 sent at once, each with its own answer', async () => {
    for (let i = 0; i < 300; i++) {
      const result = await client.exec({ path: 'echo', args: [String(i)] });
      expect(result.stdout.toString()).toBe(`${i}\n`);
    }
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => client.exec({ path: 'echo', args: [`at once ${i}`] })));
    expect(results.map((result) => result.stdout.toString())).toEqual(Array.from({ length: 30 }, (_, i) => `at once ${i}\n`));
  });

  it('leaves no zombie of its commands behind', async () => {
    await sh('sleep 0.1 & sleep 0.1 & exit 0');
    await new Promise((resolve) => setTimeout(resolve, 400));
    const children = readFileSync(`/proc/${agent.process.pid}/task/${agent.process.pid}/children`, 'utf8').trim();
    expect(children).toBe('');
  });
});
