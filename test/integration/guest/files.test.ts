/**
 * readFile and writeFile through the real dsec-guest: round trips of text,
 * binary and multi-chunk files, parents created, modes set, and each
 * failure as its DSEC_FILE_* code naming the sandbox and the path.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GuestAgentClient } from '../../../core/guest/index.js';
import { buildGuestAgent, startDsecGuest, type RunningAgent } from './fixture.js';

let agent: RunningAgent;
let client: GuestAgentClient;

beforeAll(async () => {
  buildGuestAgent();
  agent = await startDsecGuest();
  client = await GuestAgentClient.connect(agent.socket, { id: 'sbx-files', timeoutMs: 10_000 });
});

afterAll(async () => {
  try {
    client?.close();
  } finally {
    await agent?.stop();
  }
});

describe('dsec-guest files', () => {
  it('writes a file, creating its parent directories, with the mode asked for', async () => {
    const path = join(agent.dir, 'a/b/c/hello.txt');
    await client.writeFile(path, Buffer.from('hello\n'), 0o600);
    expect(readFileSync(path, 'utf8')).toBe('hello\n');
    expect(statSync(path).mode & 0o7777).toBe(0o600);
    expect(statSync(join(agent.dir, 'a/b')).isDirectory()).toBe(true);
    await client.writeFile(path, Buffer.from('replaced'));
    expect(readFileSync(path, 'utf8')).toBe('replaced');
    expect(statSync(path).mode & 0o7777).toBe(0o644);
  });

  it('reads back what it wrote: empty, binary, and 7 MiB (several chunks)', async () => {
    for (const data of [Buffer.alloc(0), randomBytes(1000), randomBytes(7 * 1024 * 1024 + 3)]) {
      const path = join(agent.dir, `round-${data.length}`);
      await client.writeFile(path, data);
      expect(readFileSync(path).equals(data)).toBe(true);
      expect((await client.readFile(path, data.length)).equals(data)).toBe(true);
    }
  });

  it('reads files the host wrote, and files of /proc whose size is not known beforehand', async () => {
    writeFileSync(join(agent.dir, 'host.txt'), 'from the host');
    expect((await client.readFile(join(agent.dir, 'host.txt'), 100)).toString()).toBe('from the host');
    expect((await client.readFile('/proc/self/status', 1 << 20)).toString()).toContain('Name:');
  });

  it('refuses a missing file with DSEC_FILE_NOT_FOUND naming the sandbox and the path', async () => {
    const path = join(agent.dir, 'missing.txt');
    await expect(client.readFile(path, 100)).rejects.toMatchObject({ code: 'DSEC_FILE_NOT_FOUND', message: `sandbox sbx-files has no file ${path}` });
  });

  it('refuses a file over maxBytes with DSEC_FILE_TOO_LARGE giving its size and the limit', async () => {
    const path = join(agent.dir, 'big.bin');
    writeFileSync(path, Buffer.alloc(5000));
    await expect(client.readFile(path, 4999)).rejects.toMatchObject({
      code: 'DSEC_FILE_TOO_LARGE',
      message: `file ${path} in sandbox sbx-files is 5000 bytes, more than the 4999 asked for`,
    });
    expect((await client.readFile(path, 5000)).length).toBe(5000);
  });

  it('refuses a directory, a relative path and a bad mode with DSEC_FILE_INVALID', async () => {
    await expect(client.readFile(agent.dir, 100)).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: `file ${agent.dir} in sandbox sbx-files: it is a directory` });
    await expect(client.readFile('relative.txt', 100)).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: expect.stringContaining('must be absolute') });
    await expect(client.writeFile(join(agent.dir, 'x'), Buffer.from(''), 0o17777)).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID' });
    mkdirSync(join(agent.dir, 'a-dir'));
    await expect(client.writeFile(join(agent.dir, 'a-dir'), Buffer.from('x'))).rejects.toMatchObject({
      code: 'DSEC_FILE_INVALID',
      message: expect.stringContaining('Is a directory'),
    });
  });

  it('refuses to write under a path whose parent is a file', async () => {
    writeFileSync(join(agent.dir, 'plain'), '');
    await expect(client.writeFile(join(agent.dir, 'plain/child.txt'), Buffer.from('x'))).rejects.toMatchObject({
      code: 'DSEC_FILE_INVALID',
      message: expect.stringContaining('Not a directory'),
    });
  });

  it('follows a symlink to read its target, as a process in the guest would', async () => {
    writeFileSync(join(agent.dir, 'target.txt'), 'target');
    symlinkSync(join(agent.dir, 'target.txt'), join(agent.dir, 'link.txt'));
    expect((await client.readFile(join(agent.dir, 'link.txt'), 100)).toString()).toBe('target');
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
