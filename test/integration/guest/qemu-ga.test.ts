/**
 * GuestAgentClient against Debian's real QEMU guest agent (what a full VM's
 * image runs), on the host in unix-listen mode: the standard-QGA path of
 * exec (guest-exec + guest-exec-status, cwd, user and timeout by the shell
 * wrapper) and of files (guest-file-*, mkdir and chmod through guest-exec).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GuestAgentClient } from '../../../core/guest/index.js';
import { alive, startQemuGa, type RunningAgent } from './fixture.js';

let agent: RunningAgent;
let client: GuestAgentClient;

beforeAll(async () => {
  agent = await startQemuGa();
  client = await GuestAgentClient.connect(agent.socket, { id: 'vm-qga', timeoutMs: 10_000 });
});

afterAll(async () => {
  try {
    client?.close();
  } finally {
    await agent?.stop();
  }
});

const sh = (script: string, more: Partial<Parameters<GuestAgentClient['exec']>[0]> = {}) => client.exec({ path: '/bin/sh', args: ['-c', script], ...more });

describe('GuestAgentClient with qemu-ga', () => {
  it('sees a plain QEMU guest agent, without the dsec extensions', async () => {
    const info = await client.info();
    expect(info.dsec).toBe(false);
    expect(info.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(info.commands).toEqual(expect.arrayContaining(['guest-exec', 'guest-exec-status', 'guest-file-open']));
    await client.ping();
    await client.sync();
  });

  it('runs a command with stdout, stderr, exit code and stdin', async () => {
    const result = await sh('cat; echo err >&2; exit 5', { stdin: 'from stdin\n' });
    expect(result.stdout.toString()).toBe('from stdin\n');
    expect(result.stderr.toString()).toBe('err\n');
    expect(result.exitCode).toBe(5);
    expect(result.timedOut).toBe(false);
  });

  it('passes arguments unchanged and sets env over a base PATH, the working directory and the user', async () => {
    expect((await client.exec({ path: 'printf', args: ['%s|', 'a b', '', '$HOME', 'é'] })).stdout.toString()).toBe('a b||$HOME|é|');
    const result = await sh('echo "$FOO|$PATH"; pwd; id -u', { env: { FOO: 'bar' }, cwd: agent.dir, user: 'nobody' });
    expect(result.stdout.toString()).toBe(`bar|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n${agent.dir}\n65534\n`);
    expect((await sh('id -u; id -g', { user: '1234:567' })).stdout.toString()).toBe('1234\n567\n');
  });

  it('refuses a missing working directory or user with DSEC_GUEST_COMMAND_FAILED, as with dsec-guest', async () => {
    await expect(sh('true', { cwd: '/no/such/dir' })).rejects.toMatchObject({
      code: 'DSEC_GUEST_COMMAND_FAILED',
      message: 'the guest agent of sandbox vm-qga refused guest-exec: failed to change directory to /no/such/dir',
    });
    await expect(sh('true', { user: 'no-such-user' })).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED', message: expect.stringContaining('no user no-such-user') });
  });

  it('answers 127 for a command that is not there', async () => {
    const result = await client.exec({ path: 'no-such-command' });
    expect(result.exitCode).toBe(127);
  });

  it('kills the whole process group at the timeout', async () => {
    const pidFile = join(agent.dir, 'bg.pid');
    const started = Date.now();
    const result = await sh(`sleep 60 & echo $! > ${pidFile}; sleep 60`, { timeoutMs: 400 });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(result.timedOut).toBe(true);
    expect(result.exitCode).toBeNull();
    expect(result.signal).toBe(9);
    const background = Number(readFileSync(pidFile, 'utf8'));
    for (let i = 0; i < 100 && alive(background); i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(alive(background)).toBe(false);
  });

  it('cuts output at maxOutputBytes and says so', async () => {
    const result = await sh('head -c 5000 /dev/zero', { maxOutputBytes: 100 });
    expect(result.stdout.length).toBe(100);
    expect(result.truncated).toBe(true);
  });

  it('writes files with parents and mode, and reads them back, across several chunks', async () => {
    const path = join(agent.dir, 'deep/er/file.bin');
    const data = randomBytes(7 * 1024 * 1024 + 5);
    await client.writeFile(path, data, 0o640);
    expect(readFileSync(path).equals(data)).toBe(true);
    expect(statSync(path).mode & 0o7777).toBe(0o640);
    expect((await client.readFile(path, data.length)).equals(data)).toBe(true);
    await client.writeFile(join(agent.dir, 'empty'), Buffer.alloc(0));
    expect((await client.readFile(join(agent.dir, 'empty'), 0)).length).toBe(0);
  });

  it('maps missing, too large and directory reads to the DSEC_FILE_* codes', async () => {
    const missing = join(agent.dir, 'missing');
    await expect(client.readFile(missing, 10)).rejects.toMatchObject({ code: 'DSEC_FILE_NOT_FOUND', message: `sandbox vm-qga has no file ${missing}` });
    const big = join(agent.dir, 'big');
    writeFileSync(big, Buffer.alloc(10_000));
    await expect(client.readFile(big, 9_999)).rejects.toMatchObject({
      code: 'DSEC_FILE_TOO_LARGE',
      message: `file ${big} in sandbox vm-qga is 10000 bytes, more than the 9999 asked for`,
    });
    mkdirSync(join(agent.dir, 'a-dir'));
    await expect(client.readFile(join(agent.dir, 'a-dir'), 10)).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: expect.stringContaining('Is a directory') });
    writeFileSync(join(agent.dir, 'plain'), '');
    await expect(client.writeFile(join(agent.dir, 'plain/child'), Buffer.from('x'))).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID' });
  });

  it('answers many requests in a row and at once', async () => {
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => client.exec({ path: 'echo', args: [String(i)] })));
    expect(results.map((result) => result.stdout.toString())).toEqual(Array.from({ length: 20 }, (_, i) => `${i}\n`));
  });
  it('tells a file (with its size), a directory, something else and nothing apart with stat', async () => {
    writeFileSync(join(agent.dir, 'sized'), Buffer.alloc(1234));
    mkdirSync(join(agent.dir, 'stat-dir'), { recursive: true });
    expect(await client.stat(join(agent.dir, 'sized'))).toEqual({ type: 'file', size: 1234 });
    expect(await client.stat(join(agent.dir, 'stat-dir'))).toMatchObject({ type: 'dir' });
    expect(await client.stat('/dev/null')).toMatchObject({ type: 'other' });
    expect(await client.stat(join(agent.dir, 'nothing'))).toEqual({ type: 'missing', size: 0 });
    expect(await client.stat(join(agent.dir, 'sized/below'))).toEqual({ type: 'missing', size: 0 });
  });
});
