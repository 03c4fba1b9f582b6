/**
 * The zram swap device: a compressed block device in RAM, used as swap, so a
 * paused sandbox's anonymous pages can leave its cgroup for a fraction of
 * their size.
 *
 * One device per agent root, recorded in `<root>/density-reclaim/zram.json`:
 * an agent restart finds it still swapped on and reuses it (sandboxes may
 * have pages in it). An agent stop keeps it too; `releaseSwap(root)` takes it
 * down (swapoff reads every page back into the owners' memory first).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../core/plugin-api.js';
import { PLUGIN_NAME, type SwapOptions } from './options.js';

export const ZRAM_CONTROL = '/sys/class/zram-control';
/** Above any disk swap the host may have (swapon's default is negative): paused pages go to RAM first. */
export const SWAP_PRIORITY = 100;
const MIB = 1024 * 1024;

/** What zram.json holds. */
export interface ZramRecord {
  /** The device's name, e.g. "zram1"; the swap is /dev/<device>. */
  readonly device: string;
  readonly sizeMiB: number;
  readonly algorithm: string;
  readonly priority: number;
  readonly createdAt: string;
}

export interface SwapEntry {
  readonly filename: string;
  readonly type: string;
  readonly sizeKiB: number;
  readonly usedKiB: number;
  readonly priority: number;
}

/** /proc/swaps, one entry per active swap area. */
export function parseProcSwaps(text: string): SwapEntry[] {
  return text
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((fields) => fields.length >= 5)
    .map(([filename, type, size, used, priority]) => ({
      filename: filename.replace(/\\040/g, ' '),
      type,
      sizeKiB: Number(size),
      usedKiB: Number(used),
      priority: Number(priority),
    }));
}

export interface MmStat {
  /** Uncompressed bytes stored. */
  readonly origDataSize: number;
  /** Those bytes compressed. */
  readonly comprDataSize: number;
  /** RAM the device takes: the compressed data plus the allocator's overhead. */
  readonly memUsedTotal: number;
  readonly memLimit: number;
  readonly memUsedMax: number;
  /** Pages that were all one byte value, stored as that byte alone. */
  readonly samePages: number;
}

/** /sys/block/zramN/mm_stat: orig_data_size compr_data_size mem_used_total mem_limit mem_used_max same_pages pages_compacted ... */
export function parseMmStat(text: string): MmStat {
  const fields = text.trim().split(/\s+/).map(Number);
  if (fields.length < 6 || fields.slice(0, 6).some((value) => !Number.isFinite(value))) {
    throw new Error(`mm_stat reads ${JSON.stringify(text.trim())}: expected at least 6 numbers`);
  }
  const [origDataSize, comprDataSize, memUsedTotal, memLimit, memUsedMax, samePages] = fields;
  return { origDataSize, comprDataSize, memUsedTotal, memLimit, memUsedMax, samePages };
}

/** The compressors a zram device offers ("lzo [lzo-rle] lz4" -> lzo, lzo-rle, lz4). */
export function parseAlgorithms(text: string): string[] {
  return text
    .trim()
    .split(/\s+/)
    .map((name) => name.replace(/^\[|\]$/g, ''))
    .filter(Boolean);
}

export function recordFile(root: string): string {
  return path.join(root, PLUGIN_NAME, 'zram.json');
}

export async function readRecord(root: string): Promise<ZramRecord | undefined> {
  try {
    return JSON.parse(await readFile(recordFile(root), 'utf8')) as ZramRecord;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

async function readSwaps(): Promise<SwapEntry[]> {
  return parseProcSwaps(await readFile('/proc/swaps', 'utf8'));
}

function activeSwap(swaps: readonly SwapEntry[], device: string): SwapEntry | undefined {
  return swaps.find((entry) => entry.filename === `/dev/${device}`);
}

function run(command: string, args: readonly string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { encoding: 'utf8' }, (error, _stdout, stderr) => {
      if (error) reject(new Error(`${command} ${args.join(' ')} failed: ${stderr.trim() || error.message}`));
      else resolve();
    });
  });
}

const sysBlock = (device: string, file: string) => path.join('/sys/block', device, file);

/**
 * The agent root's zram swap: the recorded device when it is still swapped
 * on, else a new one (hot_add, compressor, size, mkswap, swapon). A recorded
 * device that is not swapped on any more (a crash mid-set-up) is taken down first.
 */
export async function ensureSwap(root: string, swap: Required<SwapOptions>, log: Logger): Promise<{ record: ZramRecord; reused: boolean }> {
  const recorded = await readRecord(root);
  if (recorded) {
    if (activeSwap(await readSwaps(), recorded.device)) {
      if (recorded.sizeMiB !== swap.zramMiB || recorded.algorithm !== swap.algorithm) {
        log.warn(
          `${PLUGIN_NAME}: the swap device /dev/${recorded.device} (${recorded.sizeMiB} MiB, ${recorded.algorithm}) is kept although the options ask for ` +
            `${swap.zramMiB} MiB, ${swap.algorithm}: it may hold paused sandboxes' pages; release it (releaseSwap) while no sandbox is paused to change it`,
        );
      }
      return { record: recorded, reused: true };
    }
    // Ours only if it still has the recorded size (after a reboot the number may name another's device).
    const size = await readFile(sysBlock(recorded.device, 'disksize'), 'utf8').catch(() => '');
    if (Number(size.trim()) === recorded.sizeMiB * MIB) await releaseDevice(recorded.device);
    await rm(recordFile(root), { force: true });
  }
  if (!existsSync(path.join(ZRAM_CONTROL, 'hot_add'))) throw new Error(`this kernel has no zram device control (${ZRAM_CONTROL}/hot_add is missing)`);
  const id = Number.parseInt(await readFile(path.join(ZRAM_CONTROL, 'hot_add'), 'utf8'), 10);
  if (!Number.isInteger(id)) throw new Error('zram hot_add gave no device number');
  const device = `zram${id}`;
  const record: ZramRecord = { device, sizeMiB: swap.zramMiB, algorithm: swap.algorithm, priority: SWAP_PRIORITY, createdAt: new Date().toISOString() };
  try {
    // Recorded first: if the agent dies half-way, the next start finds the device and takes it down.
    await writeRecord(root, record);
    const offered = parseAlgorithms(await readFile(sysBlock(device, 'comp_algorithm'), 'utf8'));
    if (!offered.includes(swap.algorithm)) throw new Error(`zram on this kernel offers ${offered.join(', ')}; ${swap.algorithm} is not one of them`);
    // The compressor is fixed once the device has a size: set it first.
    await writeFile(sysBlock(device, 'comp_algorithm'), swap.algorithm);
    await writeFile(sysBlock(device, 'disksize'), String(swap.zramMiB * MIB));
    await run('mkswap', [`/dev/${device}`]);
    await run('swapon', ['-p', String(SWAP_PRIORITY), `/dev/${device}`]);
  } catch (error) {
    await releaseDevice(device).catch(() => {});
    await rm(recordFile(root), { force: true });
    throw error;
  }
  return { record, reused: false };
}

async function writeRecord(root: string, record: ZramRecord): Promise<void> {
  const file = recordFile(root);
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(`${file}.tmp`, `${JSON.stringify(record, null, 2)}\n`);
  await rename(`${file}.tmp`, file);
}

/** swapoff (when on), reset, hot_remove: idempotent, a device already gone is fine. */
async function releaseDevice(device: string): Promise<void> {
  if (!/^zram\d+$/.test(device)) throw new Error(`${JSON.stringify(device)} is not a zram device name`);
  if (activeSwap(await readSwaps(), device)) await run('swapoff', [`/dev/${device}`]);
  if (!existsSync(path.join('/sys/block', device))) return;
  await writeFile(sysBlock(device, 'reset'), '1');
  await writeFile(path.join(ZRAM_CONTROL, 'hot_remove'), device.slice('zram'.length));
}

/**
 * Take down the agent root's zram swap: swapoff (the kernel first reads every
 * page in it back into its owner's memory: that needs the RAM), reset,
 * hot_remove, and forget the record. Returns the device released, or
 * undefined when there was none. For tests, benches and operators; the
 * agent never calls it (a stop keeps the device for the paused sandboxes).
 */
export async function releaseSwap(root: string): Promise<string | undefined> {
  const record = await readRecord(root);
  if (!record) return undefined;
  await releaseDevice(record.device);
  await rm(recordFile(root), { force: true });
  return record.device;
}

/** The swap to report: this root's zram when it is on, else the host's first swap area; with zram's RAM use when it is one. */
export async function swapStatus(
  root: string,
): Promise<{ device: string; totalMiB: number; usedMiB: number; compressedMiB?: number } | undefined> {
  const swaps = await readSwaps();
  const record = await readRecord(root);
  const entry = (record && activeSwap(swaps, record.device)) ?? swaps[0];
  if (!entry) return undefined;
  const report = { device: entry.filename, totalMiB: toMiB(entry.sizeKiB * 1024), usedMiB: toMiB(entry.usedKiB * 1024) };
  const zram = /^\/dev\/(zram\d+)$/.exec(entry.filename)?.[1];
  if (!zram) return report;
  const mm = parseMmStat(await readFile(sysBlock(zram, 'mm_stat'), 'utf8'));
  return { ...report, compressedMiB: toMiB(mm.memUsedTotal) };
}

function toMiB(bytes: number): number {
  return Math.round((bytes / MIB) * 10) / 10;
}
