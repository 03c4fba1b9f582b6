/**
 * dsec-guest's async mode on the wire: the FIFO pair (--fds) spoken raw and
 * through GuestSession, the rules of async mode (ids, answers in any order,
 * events), a host reconnecting (a new hello kills the old host's foreground
 * processes, background processes and sessions stay), the socket
 * transport, back-pressure from a host that stops reading, random and
 * mutated requests, and the round trip of an exec of `true`.
 */
import { constants, existsSync, openSync, readFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GuestAgentClient, GuestSession, openFifoTransport, openSocketTransport } from '../../../core/guest/index.js';
import { alive, buildGuestAgent, descendants, startDsecGuest, startDsecGuestFifos, type FifoAgent, type RunningAgent } from './fixture.js';

const agents: (FifoAgent | RunningAgent)[] = [];
const closers: (() => void)[] = [];

beforeAll(() => {
  buildGuestAgent();
});

afterEach(async () => {
  for (const close of closers.splice(0)) close();
  for (const agent of agents.splice(0)) await agent.stop();
});

async function fifoAgent(): Promise<FifoAgent> {
  const agent = await startDsecGuestFifos();
  agents.push(agent);
  return agent;
}

async function open(agent: FifoAgent, id = 'sbx-transport'): Promise<GuestSession> {
  const session = await GuestSession.open(await openFifoTransport(agent.inPath, agent.outPath), { id, timeoutMs: 10_000 });
  closers.push(() => session.close());
  return session;
}

/** The FIFOs spoken raw: lines out, JSON lines in (a leading 0xFF dropped), and a reader that can stop reading. */
function raw(agent: FifoAgent) {
  const reader = new Socket({ fd: openSync(agent.outPath, constants.O_RDONLY | constants.O_NONBLOCK), readable: true, writable: false });
  const writer = new Socket({ fd: openSync(agent.inPath, constants.O_WRONLY | constants.O_NONBLOCK), readable: false, writable: true });
  closers.push(() => {
    reader.destroy();
    writer.destroy();
  });
  let pending = Buffer.alloc(0);
  const lines: Buffer[] = [];
  /** After a sync, skip to the 0xFF before its answer (the agent may cut a line it was sending). */
  let skipping = false;
  reader.on('data', (chunk: Buffer) => {
    if (skipping) {
      const at = chunk.indexOf(0xff);
      if (at < 0) return;
      skipping = false;
      pending = Buffer.alloc(0);
      chunk = chunk.subarray(at + 1);
    }
    pending = Buffer.concat([pending, chunk]);
    for (let at = pending.indexOf(10); at >= 0; at = pending.indexOf(10)) {
      lines.push(pending.subarray(0, at));
      pending = pending.subarray(at + 1);
    }
  });
  const next = async (timeoutMs = 10_000): Promise<any> => {
    const deadline = Date.now() + timeoutMs;
    while (lines.length === 0) {
      if (Date.now() > deadline) throw new Error('no line from the agent');
      await sleep(5);
    }
    return JSON.parse(lines.shift()!.toString('utf8'));
  };
  return {
    reader,
    send: (line: string | Buffer) => writer.write(Buffer.concat([Buffer.from(line), Buffer.from('\n')])),
    request: (execute: string, args?: object, id?: unknown) => writer.write(`${JSON.stringify({ execute, ...(args ? { arguments: args } : {}), ...(id !== undefined ? { id } : {}) })}\n`),
    next,
    /** The next line that answers `id` (events and other answers skipped). */
    answer: async (id: unknown): Promise<any> => {
      for (;;) {
        const line = await next();
        if (JSON.stringify(line.id) === JSON.stringify(id)) return line;
      }
    },
    close: () => {
      reader.destroy();
      writer.destroy();
    },
    sync: async (id: number) => {
      skipping = true;
      lines.length = 0;
      writer.write(Buffer.concat([Buffer.from([0xff]), Buffer.from(`${JSON.stringify({ execute: 'guest-sync-delimited', arguments: { id } })}\n`)]));
      for (;;) if ((await next()).return === id) return;
    },
  };
}

describe('dsec-guest async mode on the wire', () => {
  it('enters async mode at dsec-hello: ids required, answers in any order, events without ids, sync commands still answered', async () => {
    const agent = await fifoAgent();
    const conn = raw(agent);
    await conn.sync(11);
    conn.request('dsec-procs', undefined, 1);
    expect((await conn.answer(1)).error.desc).toContain('send dsec-hello first');
    conn.request('dsec-hello', { client: 'raw' }, 2);
    expect((await conn.answer(2)).return).toEqual({ version: 'dsec-guest 2.0.0', protocol: 2, pid: agent.agentPid, generation: 1, killed: 0 });
    const marker = join(agent.dir, 'not-run');
    conn.request('dsec-exec', { handle: 'x', path: 'touch', arg: [marker] });
    expect(await conn.next()).toEqual({ error: { class: 'GenericError', desc: 'in async mode every request needs an "id"; not run' } });
    conn.request('dsec-exec', { handle: 'slow', path: 'sleep', arg: ['0.3'] }, 'slow');
    conn.request('dsec-exec', { handle: 'bg', path: 'sh', arg: ['-c', 'echo hi'], background: true, stream: true }, { any: ['id'] });
    conn.request('guest-ping', undefined, 3.5);
    const seen: any[] = [];
    while (seen[seen.length - 1]?.id !== 'slow') seen.push(await conn.next());
    const answers = seen.filter((line) => 'id' in line);
    expect(answers.map((line) => line.id)).toEqual([{ any: ['id'] }, 3.5, 'slow']); // the slow exec last, the ping before it
    expect(answers[0]).toEqual({ return: { handle: 'bg', pid: expect.any(Number) }, id: { any: ['id'] } });
    const events = seen.filter((line) => 'event' in line);
    expect(events).toContainEqual({ event: 'dsec-output', data: { handle: 'bg', stream: 'stdout', data: Buffer.from('hi\n').toString('base64') } });
    expect(events).toContainEqual({ event: 'dsec-exit', data: expect.objectContaining({ handle: 'bg', exitcode: 0 }) });
    expect(events.every((event) => !('id' in event))).toBe(true);
    conn.request('guest-info', undefined, 4);
    const info = (await conn.answer(4)).return;
    expect(info.version).toBe('dsec-guest 2.0.0');
    expect(info.supported_commands.map((command: { name: string }) => command.name)).toEqual(expect.arrayContaining([
      'dsec-hello', 'dsec-exec', 'dsec-input', 'dsec-signal', 'dsec-resize', 'dsec-wait', 'dsec-output', 'dsec-procs', 'dsec-forget',
      'dsec-session-open', 'dsec-session-run', 'dsec-session-interrupt', 'dsec-session-close', 'dsec-sessions', 'dsec-read-file', 'dsec-write-file', 'dsec-reset',
    ]));
    expect(existsSync(marker)).toBe(false);
    // A sync is a host (re)connecting: in sync mode again until its own hello.
    await conn.sync(12);
    conn.request('dsec-procs', undefined, 5);
    expect((await conn.answer(5)).error.desc).toContain('send dsec-hello first');
    conn.request('dsec-hello', { client: 'raw' }, 6);
    expect((await conn.answer(6)).return.generation).toBe(2);
  });

  it('after a reconnect kills the old host\'s foreground processes (counted) and keeps its background processes and sessions', async () => {
    const agent = await fifoAgent();
    const first = await open(agent, 'sbx-first');
    const background = await first.spawn({ handle: 'kept', path: 'sleep', args: ['30'] });
    const shell = await first.openSession({ handle: 'kept-shell' });
    await first.runInSession(shell.handle, 'cd /tmp; KEPT=1');
    const pidFile = join(agent.dir, 'fg.pid');
    const foreground = first.exec({ path: '/bin/sh', args: ['-c', `echo $$ > ${pidFile}; exec sleep 30`] });
    const other = first.exec({ path: 'sleep', args: ['30'] });
    const run = first.runInSession(shell.handle, 'sleep 30');
    for (let i = 0; i < 500 && !existsSync(pidFile); i++) await sleep(10);
    const foregroundPid = Number(readFileSync(pidFile, 'utf8'));
    first.close();
    await expect(foreground).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE', message: expect.stringContaining('sbx-first') });
    await expect(other).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE' });
    await expect(run).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE' });
    expect(alive(foregroundPid)).toBe(true); // closing the host side alone changes nothing in the guest

    const second = await open(agent, 'sbx-second');
    expect(second.killed).toBe(2);
    expect(second.generation).toBe(first.generation + 1);
    for (let i = 0; i < 200 && alive(foregroundPid); i++) await sleep(10);
    expect(alive(foregroundPid)).toBe(false);
    expect(await second.processes()).toContainEqual(expect.objectContaining({ handle: 'kept', pid: background.pid, running: true }));
    for (let i = 0; i < 200 && (await second.sessions()).some((entry) => entry.busy); i++) await sleep(10); // the old run, interrupted
    expect((await second.runInSession(shell.handle, 'echo $KEPT; pwd')).stdout.toString()).toBe('1\n/tmp\n');
    await second.forget('kept');
    await second.closeSession(shell.handle);
  });

  it('serves GuestSession on a unix socket too, and a plain sync client on the next connection', async () => {
    const agent = await startDsecGuest();
    agents.push(agent);
    const session = await GuestSession.open(await openSocketTransport(agent.socket, 5_000), { id: 'sbx-socket' });
    closers.push(() => session.close());
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => session.exec({ path: 'echo', args: [String(i)] })));
    expect(results.map((result) => result.stdout.toString())).toEqual(Array.from({ length: 50 }, (_, i) => `${i}\n`));
    const kept = await session.spawn({ path: 'sleep', args: ['30'] });
    session.close();
    const client = await GuestAgentClient.connect(agent.socket, { id: 'sbx-socket-sync', timeoutMs: 5_000 });
    closers.push(() => client.close());
    expect((await client.exec({ path: 'echo', args: ['sync'] })).stdout.toString()).toBe('sync\n');
    client.close();
    const again = await GuestSession.open(await openSocketTransport(agent.socket, 5_000), { id: 'sbx-socket-2' });
    closers.push(() => again.close());
    expect(await again.processes()).toContainEqual(expect.objectContaining({ handle: kept.handle, running: true }));
    await again.forget(kept.handle);
  });

  it('stalls output instead of growing when the host stops reading, and drops what it queued at the next sync', async () => {
    const agent = await fifoAgent();
    const conn = raw(agent);
    await conn.sync(1);
    conn.request('dsec-hello', { client: 'slow reader' }, 'hello');
    await conn.answer('hello');
    conn.reader.pause();
    const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${agent.agentPid}/status`, 'utf8'))?.[1]);
    const before = rss();
    conn.request('dsec-exec', { handle: 'flood', path: 'yes', arg: ['x'.repeat(1000)], background: true, stream: true, 'max-output': 32 * 1024 * 1024 }, 'flood');
    await sleep(1_500);
    // KiB: the queue stops at its high-water mark (4 MiB) plus a chunk. (A sanitizer build's RSS also holds
    // its quarantine of freed blocks, every sent line among them: only the stall below means anything there.)
    if (!process.env.DSEC_TEST_GUEST_AGENT) expect(rss() - before).toBeLessThan(16 * 1024);
    // And yes is stalled on its full pipe: it writes nothing more while the host does not read.
    const yes = descendants(agent.agentPid).find((pid) => readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'yes')!;
    const written = () => Number(/wchar:\s+(\d+)/.exec(readFileSync(`/proc/${yes}/io`, 'utf8'))?.[1]);
    const stalledAt = written();
    await sleep(300);
    expect(written()).toBe(stalledAt);
    conn.reader.resume();
    const syncStarted = Date.now();
    await conn.sync(2); // everything queued before is dropped: the sync's answer comes at once
    expect(Date.now() - syncStarted).toBeLessThan(2_000);
    conn.request('dsec-hello', { client: 'again' }, 'again'); // (its stream flag is cleared: no more events)
    await conn.answer('again');
    conn.request('dsec-output', { handle: 'flood' }, 'output');
    const output = (await conn.answer('output')).return;
    expect(output.running).toBe(true);
    conn.request('dsec-forget', { handle: 'flood' }, 'forget');
    expect((await conn.answer('forget')).return).toEqual({});
  });

  it('survives 1000 random and mutated requests in async mode and serves a new session after them', async () => {
    const agent = await fifoAgent();
    const conn = raw(agent);
    await conn.sync(1);
    conn.request('dsec-hello', { client: 'fuzz' }, 0);
    await conn.answer(0);
    const valid = [
      '{"execute":"guest-ping","id":1}',
      '{"execute":"dsec-exec","arguments":{"handle":"f1","path":"true"},"id":2}',
      '{"execute":"dsec-exec","arguments":{"handle":"f2","path":"echo","arg":["a"],"stream":true,"tty":{"rows":5,"cols":9}},"id":3}',
      '{"execute":"dsec-exec","arguments":{"handle":"f3","path":"echo","background":true,"max-output":10,"stdin":"pipe"},"id":4}',
      '{"execute":"dsec-output","arguments":{"handle":"f3"},"id":5}',
      '{"execute":"dsec-wait","arguments":{"handle":"f3","timeout-ms":10},"id":6}',
      '{"execute":"dsec-signal","arguments":{"handle":"f3","signal":15,"group":false},"id":7}',
      '{"execute":"dsec-input","arguments":{"handle":"f3","data":"aGk=","eof":true},"id":8}',
      '{"execute":"dsec-resize","arguments":{"handle":"f3","rows":1,"cols":2},"id":9}',
      '{"execute":"dsec-forget","arguments":{"handle":"f3"},"id":10}',
      '{"execute":"dsec-procs","id":11}',
      '{"execute":"dsec-session-open","arguments":{"handle":"s1","env":["A=1"]},"id":12}',
      '{"execute":"dsec-session-run","arguments":{"handle":"s1","command":"echo hi","timeout-ms":1000},"id":13}',
      '{"execute":"dsec-session-close","arguments":{"handle":"s1"},"id":14}',
      '{"execute":"dsec-sessions","id":15}',
      '{"execute":"dsec-read-file","arguments":{"path":"/etc/hostname","max-bytes":100},"id":16}',
      '{"execute":"dsec-exec","arguments":{"handle":"f4","path":"true","uid":1000,"gid":1000,"groups":[1,2]},"id":17}',
    ];
    let seed = 424242;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let i = 0; i < 1000; i++) {
      let line: Buffer;
      if (i % 3 === 0) {
        line = Buffer.from(Array.from({ length: 1 + random(200) }, () => random(256)));
      } else {
        line = Buffer.from(valid[random(valid.length)]!);
        for (let flips = 1 + random(4); flips > 0; flips--) line[random(line.length)] = random(256);
        if (random(3) === 0) line = line.subarray(0, random(line.length));
      }
      line = Buffer.from(line.filter((byte) => byte !== 0x0a && byte !== 0xff));
      if (line.toString('latin1').trim() === '') continue;
      conn.send(line);
      if (i % 50 === 0) await sleep(5);
    }
    conn.request('guest-ping', undefined, 'last');
    for (;;) {
      const line = await conn.next(30_000);
      expect('return' in line || 'error' in line || ('event' in line && 'data' in line)).toBe(true);
      if (line.id === 'last') break;
    }
    expect(agent.process.exitCode).toBeNull();
    conn.close(); // the next host reads OUT alone
    const session = await open(agent, 'sbx-after-fuzz');
    expect((await session.exec({ path: 'echo', args: ['fine'] })).stdout.toString()).toBe('fine\n');
  });

  it('measures the round trip of exec true, one at a time and with 64 in flight', async () => {
    const agent = await fifoAgent();
    const session = await open(agent, 'sbx-rtt');
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    for (let i = 0; i < 50; i++) await session.exec({ path: 'true' }); // warm up
    const sequential: number[] = [];
    for (let i = 0; i < 300; i++) {
      const started = performance.now();
      await session.exec({ path: 'true' });
      sequential.push(performance.now() - started);
    }
    const concurrent: number[] = [];
    const total = 1280;
    let issued = 0;
    const started = performance.now();
    await Promise.all(Array.from({ length: 64 }, async () => {
      while (issued < total) {
        issued++;
        const at = performance.now();
        await session.exec({ path: 'true' });
        concurrent.push(performance.now() - at);
      }
    }));
    const seconds = (performance.now() - started) / 1000;
    console.log(`guest round trip (exec true over the FIFO pair): median ${median(sequential).toFixed(2)} ms one at a time; median ${median(concurrent).toFixed(2)} ms with 64 in flight, ${(total / seconds).toFixed(0)} execs/s`);
    expect(median(sequential)).toBeLessThan(50); // the target is well under 2 ms; this only catches a stall on a loaded machine
  });
});
