/**
 * Block-level I/O counters for the layer benchmarks, from the kernel's own
 * accounting (Documentation/admin-guide/iostats.rst): bytes read from and
 * written to the disk under a path, bytes read through a loop device, and
 * dropping or filling the page cache.
 *
 * Loop devices keep their counters across detach and re-attach (checked on
 * this kernel), so every figure here is a delta between two readings,
 * never a raw counter.
 */
import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);
const SECTOR = 512;

export interface BlockCounters {
  readonly readBytes: number;
  readonly writtenBytes: number;
}

/** Fields 3 and 7 of a block device's stat file: sectors read and written. */
async function readStat(file: string): Promise<BlockCounters> {
  const fields = (await fs.readFile(file, 'utf8')).trim().split(/\s+/).map(Number);
  return { readBytes: fields[2] * SECTOR, writtenBytes: fields[6] * SECTOR };
}

/** The kernel's major/minor numbers of a `dev_t` as Node reports it (glibc's encoding). */
function majorMinor(dev: number): [number, number] {
  const high = Math.floor(dev / 2 ** 32);
  const low = dev >>> 0;
  const major = ((low >>> 8) & 0xfff) | (high & 0xfffff000);
  const minor = (low & 0xff) | ((low >>> 12) & 0xfff00);
  return [major >>> 0, minor >>> 0];
}

/** The block device a path is on (a partition has counters of its own, which is what we want). */
export interface Disk {
  /** e.g. `vda`. */
  readonly name: string;
  counters(): Promise<BlockCounters>;
}

export async function diskOf(file: string): Promise<Disk> {
  const [major, minor] = majorMinor((await fs.stat(file)).dev);
  const sys = `/sys/dev/block/${major}:${minor}`;
  const name = path.basename(await fs.realpath(sys).catch(() => sys));
  const statFile = path.join(sys, 'stat');
  await fs.access(statFile).catch(() => {
    throw new Error(`${file} is on device ${major}:${minor}, which has no ${statFile} (not a block device: tmpfs, overlay?)`);
  });
  return { name, counters: () => readStat(statFile) };
}

export const countersDelta = (before: BlockCounters, after: BlockCounters): BlockCounters => ({
  readBytes: after.readBytes - before.readBytes,
  writtenBytes: after.writtenBytes - before.writtenBytes,
});

/** Bytes read through every loop device now (`loopN` -> bytes); a device created later simply started at 0. */
export async function loopReadCounters(): Promise<Map<string, number>> {
  const counters = new Map<string, number>();
  for (const name of await fs.readdir('/sys/block')) {
    if (!/^loop\d+$/.test(name)) continue;
    const stat = await readStat(`/sys/block/${name}/stat`).catch(() => undefined);
    if (stat) counters.set(name, stat.readBytes);
  }
  return counters;
}

/** Bytes read through `device` (`/dev/loopN`) since `before` was taken. */
export async function loopBytesReadSince(device: string, before: ReadonlyMap<string, number>): Promise<number> {
  const name = path.basename(device);
  const now = (await readStat(`/sys/block/${name}/stat`)).readBytes;
  return now - (before.get(name) ?? 0);
}

/** Write dirty pages out, then drop the page cache, dentries and inodes: the next read really goes to the device. */
export async function dropCaches(): Promise<void> {
  await execFileAsync('sync');
  await fs.writeFile('/proc/sys/vm/drop_caches', '3\n');
}

export async function syncDisks(): Promise<void> {
  await execFileAsync('sync');
}

/**
 * Read files whole into the page cache, with `cat` (not through this
 * process: a GiB of buffers would leave the benchmark's heap collecting
 * garbage during the timed part that follows).
 */
export async function readIntoCache(files: readonly string[]): Promise<void> {
  if (files.length === 0) return;
  await execFileAsync('sh', ['-c', 'cat "$@" > /dev/null', 'sh', ...files]);
}

/** Every regular file under `dir` (recursively). */
export async function filesUnder(dir: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await fs.readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) found.push(...(await filesUnder(full)));
    else if (entry.isFile()) found.push(full);
  }
  return found;
}
