/**
 * GuestAgentClient against guests that misbehave, played by a socket server
 * in the test (a real agent cannot be made to send these): garbage, wrong
 * shapes, silence, hang-ups, late answers and endless lines. Each is a
 * DsecError (DSEC_GUEST_UNREACHABLE naming the sandbox), never a crash, and
 * the client stays usable where the stream can be trusted again.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { GuestAgentClient } from '../../../core/guest/index.js';

const DSEC_COMMANDS = ['guest-exec', 'guest-file-open', 'dsec-exec', 'dsec-reset', 'dsec-stat', 'dsec-mkdirs', 'dsec-chmod'];

type Handler = (request: { execute: string; arguments?: Record<string, unknown> }, socket: Socket) => void;

const servers: Server[] = [];
const clients: GuestAgentClient[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function socketPath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'dsec-guest-fake-'));
  dirs.push(dir);
  return join(dir, 'fake.sock');
}

/** A fake agent: syncs and guest-info done properly, everything else by `handle`. */
async function fakeAgent(handle: Handler, path = socketPath(), commands = DSEC_COMMANDS): Promise<string> {
  const server = createServer((socket) => {
    let pending = '';
    socket.on('error', () => {});
    socket.on('data', (chunk: Buffer) => {
      pending += chunk.toString('latin1').replace(/\xff/g, '');
      for (let at = pending.indexOf('\n'); at >= 0; at = pending.indexOf('\n')) {
        const request = JSON.parse(pending.slice(0, at));
        pending = pending.slice(at + 1);
        if (request.execute === 'guest-sync-delimited') socket.write(Buffer.concat([Buffer.from([0xff]), Buffer.from(`${JSON.stringify({ return: request.arguments.id })}\n`)]));
        else if (request.execute === 'guest-info') socket.write(`${JSON.stringify({ return: { version: 'fake', supported_commands: commands.map((name) => ({ name, enabled: true })) } })}\n`);
        else handle(request, socket);
      }
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return path;
}

async function connect(path: string, timeoutMs = 5_000): Promise<GuestAgentClient> {
  const client = await GuestAgentClient.connect(path, { id: 'sbx-fake', timeoutMs });
  clients.push(client);
  return client;
}

const unreachable = (message: RegExp | string) => ({
  code: 'DSEC_GUEST_UNREACHABLE',
  message: typeof message === 'string' ? expect.stringContaining(message) : expect.stringMatching(message),
});

describe('GuestAgentClient with a misbehaving guest', () => {
  it('turns an answer that is not JSON into DSEC_GUEST_UNREACHABLE, then resyncs and goes on', async () => {
    let calls = 0;
    const path = await fakeAgent((request, socket) => {
      calls++;
      socket.write(calls === 1 ? 'this is not json\n' : `${JSON.stringify({ return: {} })}\n`);
    });
    const client = await connect(path);
    await expect(client.ping()).rejects.toMatchObject(unreachable(/^the guest agent of sandbox sbx-fake does not answer: answered guest-ping with something that is not a guest agent answer: this is not json$/));
    await client.ping();
  });

  it('names the field when an exec answer has the wrong shape', async () => {
    const answers = [
      { return: { exitcode: 'zero', 'out-data': '', 'err-data': '' } },
      { return: { exitcode: 0, 'out-data': 'not base64!', 'err-data': '' } },
      { return: [] },
      { error: 'not an object' },
    ];
    const path = await fakeAgent((request, socket) => socket.write(`${JSON.stringify(answers.shift())}\n`));
    const client = await connect(path);
    await expect(client.exec({ path: 'true' })).rejects.toMatchObject(unreachable('its answer to dsec-exec is not valid: exitcode is not an integer'));
    await expect(client.exec({ path: 'true' })).rejects.toMatchObject(unreachable('out-data is not base64'));
    await expect(client.exec({ path: 'true' })).rejects.toMatchObject(unreachable('the answer is not an object'));
    await expect(client.exec({ path: 'true' })).rejects.toMatchObject(unreachable('not a guest agent answer'));
  });

  it('keeps no more output than asked for even when the guest sends more', async () => {
    const path = await fakeAgent((request, socket) =>
      socket.write(`${JSON.stringify({ return: { exitcode: 0, 'out-data': Buffer.alloc(100).toString('base64'), 'err-data': '', 'timed-out': false, 'duration-ms': 1 } })}\n`),
    );
    const client = await connect(path);
    const result = await client.exec({ path: 'true', maxOutputBytes: 10 });
    expect(result.stdout.length).toBe(10);
    expect(result.truncated).toBe(true);
  });

  it('times out a request the guest never answers, and drops its late answer instead of taking it for the next', async () => {
    let calls = 0;
    const path = await fakeAgent((request, socket) => {
      calls++;
      const answer = `${JSON.stringify({ return: { n: calls } })}\n`;
      if (calls === 1) setTimeout(() => socket.write(answer), 300); // late
      else socket.write(answer);
    });
    const client = await connect(path);
    const started = Date.now();
    await expect(client.ping(100)).rejects.toMatchObject(unreachable('no answer to guest-ping within 100 ms'));
    expect(Date.now() - started).toBeLessThan(1_000);
    await new Promise((resolve) => setTimeout(resolve, 400)); // the late answer arrives, unasked for
    const reset = await client.reset([]).catch((error: unknown) => error);
    // The answer to the second request is {n: 2}: not {n: 1}, which came late for the first.
    expect(reset).toMatchObject(unreachable('killed is not an integer'));
    expect(calls).toBe(2);
  });

  it('fails a request in flight and every later one when the guest hangs up, and reports the close', async () => {
    const path = await fakeAgent((request, socket) => socket.destroy());
    const client = await connect(path);
    const closed = new Promise<string>((resolve) => client.onClose(resolve));
    await expect(client.exec({ path: 'true' })).rejects.toMatchObject(unreachable('the connection was closed'));
    expect(await closed).toBe('the connection was closed');
    expect(client.closed).toBe(true);
    await expect(client.ping()).rejects.toMatchObject(unreachable('the connection was closed'));
  });

  it('closes the connection on an answer line longer than the cap instead of buffering for ever', async () => {
    const path = await fakeAgent((request, socket) => {
      const chunk = Buffer.alloc(8 * 1024 * 1024, 'a');
      for (let i = 0; i < 17; i++) socket.write(chunk);
    });
    const client = await connect(path);
    await expect(client.ping(20_000)).rejects.toMatchObject(unreachable(/sent a line longer than \d+ bytes/));
    expect(client.closed).toBe(true);
  });

  it('retries the connect until the socket appears, and gives up at the timeout naming the path', async () => {
    const path = socketPath();
    const connecting = connect(path, 5_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    await fakeAgent(() => {}, path);
    const client = await connecting;
    expect((await client.info()).dsec).toBe(true);

    const missing = join(tmpdir(), 'dsec-no-such-dir', 'agent.sock');
    const started = Date.now();
    await expect(GuestAgentClient.connect(missing, { id: 'sbx-gone', timeoutMs: 300 })).rejects.toMatchObject({
      code: 'DSEC_GUEST_UNREACHABLE',
      message: expect.stringMatching(new RegExp(`^the guest agent of sandbox sbx-gone does not answer: could not connect to ${missing} within 300 ms: .*ENOENT`)),
    });
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('gives up connecting to a socket whose agent never answers the sync', async () => {
    const path = socketPath();
    const server = createServer((socket) => socket.on('error', () => {}).resume()); // reads and drops everything
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(path, resolve));
    const started = Date.now();
    await expect(GuestAgentClient.connect(path, { id: 'sbx-mute', timeoutMs: 700 })).rejects.toMatchObject(unreachable('no answer to guest-sync-delimited'));
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('sends dsec-exec the default timeout for a missing or non-positive one, and output limits within 0..32 MiB', async () => {
    const seen: Record<string, unknown>[] = [];
    const path = await fakeAgent((request, socket) => {
      seen.push(request.arguments ?? {});
      socket.write(`${JSON.stringify({ return: { exitcode: 0, 'out-data': '', 'err-data': '', 'duration-ms': 0 } })}\n`);
    });
    const client = await connect(path);
    await client.exec({ path: 'true' });
    await client.exec({ path: 'true', timeoutMs: 0, maxOutputBytes: -5 });
    await client.exec({ path: 'true', timeoutMs: 1.5, maxOutputBytes: 1e12, env: { A: '1' }, args: ['x'], stdin: '' });
    expect(seen.map((args) => [args['timeout-ms'], args['max-output']])).toEqual([[60_000, 1024 * 1024], [60_000, 0], [2, 32 * 1024 * 1024]]);
    expect(seen[2]).toEqual({ path: 'true', arg: ['x'], env: ['A=1'], 'timeout-ms': 2, 'max-output': 32 * 1024 * 1024 });
  });

  it('treats an agent without the dsec commands as a plain QEMU guest agent', async () => {
    const path = await fakeAgent(() => {}, socketPath(), ['guest-exec', 'dsec-exec']);
    const client = await connect(path);
    expect(await client.info()).toEqual({ version: 'fake', commands: ['guest-exec', 'dsec-exec'], dsec: false });
  });
});
