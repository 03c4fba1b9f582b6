/**
 * The state lock: `<stateDir>/state.lock`, a JSON file naming its holder.
 * It is created exclusively, like O_EXCL, but by hard-linking a complete temp
 * file into place: the lock never exists half-written, so a reader always
 * sees who holds it. A holder on this host whose pid is gone left a stale
 * lock; dsec never breaks one by itself (a pid may be reused, a clock may
 * lie) but tells the user the `force-unlock` command.
 */
import { randomUUID } from 'node:crypto';
import { link, readFile, rm } from 'node:fs/promises';
import { hostname } from 'node:os';
import { DsecError } from '../errors.js';
import { writeTemp } from './files.js';

export interface LockInfo {
  readonly id: string;
  readonly pid: number;
  readonly host: string;
  readonly command: string;
  readonly createdAt: string;
}

export function newLockInfo(command: string): LockInfo {
  return { id: randomUUID(), pid: process.pid, host: hostname(), command, createdAt: new Date().toISOString() };
}

/** "pid 123 on host-a running `dsec apply` since 2025-01-01T00:00:00.000Z (lock id ...)" */
export function describeHolder(info: LockInfo): string {
  return `pid ${info.pid} on ${info.host} running \`${info.command}\` since ${info.createdAt} (lock id ${info.id})`;
}

/** True when the lock was taken (false: someone holds it). */
export async function tryCreateLock(lockFile: string, info: LockInfo): Promise<boolean> {
  const temp = await writeTemp(lockFile, `${JSON.stringify(info, null, 2)}\n`, 0o644);
  try {
    await link(temp, lockFile);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  } finally {
    await rm(temp, { force: true });
  }
}

export type LockRead =
  { readonly state: 'free' } | { readonly state: 'held'; readonly info: LockInfo } | { readonly state: 'unreadable' };

export async function readLock(lockFile: string): Promise<LockRead> {
  let text: string;
  try {
    text = await readFile(lockFile, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { state: 'free' };
    throw error;
  }
  const info = parseLockInfo(text);
  return info ? { state: 'held', info } : { state: 'unreadable' };
}

/** A pid on this host that no longer exists. EPERM means it exists under another user. */
export function holderIsGone(info: LockInfo): boolean {
  if (info.host !== hostname()) return false;
  try {
    process.kill(info.pid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** The error for a lock someone else holds: stale (with the unlock command) or live. */
export function lockedError(lockFile: string, read: Exclude<LockRead, { state: 'free' }>): DsecError {
  if (read.state === 'unreadable') {
    return new DsecError('DSEC_STATE_LOCKED', {
      holder: `an unreadable lock file ${lockFile} (remove it by hand if no dsec command is running)`,
      lockFile,
    });
  }
  return new DsecError(holderIsGone(read.info) ? 'DSEC_STATE_STALE_LOCK' : 'DSEC_STATE_LOCKED', holderParams(read.info));
}

/** The parameters of a lock error about `info`'s holder (the same for every store). */
export function holderParams(info: LockInfo, holder = describeHolder(info)): Record<string, string | number> {
  return { holder, id: info.id, pid: info.pid, host: info.host, command: info.command, since: info.createdAt };
}

/** A lock's JSON text as a LockInfo, or undefined when it is not one. */
export function parseLockInfo(text: string): LockInfo | undefined {
  try {
    const info = JSON.parse(text) as LockInfo;
    if (typeof info.id === 'string' && typeof info.pid === 'number' && typeof info.host === 'string') return info;
  } catch {
    // fall through: not ours to interpret
  }
  return undefined;
}

/** Remove the lock only if it is still the one with `id`. */
export async function removeLockIf(lockFile: string, id: string): Promise<boolean> {
  const read = await readLock(lockFile);
  if (read.state !== 'held' || read.info.id !== id) return false;
  await rm(lockFile, { force: true });
  return true;
}
