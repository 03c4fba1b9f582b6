/**
 * dsec-guest's async mode (protocol 2) through GuestSession, the real agent
 * on a FIFO pair (--fds, as in a container sandbox): concurrent execs,
 * streamed output, binary bytes, stdin streaming, terminals, timeouts,
 * output caps, lingering pipes, background processes, numeric users, and
 * what children inherit.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GuestSession, openFifoTransport, type GuestExitEvent, type GuestOutputStream } from '../../../core/guest/index.js';
import { alive, buildGuestAgent, startDsecGuestFifos, type FifoAgent } from './fixture.js';

let agent: FifoAgent;
let session: GuestSession;

beforeAll(async () => {
  buildGuestAgent();
  agent = await startDsecGuestFifos();
  session = await GuestSession.open(await openFifoTransport(agent.inPath, agent.outPath), { id: 'sbx-async', timeoutMs: 10_000 });
});

afterAll(async () => {
  try {
    session?.close();
  } finally {
    await agent?.stop();
  }
});

const sh = (script: string, more: Record<string, unknown> = {}) => session.exec({ path: '/bin/sh', args: ['-c', script], ...more });

async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** The agent's resident memory in KiB (VmRSS). */
function agentRss(): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${agent.agentPid}/status`, 'utf8'))?.[1]);
}

describe('dsec-guest async exec', () => {
  it('says hello with its version, protocol generation and no processes killed', () => {
    expect(session.version).toBe('dsec-guest 2.0.0');
    expect(session.generation).toBeGreaterThanOrEqual(1);
    expect(session.killed).toBe(0);
  });

  it('answers 200 concurrent execs on one session, each with its own output and exit code', async () => {
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => session.exec({ path: '/bin/sh', args: ['-c', 'echo "out $0"; echo "err $0" >&2; exit $(($0 % 7))', String(i)] })),
    );
    results.forEach((result, i) => {
      expect(result.stdout.toString()).toBe(`out ${i}\n`);
      expect(result.stderr.toString()).toBe(`err ${i}\n`);
      expect(result.exitCode).toBe(i % 7);
    });
    expect(new Set(results.map((result) => result.pid)).size).toBe(200);
  });

  it('streams the output of a command printing for a second in several chunks, in order and complete, all before its answer', async () => {
    const chunks: { stream: GuestOutputStream; text: string; answered: boolean }[] = [];
    let answered = false;
    const streamed = await session.exec(
      { path: '/bin/sh', args: ['-c', 'for i in 1 2 3 4 5 6 7 8 9 10; do echo "line $i"; echo "err $i" >&2; sleep 0.1; done'] },
      { onOutput: (stream, chunk) => chunks.push({ stream, text: chunk.toString(), answered }) },
    );
    answered = true;
    expect(streamed.exitCode).toBe(0);
    expect(streamed.stdout.length + streamed.stderr.length).toBe(0); // it all went to the listener
    const stdout = chunks.filter((chunk) => chunk.stream === 'stdout');
    expect(stdout.map((chunk) => chunk.text).join('')).toBe(Array.from({ length: 10 }, (_, i) => `line ${i + 1}\n`).join(''));
    expect(chunks.filter((chunk) => chunk.stream === 'stderr').map((chunk) => chunk.text).join('')).toBe(Array.from({ length: 10 }, (_, i) => `err ${i + 1}\n`).join(''));
    expect(stdout.length).toBeGreaterThanOrEqual(5);
    expect(chunks.every((chunk) => !chunk.answered)).toBe(true);
  });

  it('carries all 256 byte values unchanged on stdout and stderr, kept and streamed', async () => {
    const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    expect((await session.exec({ path: 'cat', stdin: bytes })).stdout.equals(bytes)).toBe(true);
    expect((await sh('cat >&2', { stdin: bytes })).stderr.equals(bytes)).toBe(true);
    const streamed: Buffer[] = [];
    await session.exec({ path: 'cat', stdin: Buffer.concat([bytes, bytes]) }, { onOutput: (_, chunk) => streamed.push(chunk) });
    expect(Buffer.concat(streamed).equals(Buffer.concat([bytes, bytes]))).toBe(true);
  });

  it('streams stdin: cat echoes each chunk back before the next is sent, and eof ends it', async () => {
    const echoed: Buffer[] = [];
    const done = session.exec({ handle: 'cat-stdin', path: 'cat', stdinPipe: true, timeoutMs: 20_000 }, { onOutput: (_, chunk) => echoed.push(chunk) });
    for (let i = 1; i <= 5; i++) {
      await session.input('cat-stdin', Buffer.from(`chunk ${i}\n`));
      await until(() => Buffer.concat(echoed).toString().endsWith(`chunk ${i}\n`), `chunk ${i} echoed`);
    }
    await session.input('cat-stdin', undefined, true);
    const result = await done;
    expect(result.exitCode).toBe(0);
    expect(Buffer.concat(echoed).toString()).toBe('chunk 1\nchunk 2\nchunk 3\nchunk 4\nchunk 5\n');
    await expect(session.input('cat-stdin', Buffer.from('late'))).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE' });
  });

  it('writes 10 MiB of stdin in 4 MiB chunks, each answered once the process took it', async () => {
    const done = session.exec({ handle: 'wc-stdin', path: 'wc', args: ['-c'], stdinPipe: true, timeoutMs: 20_000 });
    await session.input('wc-stdin', Buffer.alloc(10 * 1024 * 1024, 'z'), true);
    expect((await done).stdout.toString().trim()).toBe(String(10 * 1024 * 1024));
  });

  it('refuses input to a process without an open stdin', async () => {
    const done = session.exec({ handle: 'no-stdin', path: 'sleep', args: ['0.5'] });
    await expect(session.input('no-stdin', Buffer.from('x'))).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED', message: expect.stringContaining('no open stdin') });
    await done;
  });

  it('runs a program on a terminal: it sees one on 0, 1 and 2, stty size reports rows and cols, and resize changes them', async () => {
    const sized = await sh('[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo tty; stty size; tty', { tty: { rows: 33, cols: 101 } });
    expect(sized.stdout.toString()).toMatch(/^tty\r\n33 101\r\n\/dev\/pts\/\d+\r\n$/);
    let seen = '';
    const done = session.exec(
      { handle: 'tty-resize', path: '/bin/sh', args: ['-c', 'read a; stty size; read b; stty size'], tty: { rows: 24, cols: 80 }, timeoutMs: 20_000 },
      { onOutput: (_, chunk) => (seen += chunk.toString()) },
    );
    await session.input('tty-resize', Buffer.from('one\n'));
    await until(() => seen.includes('24 80'), 'the first size');
    await session.resize('tty-resize', 50, 132);
    await session.input('tty-resize', Buffer.from('two\n'));
    await until(() => seen.includes('50 132'), 'the size after resize');
    expect((await done).exitCode).toBe(0);
    await expect(session.resize('cat-nope', 1, 1)).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE' });
  });

  it('sends the terminal EOF character for eof on a tty, so cat reading it ends', async () => {
    let seen = '';
    const done = session.exec({ handle: 'tty-cat', path: 'cat', tty: { rows: 24, cols: 80 }, timeoutMs: 20_000 }, { onOutput: (_, chunk) => (seen += chunk.toString()) });
    await session.input('tty-cat', Buffer.from('hello\n'));
    await until(() => seen.split('hello').length >= 3, 'the echo and the copy');
    await session.input('tty-cat', undefined, true);
    expect((await done).exitCode).toBe(0);
  });

  it('kills the whole process group at the timeout, background processes included', async () => {
    const pidFile = join(agent.dir, 'timeout.pid');
    const started = Date.now();
    const result = await sh(`sleep 60 & echo $! > ${pidFile}; echo started; sleep 60`, { timeoutMs: 300 });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(result).toMatchObject({ timedOut: true, exitCode: null, signal: 9 });
    expect(result.stdout.toString()).toBe('started\n');
    const background = Number(readFileSync(pidFile, 'utf8'));
    await until(() => !alive(background), 'the background sleep to die');
  });

  it('caps output of foreground, streamed and background processes and flags it, while the agent stays small', async () => {
    const kept = await sh('head -c 20000000 /dev/zero; echo tail >&2', { maxOutputBytes: 1000 });
    expect(kept).toMatchObject({ stdoutTruncated: true, stderrTruncated: false, truncated: true, exitCode: 0 });
    expect(kept.stdout.length).toBe(1000);
    expect(kept.stderr.toString()).toBe('tail\n');
    let streamed = 0;
    const flagged = await session.exec({ path: 'head', args: ['-c', '20000000', '/dev/zero'], maxOutputBytes: 100_000 }, { onOutput: (_, chunk) => (streamed += chunk.length) });
    expect(streamed).toBe(100_000);
    expect(flagged.stdoutTruncated).toBe(true);
    const before = agentRss();
    const yes = await session.spawn({ path: 'yes', maxOutputBytes: 4096 }, { onOutput: () => undefined });
    await sleep(1_000);
    const snapshot = await session.output(yes.handle);
    expect(snapshot).toMatchObject({ running: true, stdoutTruncated: true });
    expect(snapshot.stdout.length).toBe(4096);
    expect(snapshot.stdout.toString().startsWith('y\ny\n')).toBe(true);
    expect(agentRss()).toBeLessThan(Math.max(before, 4096) + 32 * 1024); // KiB: GBs went through, a few MiB at most stayed
    await session.forget(yes.handle);
  });

  it('answers sh -c "sleep 5 & echo done" at once; the sleep lives on, and a background writer never gets SIGPIPE', async () => {
    const pidFile = join(agent.dir, 'linger.pid');
    const started = Date.now();
    const result = await sh(`sleep 5 & echo $! > ${pidFile}; echo done`);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(result.stdout.toString()).toBe('done\n');
    const sleeper = Number(readFileSync(pidFile, 'utf8'));
    expect(alive(sleeper)).toBe(true);
    process.kill(sleeper, 'SIGKILL');
    // Writes after the answer: a closed pipe would kill the writer with SIGPIPE before it records its status.
    const status = join(agent.dir, 'linger.status');
    const writer = await sh(`(sleep 0.3; head -c 300000 /dev/zero; echo late; echo late >&2; echo "ok $?" > ${status}) & echo done`);
    expect(writer.stdout.toString()).toBe('done\n');
    await until(() => existsSync(status) && readFileSync(status, 'utf8') === 'ok 0\n', 'the background writer to finish');
  });

  it('keeps a background process past its spawn: output so far, the list, wait, the dsec-exit event', async () => {
    const exits: GuestExitEvent[] = [];
    session.onExit((event) => exits.push(event));
    const { handle, pid } = await session.spawn({ handle: 'bg-1', path: '/bin/sh', args: ['-c', 'echo first; sleep 0.5; echo second; echo e >&2; exit 4'] });
    expect(handle).toBe('bg-1');
    await until(async () => (await session.output(handle)).stdout.toString() === 'first\n', 'the first line');
    expect(await session.output(handle)).toMatchObject({ running: true, pid });
    expect(await session.processes()).toContainEqual(expect.objectContaining({ handle: 'bg-1', pid, running: true, path: '/bin/sh', args: ['-c', expect.any(String)] }));
    const result = await session.wait(handle, 10_000);
    expect(result).toMatchObject({ pid, exitCode: 4 });
    expect(result!.stdout.toString()).toBe('first\nsecond\n');
    expect(result!.stderr.toString()).toBe('e\n');
    expect(exits).toContainEqual(expect.objectContaining({ handle: 'bg-1', pid, exitCode: 4, timedOut: false }));
    expect(await session.output(handle)).toMatchObject({ running: false, exitCode: 4 });
    expect(await session.wait(handle)).toMatchObject({ exitCode: 4 }); // at once: it has exited
    expect((await session.processes()).find((entry) => entry.handle === 'bg-1')).toMatchObject({ running: false, exitCode: 4 });
    await session.forget(handle);
    expect((await session.processes()).find((entry) => entry.handle === 'bg-1')).toBeUndefined();
  });

  it('waits on a background process with a timeout, signals it, and forget kills one still running', async () => {
    const { handle, pid } = await session.spawn({ path: 'sleep', args: ['30'] });
    expect(await session.wait(handle, 100)).toBeUndefined();
    await session.signal(handle, 15);
    expect(await session.wait(handle, 10_000)).toMatchObject({ exitCode: null, signal: 15 });
    await session.forget(handle);
    const other = await session.spawn({ path: 'sleep', args: ['30'] });
    await session.forget(other.handle);
    await until(() => !alive(other.pid), 'the forgotten sleep to die');
    expect(alive(pid)).toBe(false);
    await expect(session.forget(other.handle)).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE', message: expect.stringContaining(other.handle) });
    await expect(session.wait('bg-never', 10)).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE' });
  });

  it('streams a background process to its listener and kills it at its own timeout', async () => {
    let seen = '';
    const { handle } = await session.spawn({ path: '/bin/sh', args: ['-c', 'echo hello; sleep 30'], timeoutMs: 300 }, { onOutput: (_, chunk) => (seen += chunk.toString()) });
    expect(await session.wait(handle, 10_000)).toMatchObject({ timedOut: true, signal: 9 });
    expect(seen).toBe('hello\n');
    await session.forget(handle);
  });

  it('refuses a handle already in use, and a bad one', async () => {
    const { handle } = await session.spawn({ handle: 'dup', path: 'sleep', args: ['30'] });
    await expect(session.exec({ handle, path: 'true' })).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED', message: expect.stringContaining('already in use') });
    await expect(session.exec({ handle: 'bad handle!', path: 'true' })).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED', message: expect.stringContaining("'handle'") });
    await session.forget(handle);
  });

  it('answers 127 for a missing command and 126 for one not executable, the reason streamed first when streaming', async () => {
    const missing = await session.exec({ path: 'no-such-command' });
    expect(missing.exitCode).toBe(127);
    expect(missing.stderr.toString()).toContain('no-such-command: No such file or directory');
    expect((await session.exec({ path: '/etc/passwd' })).exitCode).toBe(126);
    let streamed = '';
    const result = await session.exec({ path: 'no-such-command' }, { onOutput: (stream, chunk) => (streamed += `${stream}:${chunk.toString()}`) });
    expect(result.exitCode).toBe(127);
    expect(streamed).toMatch(/^stderr:dsec-guest: .*no-such-command/);
    const background = await session.spawn({ path: 'no-such-command' });
    expect(await session.wait(background.handle, 5_000)).toMatchObject({ exitCode: 127 });
    await session.forget(background.handle);
    await expect(sh('true', { cwd: '/no/such/dir' })).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED', message: expect.stringContaining('failed to change directory') });
  });

  it('runs as numeric uid, gid and groups with the home given, without the guest\'s /etc/passwd', async () => {
    const result = await sh('id -u; id -g; id -G; echo "$HOME"', { uid: 1234, gid: 567, groups: [11, 12], home: '/home/x' });
    expect(result.stdout.toString()).toBe('1234\n567\n567 11 12\n/home/x\n');
    expect((await sh('id -G; echo "$HOME"', { uid: 4321, gid: 4321 })).stdout.toString()).toBe('4321\n/\n');
    await expect(sh('true', { uid: 1234 })).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED', message: expect.stringContaining("'gid'") });
    await expect(sh('true', { uid: 1, gid: 1, user: 'root' })).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED' });
    expect((await sh('id -un', { user: 'nobody' })).stdout.toString()).toBe('nobody\n');
  });

  it('gives children exactly fds 0, 1 and 2, plain and on a terminal', async () => {
    expect((await sh('ls /proc/$$/fd')).stdout.toString()).toBe('0\n1\n2\n');
    expect((await sh('ls /proc/$$/fd', { stdinPipe: true, stdin: 'x' })).stdout.toString()).toBe('0\n1\n2\n');
    expect((await sh('ls -1 /proc/$$/fd', { tty: { rows: 10, cols: 10 } })).stdout.toString()).toBe('0\r\n1\r\n2\r\n');
  });

  it('kills the process group when the caller aborts an exec, and rejects with the abort reason', async () => {
    const controller = new AbortController();
    const pidFile = join(agent.dir, 'abort.pid');
    const running = sh(`echo $$ > ${pidFile}; exec sleep 30`, { timeoutMs: 60_000 });
    const aborted = session.exec({ path: '/bin/sh', args: ['-c', `sleep 30 & echo $! > ${pidFile}.bg; exec sleep 30`] }, { signal: controller.signal });
    await until(() => existsSync(`${pidFile}.bg`) && existsSync(pidFile), 'both to start');
    const started = Date.now();
    controller.abort();
    await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
    expect(Date.now() - started).toBeLessThan(3_000);
    await until(() => !alive(Number(readFileSync(`${pidFile}.bg`, 'utf8'))), 'its group to die');
    process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
    expect((await running).signal).toBe(9);
  });
});
