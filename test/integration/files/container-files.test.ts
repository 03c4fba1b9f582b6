/**
 * readFile and writeFile through a real agent with the container backend:
 * content (binary too) round-trips, parents are created for the sandbox's
 * user, nothing planted inside the sandbox leads a call out of its root,
 * the limits and the missing file are clear errors, a paused sandbox is
 * woken by a file call, and a backend without file taps says so by name.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DsecError } from '../../../core/errors.js';
import { MAX_FILE_BYTES } from '../../../core/live.js';
import { REPO, TestAgent } from '../../helpers/agent-fixture.js';

let agent: TestAgent;

const caught = async (work: Promise<unknown>): Promise<DsecError> => {
  try {
    await work;
  } catch (error) {
    return error as DsecError;
  }
  throw new Error('expected the call to fail');
};

const b64 = (text: string | Buffer) => Buffer.from(text).toString('base64');

beforeAll(async () => {
  agent = await TestAgent.start({ plugins: [{ name: path.join(REPO, 'test/helpers/inert-backend-plugin.mjs'), options: {} }] });
  await agent.client.createSandbox(agent.spec('files-a'));
});

afterAll(async () => {
  await agent?.dispose();
});

describe('container file calls', () => {
  it('writes a file (parents created) that a process inside reads, and reads back what a process wrote', async () => {
    await agent.client.writeFile('files-a', { path: '/work/deep/dir/note.txt', data: b64('hello from outside\n'), mode: 0o640 });
    const seen = await agent.client.exec('files-a', { cmd: ['sh', '-c', 'cat /work/deep/dir/note.txt; stat -c %a /work/deep/dir/note.txt'] });
    expect(seen.stdout).toBe('hello from outside\n640\n');
    await agent.client.exec('files-a', { cmd: ['sh', '-c', 'echo written inside > /tmp/inside.txt'] });
    const read = await agent.client.readFile('files-a', { path: '/tmp/inside.txt' });
    expect(Buffer.from(read.data, 'base64').toString()).toBe('written inside\n');
    expect(read.size).toBe(15);
    expect(read.path).toBe('/tmp/inside.txt');
  });

  it('round-trips binary content byte for byte, and replaces an existing file', async () => {
    const bytes = Buffer.concat([randomBytes(300_000), Buffer.from([0, 255, 0, 10, 13])]);
    await agent.client.writeFile('files-a', { path: '/bin.dat', data: b64('old content, longer than the new one? no') });
    await agent.client.writeFile('files-a', { path: '/bin.dat', data: bytes.toString('base64') });
    const read = await agent.client.readFile('files-a', { path: '/bin.dat' });
    expect(Buffer.from(read.data, 'base64').equals(bytes)).toBe(true);
    const sum = await agent.client.exec('files-a', { cmd: ['sh', '-c', 'wc -c < /bin.dat'] });
    expect(sum.stdout.trim()).toBe(String(bytes.length));
    // An empty file is a file too.
    await agent.client.writeFile('files-a', { path: '/empty', data: '' });
    expect((await agent.client.readFile('files-a', { path: '/empty' })).size).toBe(0);
  });

  it('carries a file of exactly the 32 MiB ceiling both ways, and refuses a few bytes more with DSEC_FILE_TOO_LARGE', async () => {
    const bytes = randomBytes(MAX_FILE_BYTES);
    await agent.client.writeFile('files-a', { path: '/tmp/max.bin', data: bytes.toString('base64') });
    const read = await agent.client.readFile('files-a', { path: '/tmp/max.bin', maxBytes: MAX_FILE_BYTES });
    expect(read.size).toBe(MAX_FILE_BYTES);
    expect(Buffer.from(read.data, 'base64').equals(bytes)).toBe(true);
    const over = await caught(agent.client.writeFile('files-a', { path: '/tmp/over.bin', data: Buffer.alloc(MAX_FILE_BYTES + 3).toString('base64') }));
    expect(over.code).toBe('DSEC_FILE_TOO_LARGE');
    await agent.client.exec('files-a', { cmd: ['rm', '/tmp/max.bin'] });
  }, 60_000);

  it('reads a file on a mount inside the sandbox (/dev/shm), as its processes see it', async () => {
    await agent.client.exec('files-a', { cmd: ['sh', '-c', 'echo on tmpfs > /dev/shm/t'] });
    const read = await agent.client.readFile('files-a', { path: '/dev/shm/t' });
    expect(Buffer.from(read.data, 'base64').toString()).toBe('on tmpfs\n');
  });

  it('never follows a symlink planted inside out of the sandbox: /etc/shadow and ../../.. resolve inside it', async () => {
    await agent.client.exec('files-a', {
      cmd: ['sh', '-c', 'mkdir -p /etc && echo sandbox-shadow > /etc/shadow && ln -s /etc/shadow /evil && ln -s ../../../../../../etc/hostname /up && ln -s / /rootlink'],
    });
    const viaAbsolute = await agent.client.readFile('files-a', { path: '/evil' });
    expect(Buffer.from(viaAbsolute.data, 'base64').toString()).toBe('sandbox-shadow\n');
    // The sandbox has no /etc/hostname of the host's: the climb stops at its root.
    const hostName = readFileSync('/etc/hostname', 'utf8');
    const up = await agent.client.readFile('files-a', { path: '/up' }).then(
      (content) => Buffer.from(content.data, 'base64').toString(),
      (error: DsecError) => error.code,
    );
    expect(up).not.toBe(hostName);
    expect(['DSEC_FILE_NOT_FOUND']).toContain(up);
    const through = await agent.client.readFile('files-a', { path: '/rootlink/etc/shadow' });
    expect(Buffer.from(through.data, 'base64').toString()).toBe('sandbox-shadow\n');
    // A write never goes through a symlink as its last component, and one inside a linked folder stays inside.
    const refused = await caught(agent.client.writeFile('files-a', { path: '/evil', data: b64('x') }));
    expect(refused.code).toBe('DSEC_FILE_INVALID');
    expect(refused.message).toContain('/evil');
    await agent.client.writeFile('files-a', { path: '/rootlink/tmp/through-link', data: b64('inside') });
    expect((await agent.client.exec('files-a', { cmd: ['cat', '/tmp/through-link'] })).stdout).toBe('inside');
    expect(readFileSync('/etc/shadow', 'utf8')).not.toContain('sandbox-shadow');
  });

  it('refuses a file bigger than maxBytes, a missing file, a directory, a FIFO and a relative path, each with its code', async () => {
    await agent.client.writeFile('files-a', { path: '/big', data: b64('x'.repeat(1000)) });
    const large = await caught(agent.client.readFile('files-a', { path: '/big', maxBytes: 999 }));
    expect(large.code).toBe('DSEC_FILE_TOO_LARGE');
    expect(large.message).toBe('file /big in sandbox files-a is 1000 bytes, more than the 999 asked for');
    expect((await agent.client.readFile('files-a', { path: '/big', maxBytes: 1000 })).size).toBe(1000);

    const missing = await caught(agent.client.readFile('files-a', { path: '/no/such/file' }));
    expect(missing.code).toBe('DSEC_FILE_NOT_FOUND');
    expect(missing.message).toBe('sandbox files-a has no file /no/such/file');

    const folder = await caught(agent.client.readFile('files-a', { path: '/tmp' }));
    expect(folder.code).toBe('DSEC_FILE_INVALID');
    expect(folder.message).toContain('is a directory');

    await agent.client.exec('files-a', { cmd: ['mkfifo', '/tmp/fifo'] });
    const fifo = await caught(agent.client.readFile('files-a', { path: '/tmp/fifo' }));
    expect(fifo.code).toBe('DSEC_FILE_INVALID');
    expect(fifo.message).toContain('not a regular file');

    const relative = await caught(agent.client.readFile('files-a', { path: 'etc/passwd' }));
    expect(relative.code).toBe('DSEC_FILE_INVALID');
    expect(relative.message).toContain('must be absolute');
  });

  it('creates files and folders as the sandbox user of a non-root sandbox', async () => {
    await agent.client.createSandbox(agent.spec('files-user', { user: '1000:1000' }));
    try {
      await agent.client.writeFile('files-user', { path: '/tmp/mine/owned.txt', data: b64('mine') });
      const owners = await agent.client.exec('files-user', { cmd: ['sh', '-c', 'stat -c %u:%g /tmp/mine /tmp/mine/owned.txt; echo more >> /tmp/mine/owned.txt && echo appended'] });
      expect(owners.stdout).toBe('1000:1000\n1000:1000\nappended\n');
    } finally {
      await agent.client.destroySandbox('files-user');
    }
  });

  it('resumes a paused sandbox for a file call, which counts as activity', async () => {
    await agent.client.createSandbox(agent.spec('files-paused'));
    try {
      await agent.client.exec('files-paused', { cmd: ['sh', '-c', 'echo before > /tmp/p'] });
      const paused = await agent.client.pauseSandbox('files-paused');
      expect(paused.status).toBe('paused');
      const read = await agent.client.readFile('files-paused', { path: '/tmp/p' });
      expect(Buffer.from(read.data, 'base64').toString()).toBe('before\n');
      const after = await agent.client.getSandbox('files-paused');
      expect(after.status).toBe('running');
      expect(Date.parse(after.lastActivityAt!)).toBeGreaterThanOrEqual(Date.parse(paused.pausedAt!));
      await agent.client.pauseSandbox('files-paused');
      await agent.client.writeFile('files-paused', { path: '/tmp/q', data: b64('written while paused') });
      expect((await agent.client.getSandbox('files-paused')).status).toBe('running');
    } finally {
      await agent.client.destroySandbox('files-paused');
    }
  });

  it('answers a file call on a backend without file taps with DSEC_BACKEND_UNSUPPORTED naming the backend', async () => {
    await agent.client.createSandbox(agent.spec('files-inert', { backend: 'inert' }));
    const read = await caught(agent.client.readFile('files-inert', { path: '/etc/passwd' }));
    expect(read.code).toBe('DSEC_BACKEND_UNSUPPORTED');
    expect(read.message).toBe('backend inert does not support readFile');
    const write = await caught(agent.client.writeFile('files-inert', { path: '/x', data: '' }));
    expect(write.message).toBe('backend inert does not support writeFile');
  });

  it('reports each backend\'s capabilities in the node info, from its taps', async () => {
    const node = await agent.client.node();
    expect(node.capabilities?.container).toEqual(expect.arrayContaining(['exec', 'readFile', 'writeFile', 'pause', 'resume', 'snapshot', 'update', 'usage']));
    expect(node.capabilities?.container).not.toContain('invoke');
    expect(node.capabilities?.inert).toEqual([]);
  });

  it('answers an invoke on a fleet with no workers with DSEC_FUNCTION_NO_WORKERS naming the fleet and the node', async () => {
    const none = await caught(agent.client.invokeFunction('ghosts', { runtime: 'sh', code: 'echo hi' }));
    expect(none.code).toBe('DSEC_FUNCTION_NO_WORKERS');
    expect(none.message).toContain('fleet ghosts has no FnCall workers on node ');
    await agent.client.createSandbox(agent.spec('files-fleet', { labels: { 'dsec.io/fleet': 'plain' } }));
    const unsupported = await caught(agent.client.invokeFunction('plain', { runtime: 'sh', code: 'echo hi' }));
    expect(unsupported.code).toBe('DSEC_BACKEND_UNSUPPORTED');
    expect(unsupported.message).toBe('backend container does not support invoke');
    const bad = await caught(agent.client.invokeFunction('ghosts', { runtime: '', code: 1 } as never));
    expect(bad.code).toBe('DSEC_FUNCTION_INVALID');
    expect(bad.message).toContain('runtime must be a non-empty string; code must be a string');
  });
});
