/**
 * Sessions of dsec-guest's async mode through GuestSession: a persistent
 * shell whose state (cwd, variables, functions) carries between runs, the
 * nonce markers that cut each run's output, interrupts (a runaway child, a
 * runaway loop of builtins), caps, binary output, exit, and busy runs.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GuestSession, openFifoTransport } from '../../../core/guest/index.js';
import { alive, buildGuestAgent, startDsecGuestFifos, type FifoAgent } from './fixture.js';

let agent: FifoAgent;
let session: GuestSession;

beforeAll(async () => {
  buildGuestAgent();
  agent = await startDsecGuestFifos();
  session = await GuestSession.open(await openFifoTransport(agent.inPath, agent.outPath), { id: 'sbx-sessions', timeoutMs: 10_000 });
});

afterAll(async () => {
  try {
    session?.close();
  } finally {
    await agent?.stop();
  }
});

const run = (handle: string, command: string, options: Parameters<GuestSession['runInSession']>[2] = {}) => session.runInSession(handle, command, options);

describe('dsec-guest sessions', () => {
  it('keeps the working directory, exported and shell variables and functions from one run to the next', async () => {
    const { handle, pid, shell } = await session.openSession({ handle: 'state' });
    expect(handle).toBe('state');
    expect(pid).toBeGreaterThan(1);
    expect(shell).toBe('/bin/bash');
    expect(await run(handle, 'cd /tmp && export A=1; B=2; greet() { echo "hi $1"; }')).toMatchObject({ exitCode: 0, ended: false });
    const result = await run(handle, 'pwd; echo "$A $B"; greet you; sh -c \'echo "child sees ${A:-nothing} ${B:-nothing}"\'');
    expect(result.stdout.toString()).toBe('/tmp\n1 2\nhi you\nchild sees 1 nothing\n');
    expect(await session.sessions()).toContainEqual({ handle, pid, shell: '/bin/bash', busy: false, ended: false, cwd: '/tmp' });
    await session.closeSession(handle);
  });

  it('gives each run its exit code and its own stdout and stderr, output without a final newline kept whole', async () => {
    const { handle } = await session.openSession({ cwd: agent.dir, env: { GREETING: 'hello' } });
    expect((await run(handle, 'true')).exitCode).toBe(0);
    expect((await run(handle, 'false')).exitCode).toBe(1);
    expect((await run(handle, 'f() { return 7; }; f')).exitCode).toBe(7);
    const mixed = await run(handle, 'echo out; echo err >&2; printf "no newline"; printf "e2" >&2; exit_code=5; (exit $exit_code)');
    expect(mixed).toMatchObject({ exitCode: 5, interrupted: false, timedOut: false, ended: false, truncated: false });
    expect(mixed.stdout.toString()).toBe('out\nno newline');
    expect(mixed.stderr.toString()).toBe('err\ne2');
    expect((await run(handle, 'echo "$GREETING"; pwd')).stdout.toString()).toBe(`hello\n${agent.dir}\n`);
    expect((await run(handle, "echo 'it'\\''s quoted' \"and $((1 + 2))\"")).stdout.toString()).toBe("it's quoted and 3\n");
    await session.closeSession(handle);
  });

  it('survives a syntax error and a failing special builtin: the session goes on', async () => {
    const { handle } = await session.openSession();
    await run(handle, 'X=kept');
    const broken = await run(handle, 'if then fi (');
    expect(broken.exitCode).toBe(2);
    expect(broken.stderr.toString()).toContain('syntax error');
    expect(broken.ended).toBe(false);
    expect((await run(handle, 'readonly R=1; R=2')).ended).toBe(false);
    expect((await run(handle, 'echo $X')).stdout.toString()).toBe('kept\n');
    await session.closeSession(handle);
  });

  it('interrupts a runaway sleep 1000 at its timeout and keeps the session\'s state', async () => {
    const { handle } = await session.openSession();
    await run(handle, 'cd /tmp; KEEP=yes');
    const started = Date.now();
    const result = await run(handle, 'echo before; sleep 1000', { timeoutMs: 300 });
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(result).toMatchObject({ exitCode: 130, interrupted: true, timedOut: true, ended: false });
    expect(result.stdout.toString()).toBe('before\n');
    expect((await run(handle, 'echo $KEEP; pwd')).stdout.toString()).toBe('yes\n/tmp\n');
    await session.closeSession(handle);
  });

  it('interrupts a run on request, and an abort interrupts it too', async () => {
    const { handle } = await session.openSession();
    const running = run(handle, 'sleep 1000');
    await sleep(200);
    await session.interruptSession(handle);
    expect(await running).toMatchObject({ exitCode: 130, interrupted: true, timedOut: false, ended: false });
    const controller = new AbortController();
    const aborted = run(handle, 'sleep 1000', { signal: controller.signal });
    await sleep(200);
    controller.abort();
    await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
    expect((await run(handle, 'echo still here')).stdout.toString()).toBe('still here\n');
    await session.interruptSession(handle); // nothing in flight: nothing happens
    await session.closeSession(handle);
  });

  it('ends a session stuck in a loop of builtins after the escalation, with ended true', async () => {
    const { handle, pid } = await session.openSession();
    const started = Date.now();
    const result = await run(handle, 'while :; do :; done', { timeoutMs: 200 });
    const took = Date.now() - started;
    expect(result).toMatchObject({ exitCode: null, interrupted: true, timedOut: true, ended: true });
    expect(took).toBeGreaterThanOrEqual(3_500); // SIGINT at 0.2 s, SIGKILL 2 s later, the shell 2 s after that
    expect(took).toBeLessThan(10_000);
    expect(alive(pid)).toBe(false);
    expect(await session.sessions()).toContainEqual(expect.objectContaining({ handle, ended: true, busy: false }));
    await expect(run(handle, 'true')).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED', message: expect.stringContaining('ended') });
    await session.closeSession(handle);
    expect((await session.sessions()).find((entry) => entry.handle === handle)).toBeUndefined();
  });

  it('caps a huge output, kept and streamed, and says so', async () => {
    const { handle } = await session.openSession();
    const kept = await run(handle, 'head -c 50000000 /dev/zero; echo done >&2', { maxOutputBytes: 1024 * 1024 });
    expect(kept.stdout.length).toBe(1024 * 1024);
    expect(kept).toMatchObject({ stdoutTruncated: true, stderrTruncated: false, exitCode: 0 });
    expect(kept.stderr.toString()).toBe('done\n');
    let streamed = 0;
    const capped = await run(handle, 'yes | head -c 20000000', { maxOutputBytes: 100_000, onOutput: (_, chunk) => (streamed += chunk.length) });
    expect(streamed).toBe(100_000);
    expect(capped).toMatchObject({ stdoutTruncated: true, exitCode: 0 });
    expect(capped.stdout.length).toBe(0);
    await session.closeSession(handle);
  });

  it('carries binary output, marker look-alikes included, unchanged; streamed chunks hold no part of a marker', async () => {
    const { handle } = await session.openSession();
    const bytes = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), Buffer.from('\n\x1edeadbeefdeadbeef 0\x1e\n\n\x1e')]);
    const file = join(agent.dir, 'binary');
    writeFileSync(file, bytes);
    expect((await run(handle, `cat ${file}`)).stdout.equals(bytes)).toBe(true);
    expect((await run(handle, `cat ${file} >&2`)).stderr.equals(bytes)).toBe(true);
    const chunks: Buffer[] = [];
    const streamed = await run(handle, `cat ${file}; sleep 0.1; printf 'a\\nb'`, { onOutput: (_, chunk) => chunks.push(chunk) });
    expect(streamed.exitCode).toBe(0);
    expect(Buffer.concat(chunks).equals(Buffer.concat([bytes, Buffer.from('a\nb')]))).toBe(true);
    await session.closeSession(handle);
  });

  it('reports exit 3 as the end of the session, and refuses runs after it', async () => {
    const { handle } = await session.openSession({ shell: '/bin/sh' });
    expect((await session.sessions()).find((entry) => entry.handle === handle)?.shell).toBe('/bin/sh');
    const result = await run(handle, 'echo bye; exit 3');
    expect(result).toMatchObject({ ended: true, exitCode: 3, interrupted: false });
    expect(result.stdout.toString()).toBe('bye\n');
    await expect(run(handle, 'true')).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED' });
    await session.closeSession(handle);
  });

  it('refuses a second run while one is in flight with DSEC_SANDBOX_BUSY', async () => {
    const { handle } = await session.openSession();
    const first = run(handle, 'sleep 0.5; echo first');
    await expect(run(handle, 'echo second')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_BUSY', message: expect.stringContaining('in flight') });
    expect((await first).stdout.toString()).toBe('first\n');
    await session.closeSession(handle);
  });

  it('runs the shell as numeric ids, and closing it kills what it started', async () => {
    const { handle } = await session.openSession({ uid: 2345, gid: 2346, groups: [7] });
    expect((await run(handle, 'id -u; id -g; id -G; echo $HOME')).stdout.toString()).toBe('2345\n2346\n2346 7\n/\n');
    const background = Number((await run(handle, 'sleep 100 >/dev/null 2>&1 & echo $!')).stdout.toString());
    expect(alive(background)).toBe(true);
    await session.closeSession(handle);
    for (let i = 0; i < 200 && alive(background); i++) await sleep(10);
    expect(alive(background)).toBe(false);
    await expect(run(handle, 'true')).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE' });
    await expect(session.closeSession('no-such-session')).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE' });
  });

  it('shares one namespace of handles with processes', async () => {
    const { handle } = await session.openSession({ handle: 'shared-name' });
    await expect(session.exec({ handle, path: 'true' })).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED', message: expect.stringContaining('already in use') });
    await expect(session.output(handle)).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE', message: expect.stringContaining('is a session') });
    await session.closeSession(handle);
  });
});
