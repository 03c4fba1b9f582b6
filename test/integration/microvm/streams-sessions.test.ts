/**
 * A microVM driven through its guest agent's async mode (protocol 2 over
 * the virtio-serial port), as a container sandbox is through its exec
 * server: exec output streamed as it comes, binary output unchanged, a
 * caller that goes away killing its command, an open stdin and a terminal
 * reached by handle, calls at once on one connection, files in parts,
 * background commands and persistent shells, both still there after a
 * pause and resume (a new qemu, a new connection) and after the node agent
 * restarts. One VM for the whole file (a TCG boot costs seconds); its
 * commands run as the guest's `nobody`.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProcessClient } from '../../../core/agent/client-processes.js';
import { connect, type DsecClient, type ProcessHandle, type Session } from '../../../core/sdk/index.js';
import { TestAgent } from '../../helpers/agent-fixture.js';
import { killQemuUnder, qemuProcessesUnder } from './vm-processes.js';

const ID = 'vm-streams';
let agent: TestAgent;
let dsec: DsecClient;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Poll `read` until `done` holds (or give up after `ms`), returning the last value read. */
async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await sleep(50);
  }
}

/** Whether the pid written to `file` in the guest still runs. */
async function alive(file: string): Promise<string> {
  return (await dsec.exec(ID, ['sh', '-c', `kill -0 $(cat ${file}) 2>/dev/null && echo alive || echo gone`])).stdout.trim();
}

beforeAll(async () => {
  agent = await TestAgent.start({ backends: [{ name: 'backend-microvm', options: {} }] });
  await agent.client.createSandbox(
    agent.spec(ID, { backend: 'microvm', user: 'nobody', workdir: '/tmp', env: { GREETING: 'hi' }, resources: { cpu: 1, memoryMiB: 256, pids: 256 } }),
  );
  dsec = await connect({ socket: agent.socket });
}, 120_000);

afterAll(async () => {
  try {
    await dsec?.close();
    await agent?.dispose();
  } finally {
    if (agent) killQemuUnder(agent.tmp);
  }
});

describe('a microVM over protocol 2', () => {
  it('lists process and session among its capabilities, from its taps', async () => {
    expect((await agent.client.node()).capabilities?.microvm).toEqual(expect.arrayContaining(['exec', 'process', 'session', 'readFile', 'writeFile', 'pause', 'resume']));
  });

  it('streams exec output in several chunks as it comes, before the command ends', async () => {
    const chunks: { at: number; text: string }[] = [];
    const result = await dsec.exec(ID, ['sh', '-c', 'for i in 1 2 3 4; do echo "tick $i $GREETING $(id -un)"; sleep 0.4; done'], {
      onStdout: (chunk) => chunks.push({ at: Date.now(), text: chunk.toString() }),
    });
    const ended = Date.now();
    expect(result.exitCode).toBe(0);
    expect(chunks.map((chunk) => chunk.text).join('')).toBe([1, 2, 3, 4].map((i) => `tick ${i} hi nobody\n`).join(''));
    expect(result.stdout).toBe(chunks.map((chunk) => chunk.text).join(''));
    expect(chunks.length).toBeGreaterThanOrEqual(3);
    expect(ended - chunks[0]!.at).toBeGreaterThan(800);
  });

  it('gives binary stdout unchanged as base64, streamed or not', async () => {
    const bytes = Buffer.concat([randomBytes(256 * 1024), Buffer.from([0, 255, 0xc3, 0x28, 10, 13])]);
    await dsec.writeFile(ID, '/tmp/bin/data.bin', bytes);
    const whole = await dsec.exec(ID, ['cat', '/tmp/bin/data.bin'], { output: 'buffer' });
    expect(whole.stdout.equals(bytes)).toBe(true);
    const chunks: Buffer[] = [];
    const streamed = await dsec.exec(ID, ['cat', '/tmp/bin/data.bin'], { output: 'buffer', onStdout: (chunk) => chunks.push(chunk) });
    expect(Buffer.concat(chunks).equals(bytes)).toBe(true);
    expect(streamed.stdout.equals(bytes)).toBe(true);
  });

  it('kills a command whose caller goes away', async () => {
    const controller = new AbortController();
    const call = dsec.exec(ID, ['sh', '-c', 'echo $$ > /tmp/aborted.pid; echo started; exec sleep 1000'], {
      signal: controller.signal,
      onStdout: (chunk) => chunk.toString().includes('started') && controller.abort(),
    });
    await expect(call).rejects.toBeDefined();
    expect(await until(() => alive('/tmp/aborted.pid'), (state) => state === 'gone')).toBe('gone');

    // Not streamed: the caller hangs up on a plain exec, while other calls go on beside it.
    const hangUp = new AbortController();
    const plain = agent.client.exec(ID, { cmd: ['sh', '-c', 'echo $$ > /tmp/plain.pid; exec sleep 1000'] }, { signal: hangUp.signal });
    expect(await until(() => alive('/tmp/plain.pid'), (state) => state === 'alive')).toBe('alive');
    hangUp.abort();
    await expect(plain).rejects.toBeDefined();
    expect(await until(() => alive('/tmp/plain.pid'), (state) => state === 'gone')).toBe('gone');
  });

  it('feeds an open stdin as it comes, and runs a command on a terminal that takes input and resizes by handle', async () => {
    async function* input() {
      yield 'first line\n';
      await sleep(200);
      yield Buffer.from('second line\n');
    }
    const piped = await dsec.exec(ID, ['sh', '-c', 'cat; echo "[eof]"'], { stdin: input() });
    expect(piped.stdout).toBe('first line\nsecond line\n[eof]\n');

    const processes = new ProcessClient(agent.client);
    let handle = '';
    let seen = '';
    let resized = false;
    const terminal = await processes.execStream(ID, { cmd: ['sh', '-c', 'tty; stty size; read line; echo "got $line"; stty size'], tty: { rows: 30, cols: 100 } }, {
      onStart: (started) => (handle = started),
      onOutput: (_stream, chunk) => {
        seen += chunk.toString();
        if (!resized && seen.includes('30 100')) {
          resized = true;
          void processes.resize(ID, handle, 40, 120).then(() => processes.input(ID, handle, Buffer.from('typed\n')));
        }
      },
    });
    expect(terminal.exitCode).toBe(0);
    expect(seen).toMatch(/^\/dev\/pts\/\d+\r?\n30 100\r?\n/);
    expect(seen).toMatch(/got typed\r?\n40 120\r?\n$/);
  });

  it('carries calls at once over its one connection', async () => {
    // Each command counts the ones that started before it ended: run one at a time, the first would see only itself.
    await dsec.exec(ID, ['sh', '-c', 'rm -rf /tmp/overlap && mkdir /tmp/overlap']);
    const overlapping = await Promise.all(
      Array.from({ length: 8 }, () => dsec.exec(ID, ['sh', '-c', 'touch /tmp/overlap/$$; sleep 1; ls /tmp/overlap | wc -l'])),
    );
    expect(overlapping.every((result) => result.exitCode === 0)).toBe(true);
    expect(Math.min(...overlapping.map((result) => Number(result.stdout.trim())))).toBeGreaterThan(1);
  });

  it('moves a file larger than one part both ways, owned by the sandbox user with the folders made for it', async () => {
    const bytes = randomBytes(3 * 1024 * 1024 + 17);
    await dsec.writeFile(ID, '/tmp/parts/deep/big.bin', bytes, { mode: 0o600 });
    expect((await dsec.readFile(ID, '/tmp/parts/deep/big.bin')).equals(bytes)).toBe(true);
    const owners = await dsec.exec(ID, ['stat', '-c', '%u:%g %a', '/tmp/parts/deep/big.bin', '/tmp/parts/deep']);
    expect(owners.stdout).toBe('65534:65534 600\n65534:65534 755\n');
  });
});

describe('background commands and sessions in a microVM', () => {
  let background: ProcessHandle;
  let shell: Session;

  it('keeps a background command running past its call: its output so far, a kill, its wait, forget', async () => {
    const started = await dsec.exec(ID, ['sh', '-c', 'echo $$ > /tmp/bg.pid; echo begin; echo oops >&2; exec sleep 1000'], { background: true });
    const so = await until(() => started.output(), (snapshot) => snapshot.stdout === 'begin\n' && snapshot.stderr === 'oops\n');
    expect(so).toMatchObject({ running: true, stdout: 'begin\n', stderr: 'oops\n' });
    expect(await alive('/tmp/bg.pid')).toBe('alive');
    expect((await dsec.processes(ID)).find((entry) => entry.handle === started.handle)).toMatchObject({ running: true });
    await started.kill('SIGTERM');
    expect(await started.wait()).toMatchObject({ exitCode: null, signal: 'SIGTERM', stdout: 'begin\n', stderr: 'oops\n' });
    await started.forget();
    expect((await dsec.processes(ID)).map((entry) => entry.handle)).not.toContain(started.handle);
    await expect(started.output()).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE' });
  });

  it('keeps a session\'s cwd and variables across runs, streams a run, and survives an interrupt of sleep 1000', async () => {
    shell = await dsec.session(ID);
    await shell.run('cd /tmp && export KEPT=exported && LOCAL=shell');
    expect((await shell.run('pwd; echo $KEPT $LOCAL; id -un')).stdout).toBe('/tmp\nexported shell\nnobody\n');
    const chunks: string[] = [];
    const streamed = await shell.run('echo one; sleep 0.4; echo two', { onStdout: (chunk) => chunks.push(chunk.toString()) });
    expect(streamed.stdout).toBe('one\ntwo\n');
    expect(chunks.length).toBeGreaterThanOrEqual(2);

    const long = shell.run('sleep 1000');
    expect((await until(() => dsec.sessions(ID), (list) => list.some((entry) => entry.id === shell.id && entry.busy))).find((entry) => entry.id === shell.id)?.busy).toBe(true);
    await shell.interrupt();
    expect(await long).toMatchObject({ interrupted: true, ended: false });
    expect((await shell.run('echo $KEPT $LOCAL; pwd')).stdout).toBe('exported shell\n/tmp\n');
  });

  it('finds the background command and the session again after a pause and resume (a new qemu, a new connection)', async () => {
    background = await dsec.exec(ID, ['sh', '-c', 'echo before-pause; exec sleep 1000'], { background: true });
    await until(() => background.output(), (snapshot) => snapshot.stdout === 'before-pause\n');
    expect((await agent.client.pauseSandbox(ID)).status).toBe('paused');
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
    expect((await agent.client.resumeSandbox(ID)).status).toBe('running');
    expect(await background.output()).toMatchObject({ running: true, stdout: 'before-pause\n' });
    expect((await shell.run('echo $KEPT $LOCAL; pwd')).stdout).toBe('exported shell\n/tmp\n');
    expect((await dsec.sessions(ID)).map((entry) => entry.id)).toContain(shell.id);
  });

  it('finds them again after the node agent restarts, and ends them on request', async () => {
    await agent.kill();
    await agent.startDaemon();
    await dsec.close();
    dsec = await connect({ socket: agent.socket });
    const processes = new ProcessClient(agent.client);
    expect((await processes.list(ID)).find((entry) => entry.handle === background.handle)).toMatchObject({ running: true });
    expect((await processes.run(ID, shell.id, { command: 'echo $KEPT; pwd' })).stdout).toBe('exported\n/tmp\n');
    await processes.signal(ID, background.handle, 'SIGKILL');
    expect(await processes.wait(ID, background.handle)).toMatchObject({ signal: 'SIGKILL', stdout: 'before-pause\n' });
    await processes.forget(ID, background.handle);
    await processes.closeSession(ID, shell.id);
    expect(await processes.sessions(ID)).toEqual([]);
    expect(await processes.list(ID)).toEqual([]);
  });

  it('leaves no qemu after destroy', async () => {
    await agent.client.destroySandbox(ID);
    expect(qemuProcessesUnder(agent.tmp)).toEqual([]);
  });
});
