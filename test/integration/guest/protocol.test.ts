/**
 * The wire protocol of the real dsec-guest, spoken raw on its socket: JSON
 * edge cases (escapes, surrogates, depth, garbage, over-long lines), base64
 * checks, QGA's id echo and 0xFF resync, guest-exec and the file handles as
 * a plain QGA client uses them, and connections coming and going. Whatever
 * arrives, the agent answers with an error and keeps serving.
 */
import { execFileSync } from 'node:child_process';
import { createConnection, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GuestAgentClient } from '../../../core/guest/index.js';
import { buildGuestAgent, startDsecGuest, type RunningAgent } from './fixture.js';

let agent: RunningAgent;
const sockets: Socket[] = [];

beforeAll(async () => {
  buildGuestAgent();
  agent = await startDsecGuest();
});

afterEach(() => {
  for (const socket of sockets.splice(0)) socket.destroy();
});

afterAll(async () => {
  await agent?.stop();
});

/** A raw connection: send bytes, read answer lines (0xFF kept as a leading byte). */
async function raw() {
  const socket = createConnection({ path: agent.socket });
  sockets.push(socket);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let pending = Buffer.alloc(0);
  const lines: Buffer[] = [];
  let wake: (() => void) | undefined;
  socket.on('data', (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    for (let at = pending.indexOf(10); at >= 0; at = pending.indexOf(10)) {
      lines.push(pending.subarray(0, at));
      pending = pending.subarray(at + 1);
    }
    wake?.();
  });
  const next = async (): Promise<Buffer> => {
    const deadline = Date.now() + 10_000;
    while (lines.length === 0) {
      if (Date.now() > deadline) throw new Error('no answer');
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, 50);
      });
    }
    return lines.shift()!;
  };
  return {
    send: (data: string | Buffer) => socket.write(data),
    /** Send one line, read one answer line as JSON. */
    ask: async (line: string | Buffer): Promise<any> => {
      socket.write(Buffer.concat([Buffer.from(line), Buffer.from('\n')]));
      return JSON.parse((await next()).toString('utf8'));
    },
    next,
  };
}

describe('dsec-guest protocol', () => {
  it('answers garbage, broken JSON and non-requests with an error and goes on serving', async () => {
    const conn = await raw();
    for (const bad of ['garbage', '{', '{"execute":', '[1,2', '"unterminated', '{"execute":"guest-ping"} trailing', '{"a":1,}', '01', '1e', 'nul', '\x00\x01\x02']) {
      const answer = await conn.ask(bad);
      expect(answer.error.class).toBe('GenericError');
      expect(answer.error.desc).toMatch(/^invalid JSON at byte \d+: /);
    }
    expect((await conn.ask('[]')).error.desc).toContain('"execute"');
    expect((await conn.ask('{"execute":42}')).error.desc).toContain('"execute"');
    expect((await conn.ask('{"execute":"guest-ping","arguments":[]}')).error.desc).toContain('"arguments" must be an object');
    expect(await conn.ask('{"execute":"guest-ping"}')).toEqual({ return: {} });
  });

  it('names an unknown command as QGA does (CommandNotFound) and echoes a request id of any type', async () => {
    const conn = await raw();
    expect(await conn.ask('{"execute":"guest-shutdown"}')).toEqual({ error: { class: 'CommandNotFound', desc: 'The command guest-shutdown has not been found' } });
    expect(await conn.ask('{"execute":"guest-ping","id":{"n":[1,"two",null,true]}}')).toEqual({ return: {}, id: { n: [1, 'two', null, true] } });
  });

  it('decodes string escapes, \\u escapes and surrogate pairs, and writes them back as valid JSON', async () => {
    const conn = await raw();
    const id = 'q"\\/\b\f\n\r\t é 😀 \u0001 \u007f';
    const answer = await conn.ask(`{"execute":"guest-sync","arguments":{"id":${JSON.stringify(id).replace('😀', '\\ud83d\\ude00').replace('é', '\\u00e9')}}}`);
    expect(answer).toEqual({ return: id });
    expect(await conn.ask('{"execute":"guest-sync","arguments":{"id":"a\\u0000b"}}')).toEqual({ return: 'a\u0000b' });
    for (const bad of ['"\\ud800"', '"\\udc00"', '"\\ud800\\u0041"', '"\\u12"', '"\\x41"', '"tab\there"']) {
      const answer = await conn.ask(`{"execute":"guest-sync","arguments":{"id":${bad}}}`);
      expect(answer.error?.class, bad).toBe('GenericError');
    }
  });

  it('writes invalid UTF-8 it was given back as U+FFFD, keeping its answers valid JSON', async () => {
    const conn = await raw();
    const line = Buffer.concat([Buffer.from('{"execute":"guest-sync","arguments":{"id":"a'), Buffer.from([0xc3, 0x28, 0xed, 0xa0, 0x80]), Buffer.from('b"}}')]);
    expect(await conn.ask(line)).toEqual({ return: 'a\ufffd(\ufffd\ufffd\ufffdb' });
  });

  it('keeps numbers exact up to 2^53 and refuses nesting deeper than it allows', async () => {
    const conn = await raw();
    expect(await conn.ask('{"execute":"guest-sync","arguments":{"id":9007199254740991}}')).toEqual({ return: 9007199254740991 });
    expect(await conn.ask('{"execute":"guest-sync","arguments":{"id":-1.5e3}}')).toEqual({ return: -1500 });
    expect((await conn.ask('['.repeat(100000))).error.desc).toContain('nested too deeply');
    expect((await conn.ask(`{"execute":"guest-sync","arguments":{"id":${'1'.repeat(100)}}}`)).error.desc).toContain('number too long');
  });

  it('answers guest-sync-delimited after a 0xFF, and drops a half-sent request when a 0xFF arrives', async () => {
    const conn = await raw();
    conn.send('{"execute":"guest-pi');
    conn.send(Buffer.from([0xff]));
    conn.send('{"execute":"guest-sync-delimited","arguments":{"id":77}}\n');
    const line = await conn.next();
    expect(line[0]).toBe(0xff);
    expect(JSON.parse(line.subarray(1).toString())).toEqual({ return: 77 });
  });

  it('refuses bad arguments: non-base64 data, wrong types, unknown handles, bad modes', async () => {
    const conn = await raw();
    const handle = (await conn.ask(`{"execute":"guest-file-open","arguments":{"path":"${agent.dir}/f","mode":"w"}}`)).return;
    expect(typeof handle).toBe('number');
    for (const bad of ['"!!!!"', '"a"', '"a==="', '"ab=c"', '"ab==x"', '12']) {
      const answer = await conn.ask(`{"execute":"guest-file-write","arguments":{"handle":${handle},"buf-b64":${bad}}}`);
      expect(answer.error?.desc, bad).toBe("'buf-b64' must be base64");
    }
    expect((await conn.ask(`{"execute":"guest-file-write","arguments":{"handle":${handle},"buf-b64":"aGk="}}`)).return).toEqual({ count: 2, eof: false });
    // Unpadded base64 is accepted, as glib's decoder (qemu-ga's) does.
    expect((await conn.ask(`{"execute":"guest-file-write","arguments":{"handle":${handle},"buf-b64":"aGk"}}`)).return).toEqual({ count: 2, eof: false });
    expect((await conn.ask('{"execute":"guest-file-read","arguments":{"handle":999999}}')).error.desc).toBe('no open file with that handle');
    expect((await conn.ask(`{"execute":"guest-file-open","arguments":{"path":"${agent.dir}/f","mode":"rw"}}`)).error.desc).toBe('invalid file open mode');
    expect((await conn.ask('{"execute":"dsec-exec","arguments":{"path":"true","arg":[1]}}')).error.desc).toContain("'arg' must be an array");
    expect((await conn.ask('{"execute":"dsec-exec","arguments":{"path":"true","env":["NOEQUALS"]}}')).error.desc).toContain('KEY=VALUE');
    expect((await conn.ask('{"execute":"dsec-exec","arguments":{"path":"true","timeout-ms":-1}}')).error.desc).toContain("'timeout-ms'");
    expect((await conn.ask('{"execute":"dsec-exec","arguments":{"path":"true","max-output":1e12}}')).error.desc).toContain("'max-output'");
    expect((await conn.ask('{"execute":"dsec-exec","arguments":{"path":"a\\u0000b"}}')).error.desc).toContain("'path'");
    expect((await conn.ask('{"execute":"dsec-exec","arguments":{"path":"true","input-data":"***"}}')).error.desc).toContain("'input-data'");
    expect((await conn.ask(`{"execute":"guest-file-close","arguments":{"handle":${handle}}}`)).return).toEqual({});
  });

  it('runs guest-exec and reports it through guest-exec-status once, as qemu-ga does', async () => {
    const conn = await raw();
    const { pid } = (await conn.ask('{"execute":"guest-exec","arguments":{"path":"/bin/sh","arg":["-c","cat; echo e >&2; exit 4"],"input-data":"aW4=","capture-output":true}}')).return;
    let status: any;
    for (let i = 0; i < 200; i++) {
      status = (await conn.ask(`{"execute":"guest-exec-status","arguments":{"pid":${pid}}}`)).return;
      if (status.exited) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(status).toEqual({ exited: true, exitcode: 4, 'out-data': 'aW4=', 'err-data': 'ZQo=' });
    expect((await conn.ask(`{"execute":"guest-exec-status","arguments":{"pid":${pid}}}`)).error.desc).toBe("Invalid parameter 'pid'");
    expect((await conn.ask('{"execute":"guest-exec","arguments":{"path":"/no/such"}}')).error.desc).toContain('No such file or directory');
  });

  it('seeks and reads a file in chunks with guest-file-seek and guest-file-read', async () => {
    const conn = await raw();
    await conn.ask(`{"execute":"dsec-mkdirs","arguments":{"path":"${agent.dir}/seek"}}`);
    const h = (await conn.ask(`{"execute":"guest-file-open","arguments":{"path":"${agent.dir}/seek/f","mode":"w+"}}`)).return;
    await conn.ask(`{"execute":"guest-file-write","arguments":{"handle":${h},"buf-b64":"${Buffer.from('0123456789').toString('base64')}"}}`);
    expect((await conn.ask(`{"execute":"guest-file-seek","arguments":{"handle":${h},"offset":-4,"whence":2}}`)).return).toEqual({ position: 6, eof: false });
    expect((await conn.ask(`{"execute":"guest-file-read","arguments":{"handle":${h},"count":3}}`)).return).toEqual({ count: 3, 'buf-b64': Buffer.from('678').toString('base64'), eof: false });
    expect((await conn.ask(`{"execute":"guest-file-read","arguments":{"handle":${h},"count":3}}`)).return).toEqual({ count: 1, 'buf-b64': Buffer.from('9').toString('base64'), eof: true });
    expect((await conn.ask(`{"execute":"guest-file-read","arguments":{"handle":${h},"count":99999999}}`)).error.desc).toContain("'count'");
    await conn.ask(`{"execute":"guest-file-close","arguments":{"handle":${h}}}`);
  });

  it('opens a FIFO nobody writes to without hanging, and reads it as empty', async () => {
    const conn = await raw();
    execFileSync('mkfifo', [`${agent.dir}/fifo`]);
    const handle = (await conn.ask(`{"execute":"guest-file-open","arguments":{"path":"${agent.dir}/fifo"}}`)).return;
    expect((await conn.ask(`{"execute":"guest-file-read","arguments":{"handle":${handle}}}`)).return).toEqual({ count: 0, 'buf-b64': '', eof: true });
    await conn.ask(`{"execute":"guest-file-close","arguments":{"handle":${handle}}}`);
  });

  it('drops a request line longer than 32 MiB with an error and answers the next one', async () => {
    const conn = await raw();
    const huge = Buffer.alloc(33 * 1024 * 1024, 'a');
    conn.send(huge);
    conn.send('\n{"execute":"guest-ping","id":1}\n');
    const error = JSON.parse((await conn.next()).toString());
    expect(error.error.desc).toContain('longer than the agent accepts');
    expect(JSON.parse((await conn.next()).toString())).toEqual({ return: {}, id: 1 });
  });

  it('survives thousands of random and mutated requests, answering each line', async () => {
    const conn = await raw();
    const valid = [
      '{"execute":"guest-sync","arguments":{"id":"x\\u00e9\\ud83d\\ude00"}}',
      '{"execute":"dsec-stat","arguments":{"path":"/etc/passwd"}}',
      '{"execute":"guest-file-read","arguments":{"handle":1000,"count":10}}',
      '{"execute":"guest-exec-status","arguments":{"pid":1}}',
      `{"execute":"dsec-mkdirs","arguments":{"path":"${agent.dir}/fuzz/x","mode":493}}`,
      '{"execute":"guest-file-seek","arguments":{"handle":1,"offset":-1e300,"whence":"end"}}',
    ];
    let seed = 12345;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let i = 0; i < 3000; i++) {
      let line: Buffer;
      if (i % 3 === 0) {
        line = Buffer.from(Array.from({ length: 1 + random(200) }, () => random(256)));
      } else {
        line = Buffer.from(valid[random(valid.length)]!);
        for (let flips = 1 + random(4); flips > 0; flips--) line[random(line.length)] = random(256);
        if (random(2) === 0) line = line.subarray(0, random(line.length));
      }
      line = Buffer.from(line.filter((byte) => byte !== 0x0a && byte !== 0xff));
      if (line.toString('latin1').trim() === '') continue;
      conn.send(Buffer.concat([line, Buffer.from('\n')]));
      const answer = JSON.parse((await conn.next()).toString('utf8'));
      expect('return' in answer || 'error' in answer, line.toString('latin1')).toBe(true);
    }
    expect(await conn.ask('{"execute":"guest-ping"}')).toEqual({ return: {} });
    expect(agent.process.exitCode).toBeNull();
  });

  it('serves the next connection after a client hangs up mid-request and after one that only sent garbage', async () => {
    const first = await raw();
    first.send('{"execute":"dsec-exec","arguments":{"path":"/bin/sleep","arg":["0.2"]}}\n{"execute":"guest-pi');
    sockets[0]!.destroy();
    const second = await raw();
    second.send(Buffer.from([0x00, 0xff, 0xfe, 0x80]));
    sockets[1]!.destroy();
    const client = await GuestAgentClient.connect(agent.socket, { id: 'sbx-proto', timeoutMs: 10_000 });
    try {
      expect((await client.exec({ path: 'echo', args: ['ok'] })).stdout.toString()).toBe('ok\n');
    } finally {
      client.close();
    }
    expect(agent.process.exitCode).toBeNull();
  });
});
