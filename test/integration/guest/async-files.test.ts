/**
 * dsec-read-file and dsec-write-file through GuestSession (async mode) and
 * raw in sync mode: round trips (binary, 30 MiB in appended chunks), the
 * error classes, and traps sandbox code may plant at a path: a FIFO (with
 * and without a peer) must neither block nor stream the agent, a symlink
 * as the last component is refused on write. Ownership and modes.
 */
import { randomBytes } from 'node:crypto';
import { constants, lstatSync, mkdirSync, openSync, closeSync, readFileSync, readSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GuestSession, openFifoTransport } from '../../../core/guest/index.js';
import { buildGuestAgent, startDsecGuest, startDsecGuestFifos, type FifoAgent } from './fixture.js';

let agent: FifoAgent;
let session: GuestSession;

beforeAll(async () => {
  buildGuestAgent();
  agent = await startDsecGuestFifos();
  session = await GuestSession.open(await openFifoTransport(agent.inPath, agent.outPath), { id: 'sbx-files', timeoutMs: 10_000 });
});

afterAll(async () => {
  try {
    session?.close();
  } finally {
    await agent?.stop();
  }
});

describe('dsec-guest files', () => {
  it('writes and reads back empty, text, binary and 30 MiB files, creating parents', async () => {
    const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const large = randomBytes(30 * 1024 * 1024);
    for (const [name, data] of [['empty', Buffer.alloc(0)], ['text', Buffer.from('hello\n')], ['binary', bytes], ['large', large]] as const) {
      const path = join(agent.dir, 'round', 'trip', name);
      await session.writeFile(path, data);
      expect(readFileSync(path).equals(data), name).toBe(true);
      expect((await session.readFile(path, 32 * 1024 * 1024)).equals(data), name).toBe(true);
    }
    // Replacing truncates: the 30 MiB file becomes 3 bytes.
    await session.writeFile(join(agent.dir, 'round', 'trip', 'large'), Buffer.from('abc'));
    expect(readFileSync(join(agent.dir, 'round', 'trip', 'large'), 'utf8')).toBe('abc');
    expect(statSync(join(agent.dir, 'round')).mode & 0o777).toBe(0o755);
  });

  it('says NotFound, TooLarge (with the size) and Invalid as the file errors', async () => {
    writeFileSync(join(agent.dir, 'thousand'), Buffer.alloc(1000));
    await expect(session.readFile(join(agent.dir, 'missing'), 100)).rejects.toMatchObject({ code: 'DSEC_FILE_NOT_FOUND', message: expect.stringContaining('sbx-files') });
    await expect(session.readFile(join(agent.dir, 'thousand', 'below'), 100)).rejects.toMatchObject({ code: 'DSEC_FILE_NOT_FOUND' });
    await expect(session.readFile(join(agent.dir, 'thousand'), 999)).rejects.toMatchObject({ code: 'DSEC_FILE_TOO_LARGE', params: expect.objectContaining({ size: 1000, limit: 999 }) });
    expect((await session.readFile(join(agent.dir, 'thousand'), 1000)).length).toBe(1000);
    await expect(session.readFile(agent.dir, 100)).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: expect.stringContaining('is a directory') });
    await expect(session.readFile('relative/path', 100)).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: expect.stringContaining('absolute') });
    await expect(session.readFile('/dev/null', 100)).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: expect.stringContaining('not a regular file') });
    await expect(session.writeFile(agent.dir, Buffer.from('x'))).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID' });
    await expect(session.writeFile(join(agent.dir, 'thousand', 'below'), Buffer.from('x'))).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: expect.stringContaining('not a directory') });
    await expect(session.writeFile(join(agent.dir, 'mode'), Buffer.from('x'), { mode: 0o10000 })).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID' });
  });

  it('never blocks on or streams a FIFO planted at the path, with or without a peer, reading or writing', async () => {
    const fifo = join(agent.dir, 'planted');
    execFileSync('mkfifo', [fifo]);
    const started = Date.now();
    await expect(session.readFile(fifo, 100)).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: expect.stringContaining('not a regular file') });
    await expect(session.writeFile(fifo, Buffer.from('x'))).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID' });
    // With the other end held open (a sandbox process waiting on it) as well.
    const peer = openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK);
    try {
      writeFileSync(peer, 'bait');
      await expect(session.readFile(fifo, 100)).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID' });
      await expect(session.writeFile(fifo, Buffer.from('payload'))).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID' });
      const left = Buffer.alloc(100);
      expect(left.subarray(0, readSync(peer, left)).toString()).toBe('bait'); // nothing read from it, nothing written to it
    } finally {
      closeSync(peer);
    }
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('refuses a symlink as the last component on write, and follows one in a parent', async () => {
    const target = join(agent.dir, 'target');
    writeFileSync(target, 'original');
    const link = join(agent.dir, 'link');
    symlinkSync(target, link);
    await expect(session.writeFile(link, Buffer.from('overwritten'))).rejects.toMatchObject({ code: 'DSEC_FILE_INVALID', message: expect.stringContaining('symbolic link') });
    expect(readFileSync(target, 'utf8')).toBe('original');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    mkdirSync(join(agent.dir, 'real-dir'));
    symlinkSync(join(agent.dir, 'real-dir'), join(agent.dir, 'dir-link'));
    await session.writeFile(join(agent.dir, 'dir-link', 'file'), Buffer.from('via a parent link'));
    expect(readFileSync(join(agent.dir, 'real-dir', 'file'), 'utf8')).toBe('via a parent link');
  });

  it('sets the mode and owner, on the file and on the parents it creates, keeping set-id bits', async () => {
    const path = join(agent.dir, 'owned', 'deeper', 'file');
    await session.writeFile(path, Buffer.from('mine'), { mode: 0o640, uid: 1234, gid: 567 });
    expect(statSync(path)).toMatchObject({ uid: 1234, gid: 567 });
    expect(statSync(path).mode & 0o7777).toBe(0o640);
    expect(statSync(join(agent.dir, 'owned'))).toMatchObject({ uid: 1234, gid: 567 });
    expect(statSync(join(agent.dir, 'owned', 'deeper'))).toMatchObject({ uid: 1234, gid: 567 });
    const setuid = join(agent.dir, 'owned', 'setuid');
    await session.writeFile(setuid, Buffer.from('#!/bin/sh\n'), { mode: 0o4755, uid: 1234, gid: 567 });
    expect(statSync(setuid).mode & 0o7777).toBe(0o4755);
    await session.writeFile(join(agent.dir, 'plain'), Buffer.from('x'));
    expect(statSync(join(agent.dir, 'plain'))).toMatchObject({ uid: 0, gid: 0 });
    expect(statSync(join(agent.dir, 'plain')).mode & 0o7777).toBe(0o644);
  });

  it('works in sync mode too, on a plain QGA connection', async () => {
    const plain = await startDsecGuest();
    try {
      const socket = createConnection({ path: plain.socket });
      await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString()));
      const path = join(plain.dir, 'sync', 'file');
      socket.write(`${JSON.stringify({ execute: 'dsec-write-file', arguments: { path, data: Buffer.from('sync').toString('base64') } })}\n`);
      socket.write(`${JSON.stringify({ execute: 'dsec-read-file', arguments: { path, 'max-bytes': 10 } })}\n`);
      socket.write(`${JSON.stringify({ execute: 'dsec-read-file', arguments: { path: join(plain.dir, 'none') } })}\n`);
      for (let i = 0; i < 500 && received.split('\n').length < 4; i++) await new Promise((resolve) => setTimeout(resolve, 10));
      socket.destroy();
      expect(received.trim().split('\n').map((line) => JSON.parse(line))).toEqual([
        { return: { size: 4 } },
        { return: { size: 4, data: Buffer.from('sync').toString('base64') } },
        { error: { class: 'NotFound', desc: `${join(plain.dir, 'none')}: No such file or directory` } },
      ]);
    } finally {
      await plain.stop();
    }
  });
});
