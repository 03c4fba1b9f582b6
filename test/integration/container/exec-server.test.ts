/**
 * Exec through a container sandbox's exec server, driven through the SDK on
 * a real agent with real runc containers: no runtime process per call (the
 * command's parent is the sandbox's PID 1), output streamed as it comes and
 * unchanged bytes, stdin streamed, terminals, background commands that
 * outlive their exec and die with their sandbox, an exec whose caller went
 * away killed, output caps that hold for streams and background commands,
 * and persistent sessions (state kept, runaway commands interrupted).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type DsecClient } from '../../../core/sdk/index.js';
import { TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;
let dsec: DsecClient;
const ID = 'es-main';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  agent = await TestAgent.start();
  await agent.client.createSandbox(agent.spec(ID, { resources: { cpu: 1, memoryMiB: 128, pids: 128 } }));
  dsec = await connect({ socket: agent.socket });
}, 60_000);

afterAll(async () => {
  await dsec?.close();
  await agent?.dispose();
});

describe('exec through the exec server', () => {
  it('starts no runtime process: the command is a child of the sandbox\'s PID 1, the exec server', async () => {
    const result = await dsec.exec(ID, ['sh', '-c', 'echo $PPID; tr "\\0" " " < /proc/1/cmdline']);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toBe('1\n/.dsec/guest --fds 3,4 ');
  });

  it('streams output as it comes: chunks arrive before the command ends, and the result has all of it', async () => {
    const arrivals: { at: number; text: string }[] = [];
    const started = Date.now();
    const result = await dsec.exec(ID, ['sh', '-c', 'for i in 1 2 3; do echo line-$i; sleep 0.3; done; echo err >&2'], {
      onStdout: (chunk) => arrivals.push({ at: Date.now() - started, text: chunk.toString() }),
    });
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toBe('line-1\nline-2\nline-3\n');
    expect(result.stderr).toBe('err\n');
    expect(arrivals.map((arrival) => arrival.text).join('')).toBe('line-1\nline-2\nline-3\n');
    // The first line came long before the end (0.9 s of sleeps).
    expect(arrivals[0]!.at).toBeLessThan(result.durationMs - 400);
  });

  it('returns stdout bytes unchanged with output: buffer, all 256 byte values', async () => {
    const script = 'i=0; while [ $i -lt 256 ]; do printf "\\\\$(printf %o $i)"; i=$((i+1)); done';
    const result = await dsec.exec(ID, ['sh', '-c', script], { output: 'buffer' });
    expect(Buffer.isBuffer(result.stdout)).toBe(true);
    expect([...result.stdout]).toEqual(Array.from({ length: 256 }, (_, i) => i));
  });

  it('feeds a stdin stream as it comes, and bytes as given', async () => {
    async function* chunks() {
      for (const part of ['one\n', 'two\n', 'three\n']) {
        await sleep(50);
        yield part;
      }
    }
    const streamed = await dsec.exec(ID, ['cat'], { stdin: chunks() });
    expect(streamed.stdout).toBe('one\ntwo\nthree\n');
    const bytes = await dsec.exec(ID, ['od', '-An', '-tx1'], { stdin: Buffer.from([0, 255, 10]) });
    expect(bytes.stdout.trim()).toBe('00 ff 0a');
  });

  it('runs a command on a terminal of the size asked for', async () => {
    const result = await dsec.exec(ID, ['sh', '-c', 'stty size; [ -t 0 ] && echo tty'], { tty: { rows: 33, cols: 101 }, onStdout: () => undefined });
    expect(result.exitCode).toBe(0);
    expect(result.stdout.replace(/\r/g, '')).toBe('33 101\ntty\n');
  });

  it('answers at once for a command that leaves a process behind, and the process lives on', async () => {
    const started = Date.now();
    // nohup as a shell spells it (the test image's busybox has no nohup applet).
    const result = await dsec.exec(ID, ['sh', '-c', '(trap "" HUP; exec sleep 30) >/dev/null 2>&1 & echo $!']);
    expect(Date.now() - started).toBeLessThan(2_000);
    const pid = result.stdout.trim();
    await sleep(300);
    expect((await dsec.exec(ID, ['sh', '-c', `kill -0 ${pid} && echo alive`])).stdout).toBe('alive\n');
    // Even one that keeps the exec's pipes open neither holds the answer nor dies of SIGPIPE.
    const held = await dsec.exec(ID, ['sh', '-c', 'sleep 20 & echo $!']);
    await sleep(300);
    expect((await dsec.exec(ID, ['sh', '-c', `kill -0 ${held.stdout.trim()} && echo alive`])).stdout).toBe('alive\n');
  });

  it('kills an exec whose caller went away, instead of leaving it running', async () => {
    const caller = new AbortController();
    const running = dsec.exec(ID, ['sh', '-c', 'echo $$ > /tmp/abandoned.pid; exec sleep 300'], { signal: caller.signal }).catch((error: unknown) => error);
    await sleep(500);
    caller.abort();
    await running;
    await sleep(500);
    const check = await dsec.exec(ID, ['sh', '-c', 'kill -0 $(cat /tmp/abandoned.pid) 2>/dev/null && echo alive || echo gone']);
    expect(check.stdout).toBe('gone\n');
  });

  it('caps output in the foreground, in a stream and in the background, and flags it', async () => {
    const capped = await dsec.exec(ID, ['sh', '-c', 'yes | head -c 300000'], { maxOutputBytes: 1000 });
    expect(capped).toMatchObject({ truncated: true, exitCode: 0 });
    expect(capped.stdout.length).toBe(1000);
    let streamedBytes = 0;
    const streamed = await dsec.exec(ID, ['sh', '-c', 'yes | head -c 300000'], { maxOutputBytes: 5000, onStdout: (chunk) => (streamedBytes += chunk.length) });
    expect(streamed.truncated).toBe(true);
    expect(streamedBytes).toBe(5000);
    const background = await dsec.exec(ID, ['yes'], { background: true, maxOutputBytes: 4096 });
    await sleep(500);
    const soFar = await background.output();
    expect(soFar).toMatchObject({ running: true, truncated: true });
    expect(soFar.stdout.length).toBe(4096);
    await background.kill();
    const ended = await background.wait();
    expect(ended).toMatchObject({ signal: 'SIGKILL', truncated: true });
    await background.forget();
  });
});

describe('background commands', () => {
  it('outlive their exec: output so far, a list, wait, and the exit status', async () => {
    const handle = await dsec.exec(ID, ['sh', '-c', 'echo start; sleep 1; echo end; exit 3'], { background: true });
    expect(handle.pid).toBeGreaterThan(1);
    await sleep(300);
    expect(await handle.output()).toMatchObject({ running: true, stdout: 'start\n' });
    expect((await dsec.processes(ID)).find((entry) => entry.handle === handle.handle)).toMatchObject({ running: true, command: ['sh', '-c', expect.any(String)] });
    // A wait that runs out first says it still runs: not an error.
    await expect(handle.wait({ timeoutMs: 50 })).resolves.toBeUndefined();
    const result = await handle.wait();
    expect(result).toMatchObject({ exitCode: 3, stdout: 'start\nend\n' });
    await handle.forget();
    expect((await dsec.processes(ID)).some((entry) => entry.handle === handle.handle)).toBe(false);
  });

  it('die with their sandbox', async () => {
    await agent.client.createSandbox(agent.spec('es-short'));
    // A number no other test sleeps for: the check below looks at the whole host.
    const handle = await dsec.exec('es-short', ['sleep', '317'], { background: true });
    const hostPids = (await dsec.exec('es-short', ['cat', '/proc/self/status'])).stdout;
    expect(hostPids).toContain('NSpid');
    await agent.client.destroySandbox('es-short');
    // The host's view: the sleep is gone with its sandbox.
    const { execFileSync } = await import('node:child_process');
    const left = execFileSync('sh', ['-c', 'ps -eo args | grep -c "^sleep 317$" || true'], { encoding: 'utf8' });
    expect(Number(left.trim())).toBe(0);
    expect(handle.pid).toBeGreaterThan(0);
  });
});

describe('sessions', () => {
  it('keep cwd, exported and shell variables from one run to the next, with each run\'s exit code', async () => {
    const sh = await dsec.session(ID);
    expect(sh.info.shell).toMatch(/sh$/);
    await expect(sh.run('mkdir -p /tmp/repo && cd /tmp/repo && export A=1 && B=two')).resolves.toMatchObject({ exitCode: 0 });
    await expect(sh.run('pwd; echo $A $B')).resolves.toMatchObject({ exitCode: 0, stdout: '/tmp/repo\n1 two\n' });
    await expect(sh.run('false')).resolves.toMatchObject({ exitCode: 1 });
    await expect(sh.run('echo "unterminated')).resolves.toMatchObject({ exitCode: 2, ended: false });
    await expect(sh.run('echo still here')).resolves.toMatchObject({ exitCode: 0, stdout: 'still here\n' });
    await sh.close();
  });

  it('interrupts a runaway command and keep the session, cap a huge output, and refuse a second run at once', async () => {
    const sh = await dsec.session(ID, { cwd: '/tmp', env: { MARK: 'kept' } });
    const runaway = sh.run('sleep 1000');
    await sleep(300);
    await expect(sh.run('echo busy')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_BUSY' });
    await sh.interrupt();
    await expect(runaway).resolves.toMatchObject({ interrupted: true, ended: false });
    await expect(sh.run('echo $MARK; pwd')).resolves.toMatchObject({ stdout: 'kept\n/tmp\n' });
    const timed = await sh.run('sleep 100', { timeoutMs: 500 });
    expect(timed).toMatchObject({ timedOut: true, interrupted: true, ended: false });
    const huge = await sh.run('yes | head -c 2000000', { maxOutputBytes: 10_000 });
    expect(huge).toMatchObject({ truncated: true, exitCode: 0 });
    expect(huge.stdout.length).toBe(10_000);
    let chunks = 0;
    const streamed = await sh.run('echo a; sleep 0.3; echo b', { onStdout: () => (chunks += 1) });
    expect(streamed.stdout).toBe('a\nb\n');
    expect(chunks).toBeGreaterThanOrEqual(2);
    expect((await dsec.sessions(ID)).map((entry) => entry.id)).toContain(sh.id);
    await sh.close();
    expect((await dsec.sessions(ID)).map((entry) => entry.id)).not.toContain(sh.id);
  });

  it('run side by side in one sandbox, each with its own state, and stream binary output unchanged', async () => {
    const [one, two] = await Promise.all([dsec.session(ID), dsec.session(ID)]);
    expect(one.id).not.toBe(two.id);
    await Promise.all([one.run('cd /tmp && X=one'), two.run('cd / && X=two')]);
    const [a, b] = await Promise.all([one.run('sleep 0.3; echo "$X $(pwd)"'), two.run('sleep 0.3; echo "$X $(pwd)"')]);
    expect([a.stdout, b.stdout]).toEqual(['one /tmp\n', 'two /\n']);
    const chunks: Buffer[] = [];
    await one.run("awk 'BEGIN { for (i = 0; i < 256; i++) printf \"%c\", i }'", { onStdout: (chunk) => chunks.push(chunk) });
    const bytes = Buffer.concat(chunks);
    expect(bytes.length).toBe(256);
    expect([...bytes]).toEqual(Array.from({ length: 256 }, (_, i) => i));
    await Promise.all([one.close(), two.close()]);
  });
});
