/**
 * readFile and writeFile through the guest agent's file commands, which
 * dsec-guest and qemu-ga both have (guest-file-open/seek/read/write/close):
 * data moves in chunks so no answer line grows with the file. dsec-guest's
 * dsec-stat, dsec-mkdirs and dsec-chmod replace the guest-exec round trips a
 * plain qemu-ga needs for a file's type, its parent directories and its mode.
 */
import { posix } from 'node:path';
import { DsecError } from '../errors.js';
import { AnswerReader } from './answers.js';
import { GuestCommandError, type GuestChannel } from './channel.js';
import { execWithQga } from './exec-qga.js';

/** Bytes per guest-file-read / guest-file-write (about 4 MiB of base64 per line). */
const CHUNK_BYTES = 3 * 1024 * 1024;
const FILE_CALL_TIMEOUT_MS = 30_000;

export interface FileSession {
  readonly channel: GuestChannel;
  /** The agent has the dsec-* commands. */
  readonly dsec: boolean;
}

export interface GuestFileStat {
  /** What the path is, symlinks followed. */
  readonly type: 'file' | 'dir' | 'other' | 'missing';
  /** Bytes (0 when missing). */
  readonly size: number;
}

const STAT_TYPES = new Set(['file', 'dir', 'other', 'missing']);

/** dsec-stat, or for qemu-ga the shell's tests (symlinks followed either way). */
export async function statGuestPath(session: FileSession, path: string): Promise<GuestFileStat> {
  const id = session.channel.sandboxId;
  checkPath(id, path);
  if (!session.dsec) {
    const script = 'if [ -d "$1" ]; then t=dir; elif [ -f "$1" ]; then t=file; elif [ -e "$1" ]; then t=other; else echo missing 0; exit 0; fi; echo $t $(wc -c < "$1" 2>/dev/null || echo 0)';
    const result = await execWithQga(session.channel, { path: '/bin/sh', args: ['-c', script, 'dsec', path], timeoutMs: FILE_CALL_TIMEOUT_MS, maxOutputBytes: 256 });
    const [type, size] = result.stdout.toString('utf8').trim().split(/\s+/);
    if (result.exitCode !== 0 || !STAT_TYPES.has(type ?? '')) throw new DsecError('DSEC_FILE_INVALID', { id, path, message: `cannot tell what it is: ${result.stderr.toString('utf8').trim() || result.stdout.toString('utf8').trim()}` });
    return { type: type as GuestFileStat['type'], size: type === 'file' ? Number(size) || 0 : 0 };
  }
  const reader = new AnswerReader(id, 'dsec-stat');
  const stat = reader.object(await fileCall(session, path, 'dsec-stat', { path }));
  const type = reader.string(stat.type, 'type');
  if (!STAT_TYPES.has(type)) throw reader.invalid(`type ${JSON.stringify(type.slice(0, 20))} is none of file, dir, other, missing`);
  return { type: type as GuestFileStat['type'], size: reader.integer(stat.size, 'size') };
}

export async function readGuestFile(session: FileSession, path: string, maxBytes: number): Promise<Buffer> {
  const { channel } = session;
  const id = channel.sandboxId;
  checkPath(id, path);
  if (session.dsec) {
    // One round trip tells a missing file, a directory and a file too large apart before opening anything.
    const { type, size } = await statGuestPath(session, path);
    if (type === 'missing') throw new DsecError('DSEC_FILE_NOT_FOUND', { id, path });
    if (type === 'dir') throw new DsecError('DSEC_FILE_INVALID', { id, path, message: 'it is a directory' });
    if (type !== 'file') throw new DsecError('DSEC_FILE_INVALID', { id, path, message: 'it is not a regular file' });
    if (size > maxBytes) throw new DsecError('DSEC_FILE_TOO_LARGE', { id, path, size, limit: maxBytes });
  }
  const handle = await openFile(session, path, 'r');
  try {
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      // Never more than one byte past the limit: enough to know the file is too large.
      const count = Math.min(CHUNK_BYTES, maxBytes + 1 - total);
      const reader = new AnswerReader(id, 'guest-file-read');
      const answer = reader.object(await fileCall(session, path, 'guest-file-read', { handle, count }));
      const { data, cut } = reader.bytes(answer['buf-b64'], 'buf-b64', count);
      if (cut) throw reader.invalid(`it sent more than the ${count} bytes asked for`);
      total += data.length;
      if (total > maxBytes) throw new DsecError('DSEC_FILE_TOO_LARGE', { id, path, size: await fileSize(session, path, handle, total), limit: maxBytes });
      chunks.push(data);
      if (reader.boolean(answer.eof, 'eof') || data.length === 0) break;
    }
    return Buffer.concat(chunks);
  } finally {
    await closeFile(session, handle);
  }
}

/** The file's size from a seek to its end, for the message (`more than N` when the guest will not say). */
async function fileSize(session: FileSession, path: string, handle: number, atLeast: number): Promise<number | string> {
  try {
    const reader = new AnswerReader(session.channel.sandboxId, 'guest-file-seek');
    const answer = reader.object(await fileCall(session, path, 'guest-file-seek', { handle, offset: 0, whence: 'end' }));
    const size = reader.integer(answer.position, 'position');
    return size >= atLeast ? size : `at least ${atLeast}`;
  } catch {
    return `at least ${atLeast}`;
  }
}

export async function writeGuestFile(session: FileSession, path: string, data: Buffer, mode: number): Promise<void> {
  const { channel } = session;
  const id = channel.sandboxId;
  checkPath(id, path);
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw new DsecError('DSEC_FILE_INVALID', { id, path, message: `mode ${mode} is not a permission mode` });
  const parent = posix.dirname(path);
  if (parent !== '/') {
    if (session.dsec) await fileCall(session, path, 'dsec-mkdirs', { path: parent });
    else await shell(session, path, 'mkdir -p -- "$1"', [parent]);
  }
  const handle = await openFile(session, path, 'w');
  try {
    for (let offset = 0; offset < data.length; offset += CHUNK_BYTES) {
      const chunk = data.subarray(offset, offset + CHUNK_BYTES);
      const reader = new AnswerReader(id, 'guest-file-write');
      const answer = reader.object(await fileCall(session, path, 'guest-file-write', { handle, 'buf-b64': chunk.toString('base64') }));
      const written = reader.integer(answer.count, 'count');
      if (written !== chunk.length) throw new DsecError('DSEC_FILE_INVALID', { id, path, message: `the guest wrote ${written} of ${chunk.length} bytes` });
    }
  } finally {
    await closeFile(session, handle);
  }
  if (session.dsec) await fileCall(session, path, 'dsec-chmod', { path, mode });
  else await shell(session, path, 'chmod -- "$1" "$2"', [mode.toString(8), path]);
}

function checkPath(id: string, path: string): void {
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0')) {
    throw new DsecError('DSEC_FILE_INVALID', { id, path: String(path), message: 'the path must be absolute' });
  }
}

async function openFile(session: FileSession, path: string, mode: 'r' | 'w'): Promise<number> {
  const handle = await fileCall(session, path, 'guest-file-open', { path, mode });
  return new AnswerReader(session.channel.sandboxId, 'guest-file-open').integer(handle, 'the handle');
}

/** Closing is best effort: the data is read or written, and an error here must not hide an earlier one. */
async function closeFile(session: FileSession, handle: number): Promise<void> {
  if (session.channel.isClosed) return;
  await session.channel.call('guest-file-close', { handle }, FILE_CALL_TIMEOUT_MS).catch(() => undefined);
}

/** A file command, its guest error turned into DSEC_FILE_NOT_FOUND or DSEC_FILE_INVALID naming the path. */
async function fileCall(session: FileSession, path: string, command: string, args: Record<string, unknown>): Promise<unknown> {
  try {
    return await session.channel.call(command, args, FILE_CALL_TIMEOUT_MS);
  } catch (error) {
    if (!(error instanceof GuestCommandError)) throw error;
    const id = session.channel.sandboxId;
    if (/No such file or directory/i.test(error.desc)) throw new DsecError('DSEC_FILE_NOT_FOUND', { id, path }, { cause: error });
    throw new DsecError('DSEC_FILE_INVALID', { id, path, message: `${command}: ${error.desc}` }, { cause: error });
  }
}

/** A shell one-liner through guest-exec (qemu-ga has no mkdir or chmod); a non-zero exit is DSEC_FILE_INVALID. */
async function shell(session: FileSession, path: string, script: string, args: string[]): Promise<void> {
  const result = await execWithQga(session.channel, { path: '/bin/sh', args: ['-c', script, 'dsec', ...args], timeoutMs: FILE_CALL_TIMEOUT_MS, maxOutputBytes: 4096 });
  if (result.exitCode !== 0) {
    const why = result.stderr.toString('utf8').trim() || `exit code ${result.exitCode ?? `signal ${result.signal}`}`;
    throw new DsecError('DSEC_FILE_INVALID', { id: session.channel.sandboxId, path, message: why });
  }
}
