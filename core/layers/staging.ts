/**
 * Staging dirs: work in progress of one process, never read by anyone else.
 * Named `<pid>-<host tag>-<random>` so that leftovers of a dead process can
 * be told from live work, also on a store shared by several machines: a
 * process only ever sweeps the leftovers of its own machine (the pid says
 * nothing about another machine's processes). Names without a tag (stores
 * from before sharing) count as this machine's.
 */
import { createHash, randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../hooks.js';
import { isErrno, removeTree } from './fsutil.js';

/** 8 hex characters naming this machine in staging names. */
export const HOST_TAG = createHash('sha256').update(hostname()).digest('hex').slice(0, 8);

export interface StagingDir {
  readonly dir: string;
  remove(): Promise<void>;
}

/** A fresh staging dir under `parent`. */
export async function newStagingDir(parent: string, label = ''): Promise<StagingDir> {
  const dir = join(parent, `${process.pid}-${HOST_TAG}-${label ? `${label}-` : ''}${randomBytes(8).toString('hex')}`);
  await fs.mkdir(dir, { recursive: true });
  return { dir, remove: () => removeTree(dir) };
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return isErrno(error, 'EPERM');
  }
}

/** Remove staging dirs under `parent` left by processes of this machine that are gone. */
export async function sweepStaging(parent: string, log: Logger, name: string): Promise<void> {
  for (const entry of await fs.readdir(parent).catch(() => [] as string[])) {
    const match = /^(\d+)-(?:([0-9a-f]{8})-)?/.exec(entry);
    if (!match) continue;
    const pid = Number(match[1]);
    const tag = match[2];
    const ours = tag === undefined || tag === HOST_TAG;
    if (!ours || pid === process.pid || processAlive(pid)) continue;
    log.debug(`${name}: removing staging left by process ${pid}: ${entry}`);
    await removeTree(join(parent, entry));
  }
}
