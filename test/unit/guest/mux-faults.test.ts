/**
 * GuestSession against guests that misbehave, played by an in-memory
 * transport (a real agent cannot be made to send these): garbage, answers
 * of the wrong shape, silence, a closed stream, an agent without async
 * mode, invalid events. Each is DSEC_GUEST_UNREACHABLE naming the sandbox,
 * fails every pending call and closes the session; answers in any order
 * and events are matched by id and handle.
 */
import { describe, expect, it } from 'vitest';
import { GuestSession, type GuestTransport } from '../../../core/guest/index.js';

type Request = { execute: string; arguments?: Record<string, any>; id?: number };

/** A guest played by `handle`: syncs and hellos done properly unless `hello` says otherwise. */
class FakeGuest implements GuestTransport {
  readonly description = 'fake';
  private data: ((chunk: Buffer) => void) | undefined;
  private closeListeners: ((reason: string) => void)[] = [];
  closed = false;
  readonly requests: Request[] = [];

  constructor(
    private readonly handle: (request: Request, guest: FakeGuest) => void,
    private readonly hello: (request: Request, guest: FakeGuest) => void = (request, guest) =>
      guest.send({ return: { version: 'dsec-guest 2.0.0', protocol: 2, pid: 1, generation: 3, killed: 0 }, id: request.id }),
  ) {}

  write(data: Buffer): void {
    for (const line of data.toString('latin1').replace(/\xff/g, '').split('\n').filter(Boolean)) {
      const request = JSON.parse(line) as Request;
      this.requests.push(request);
      queueMicrotask(() => {
        if (request.execute === 'guest-sync-delimited') this.raw(Buffer.concat([Buffer.from([0xff]), Buffer.from(`${JSON.stringify({ return: request.arguments!.id })}\n`)]));
        else if (request.execute === 'dsec-hello') this.hello(request, this);
        else this.handle(request, this);
      });
    }
  }

  send(message: unknown): void {
    this.raw(Buffer.from(`${JSON.stringify(message)}\n`));
  }

  raw(data: Buffer | string): void {
    if (!this.closed) this.data?.(Buffer.from(data));
  }

  onData(listener: (chunk: Buffer) => void): void {
    this.data = listener;
  }

  onClose(listener: (reason: string) => void): void {
    this.closeListeners.push(listener);
  }

  close(): void {
    this.hangUp('the client closed the connection');
  }

  hangUp(reason = 'the guest closed the stream'): void {
    if (this.closed) return;
    this.closed = true;
    for (const listener of this.closeListeners.splice(0)) listener(reason);
  }
}

const result = (id: number | undefined, extra: Record<string, unknown> = {}) => ({
  return: { pid: 7, exitcode: 0, 'out-data': '', 'err-data': '', 'out-truncated': false, 'err-truncated': false, 'timed-out': false, 'duration-ms': 1, ...extra },
  id,
});

const open = (guest: FakeGuest, timeoutMs = 2_000) => GuestSession.open(guest, { id: 'sbx-fake', timeoutMs });

describe('GuestSession against a misbehaving guest', () => {
  it('matches answers that come in any order by id and dispatches output events by handle', async () => {
    const held: Request[] = [];
    const guest = new FakeGuest((request, fake) => {
      held.push(request);
      if (held.length < 3) return;
      for (const each of held.reverse()) {
        fake.send({ event: 'dsec-output', data: { handle: each.arguments!.handle, stream: 'stdout', data: Buffer.from(each.arguments!.handle).toString('base64') } });
        fake.send(result(each.id, { 'out-data': Buffer.from(`out ${each.arguments!.handle}`).toString('base64') }));
      }
    });
    const session = await open(guest);
    expect(session.generation).toBe(3);
    const streamed: string[] = [];
    const answers = await Promise.all(['a', 'b', 'c'].map((handle) => session.exec({ handle, path: 'x' }, handle === 'b' ? { onOutput: (_, chunk) => streamed.push(chunk.toString()) } : {})));
    expect(answers.map((answer) => answer.stdout.toString())).toEqual(['out a', 'out b', 'out c']);
    expect(streamed).toEqual(['b']);
    expect(guest.requests.filter((request) => request.execute === 'dsec-exec').map((request) => request.arguments!.stream ?? false)).toEqual([false, true, false]);
    session.close();
  });

  it('fails every pending call and closes the session when the guest sends garbage', async () => {
    const guest = new FakeGuest((request, fake) => {
      if (request.arguments?.handle === 'second') fake.raw('this is not json\n');
    });
    const session = await open(guest);
    const reasons: string[] = [];
    session.onClose((reason) => reasons.push(reason));
    const first = session.exec({ handle: 'first', path: 'x' });
    const second = session.exec({ handle: 'second', path: 'x' });
    for (const call of [first, second]) {
      await expect(call).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE', message: expect.stringMatching(/sandbox sbx-fake .*not a guest agent answer: this is not json/) });
    }
    expect(session.closed).toBe(true);
    expect(guest.closed).toBe(true);
    expect(reasons).toHaveLength(1);
    await expect(session.processes()).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE' });
  });

  it('treats an answer of the wrong shape as garbage: the call and the session fail', async () => {
    const guest = new FakeGuest((request, fake) => {
      if (request.arguments?.handle === 'bad') fake.send(result(request.id, { pid: 'seven' }));
    });
    const session = await open(guest);
    const waiting = session.wait('other');
    await expect(session.exec({ handle: 'bad', path: 'x' })).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE', message: expect.stringContaining('pid is not an integer') });
    await expect(waiting).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE' });
    expect(session.closed).toBe(true);
  });

  it('closes the session on an invalid event, and ignores events of unknown kinds and answers to calls given up on', async () => {
    const guest = new FakeGuest((request, fake) => {
      fake.send({ event: 'dsec-future', data: { anything: true } });
      fake.send({ return: {}, id: 123456789 });
      if (request.execute === 'dsec-procs') return fake.send({ return: [], id: request.id });
      fake.send({ event: 'dsec-output', data: { handle: 'h', stream: 'sideways', data: '' } });
    });
    const session = await open(guest);
    expect(await session.processes()).toEqual([]);
    await expect(session.exec({ handle: 'h', path: 'x' })).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE', message: expect.stringContaining('stream is neither stdout nor stderr') });
    expect(session.closed).toBe(true);
  });

  it('fails pending calls with DSEC_GUEST_UNREACHABLE when the stream closes', async () => {
    const guest = new FakeGuest((_, fake) => setTimeout(() => fake.hangUp(), 10));
    const session = await open(guest);
    await expect(session.exec({ path: 'x' })).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE', message: expect.stringContaining('the guest closed the stream') });
    expect(session.closed).toBe(true);
  });

  it('gives up on a guest that never answers the sync or the hello', async () => {
    const silent = new FakeGuest(() => undefined, () => undefined);
    await expect(open(silent, 300)).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE', message: expect.stringContaining('no answer to dsec-hello') });
    expect(silent.closed).toBe(true);
    const deaf: GuestTransport = { description: 'deaf', write: () => undefined, onData: () => undefined, onClose: () => undefined, close: () => undefined };
    await expect(GuestSession.open(deaf, { id: 'sbx-deaf', timeoutMs: 300 })).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE', message: expect.stringMatching(/sbx-deaf.*guest-sync-delimited/) });
  });

  it('says an agent without async mode (dsec-guest 1, qemu-ga) does not speak protocol 2', async () => {
    const old = new FakeGuest(() => undefined, (request, fake) => fake.send({ error: { class: 'CommandNotFound', desc: 'The command dsec-hello has not been found' }, id: request.id }));
    await expect(open(old)).rejects.toMatchObject({ code: 'DSEC_GUEST_UNREACHABLE', message: expect.stringContaining('does not speak protocol 2') });
    const newer = new FakeGuest(() => undefined, (request, fake) => fake.send({ return: { version: 'x', protocol: 3, pid: 1, generation: 1, killed: 0 }, id: request.id }));
    await expect(open(newer)).rejects.toMatchObject({ message: expect.stringContaining('protocol 3, not 2') });
  });

  it('maps the guest\'s error classes: NotFound, Busy, the file classes, and the rest', async () => {
    const guest = new FakeGuest((request, fake) => {
      const classes: Record<string, [string, string]> = {
        'dsec-forget': ['NotFound', 'no process with handle gone'],
        'dsec-session-run': ['Busy', 'a run is already in flight in this session'],
        'dsec-signal': ['GenericError', "'signal' must be an integer"],
        'dsec-read-file': ['TooLarge', '/f: is 5000 bytes, more than the 10 asked for'],
        'dsec-write-file': ['Invalid', '/f: is a symbolic link (not followed)'],
      };
      const [errorClass, desc] = classes[request.execute] ?? ['NotFound', '/f: No such file or directory'];
      fake.send({ error: { class: errorClass, desc }, id: request.id });
    });
    const session = await open(guest);
    await expect(session.forget('gone')).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE', message: expect.stringContaining('gone') });
    await expect(session.runInSession('s', 'true')).rejects.toMatchObject({ code: 'DSEC_SANDBOX_BUSY' });
    await expect(session.signal('h', 99)).rejects.toMatchObject({ code: 'DSEC_GUEST_COMMAND_FAILED' });
    await expect(session.readFile('/f', 10)).rejects.toMatchObject({ code: 'DSEC_FILE_TOO_LARGE', params: expect.objectContaining({ size: 5000, limit: 10 }) });
    await expect(session.writeFile('/f', Buffer.from('x'))).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: expect.stringContaining('symbolic link') });
    await expect(session.output('h')).rejects.toMatchObject({ code: 'DSEC_GUEST_UNKNOWN_HANDLE' });
    expect(session.closed).toBe(false); // error answers are answers: the session goes on
    session.close();
  });

  it('sends a file above 1 MiB in appended chunks (what the guest holds is charged to the sandbox), and a stdin above 4 MiB in chunks one after the other', async () => {
    const guest = new FakeGuest((request, fake) => {
      if (request.execute === 'dsec-write-file') fake.send({ return: { size: Buffer.from(request.arguments!.data, 'base64').length }, id: request.id });
      else fake.send({ return: {}, id: request.id });
    });
    const session = await open(guest);
    await session.writeFile('/f', Buffer.alloc(2.5 * 1024 * 1024, 1), { mode: 0o600, uid: 5, gid: 6 });
    const writes = guest.requests.filter((request) => request.execute === 'dsec-write-file').map((request) => request.arguments!);
    expect(writes.map((args) => [Buffer.from(args.data, 'base64').length, args.append ?? false, args.mode, args.uid, args.gid])).toEqual([
      [1024 * 1024, false, 0o600, 5, 6],
      [1024 * 1024, true, 0o600, 5, 6],
      [512 * 1024, true, 0o600, 5, 6],
    ]);
    await Promise.all([session.input('p', Buffer.alloc(9 * 1024 * 1024), true), session.input('p', Buffer.from('after'))]);
    const inputs = guest.requests.filter((request) => request.execute === 'dsec-input').map((request) => [Buffer.from(request.arguments!.data ?? '', 'base64').length, request.arguments!.eof ?? false]);
    expect(inputs).toEqual([[4 * 1024 * 1024, false], [4 * 1024 * 1024, false], [1024 * 1024, true], [5, false]]);
    session.close();
  });
});
