/**
 * KSM's knobs in sysfs, and the node-wide tuning this plugin does with them.
 *
 * KSM is one daemon per machine, so dsec must hand it back as it found it:
 * the first time it needs KSM it records the knobs' values (in
 * `<agent root>/density-memory/ksm.json`, before changing any, so an agent
 * that dies holding KSM still knows on restart), and when the last mergeable
 * sandbox goes it puts them back. It stops ksmd (run=0) only if it was the
 * one that started it: a node that ran KSM already keeps it running.
 *
 * Several agents may run on one machine (one per project, and tests run
 * many at once), so the holders are also registered machine-wide, under a
 * lock, in `/run/dsec/ksm/` (tmpfs: gone at boot, like KSM's settings): what
 * the first holder found is what every holder records, and only the last
 * holder to let go puts it back. A holder whose agent died is dropped.
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../core/plugin-api.js';
import { PLUGIN_NAME, scanRate, type ResolvedMemoryOptions } from './options.js';

export const KSM_SYSFS = '/sys/kernel/mm/ksm';

/** The knobs dsec sets. `run`: 0 stopped, 1 running, 2 stopped after unmerging everything. */
export interface KsmKnobs {
  readonly run: number;
  readonly pagesToScan: number;
  readonly sleepMillisecs: number;
}

/** The knobs and the figures, read together. */
export interface KsmState extends KsmKnobs {
  /** KSM pages in use: one per distinct merged content. */
  readonly pagesShared: number;
  /** Further mappings of those pages: the pages KSM saves. */
  readonly pagesSharing: number;
}

/** The machine-wide registry of holders, for the real sysfs; beside a fake sysfs folder in tests. */
export function registryDir(dir: string): string {
  return dir === KSM_SYSFS ? '/run/dsec/ksm' : path.join(dir, '..', 'dsec-ksm-registry');
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Run `work` holding the registry's lock file (O_EXCL; a dead holder's lock is taken over). */
async function withRegistryLock<T>(registry: string, work: () => Promise<T>): Promise<T> {
  await mkdir(path.join(registry, 'holders'), { recursive: true });
  const lock = path.join(registry, 'lock');
  for (let attempt = 0; ; attempt++) {
    try {
      await writeFile(lock, String(process.pid), { flag: 'wx' });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = Number.parseInt(await readFile(lock, 'utf8').catch(() => ''), 10);
      if (Number.isInteger(holder) && !alive(holder)) await rm(lock, { force: true });
      else if (attempt > 500) throw new Error(`${lock} is held by pid ${holder} for over 10 s`);
      else await sleep(20);
    }
  }
  try {
    return await work();
  } finally {
    await rm(lock, { force: true });
  }
}

const holderFile = (registry: string, root: string) =>
  path.join(registry, 'holders', `${createHash('sha256').update(path.resolve(root)).digest('hex').slice(0, 16)}.json`);

/** The other live holders (a dead agent's entry is removed). */
async function otherHolders(registry: string, root: string): Promise<string[]> {
  const mine = holderFile(registry, root);
  const others: string[] = [];
  for (const name of await readdir(path.join(registry, 'holders')).catch(() => [] as string[])) {
    const file = path.join(registry, 'holders', name);
    if (file === mine) continue;
    const entry = JSON.parse(await readFile(file, 'utf8').catch(() => '{}')) as { root?: string; pid?: number };
    if (typeof entry.pid === 'number' && alive(entry.pid)) others.push(entry.root ?? name);
    else await rm(file, { force: true });
  }
  return others;
}

/** What ksm.json holds while dsec has mergeable sandboxes on the node. */
export interface KsmHold {
  /** The knobs as dsec found them, put back when it lets go. */
  readonly found: KsmKnobs;
  /** True when KSM was not running and dsec started it: only then does it stop it. */
  readonly startedByDsec: boolean;
  readonly since: string;
}

const FILES = { run: 'run', pagesToScan: 'pages_to_scan', sleepMillisecs: 'sleep_millisecs', pagesShared: 'pages_shared', pagesSharing: 'pages_sharing' } as const;

async function readNumber(dir: string, file: string): Promise<number> {
  const text = (await readFile(path.join(dir, file), 'utf8')).trim();
  const value = Number.parseInt(text, 10);
  if (!Number.isFinite(value)) throw new Error(`${path.join(dir, file)} holds ${JSON.stringify(text)}, not a number`);
  return value;
}

export async function readKsm(dir: string = KSM_SYSFS): Promise<KsmState> {
  const [run, pagesToScan, sleepMillisecs, pagesShared, pagesSharing] = await Promise.all(
    [FILES.run, FILES.pagesToScan, FILES.sleepMillisecs, FILES.pagesShared, FILES.pagesSharing].map((file) => readNumber(dir, file)),
  );
  return { run, pagesToScan, sleepMillisecs, pagesShared, pagesSharing };
}

/** Write the knobs that differ from `current`; the rate before `run`, so ksmd never starts at an old rate. */
export async function writeKsm(want: Partial<KsmKnobs>, current: KsmKnobs, dir: string = KSM_SYSFS): Promise<void> {
  for (const key of ['pagesToScan', 'sleepMillisecs', 'run'] as const) {
    const value = want[key];
    if (value !== undefined && value !== current[key]) await writeFile(path.join(dir, FILES[key]), `${value}\n`);
  }
}

async function readJson(file: string): Promise<unknown> {
  try {
    return JSON.parse(await readFile(file, 'utf8'));
  } catch {
    return undefined;
  }
}

export function holdFile(root: string): string {
  return path.join(root, PLUGIN_NAME, 'ksm.json');
}

export async function readHold(root: string): Promise<KsmHold | undefined> {
  try {
    return JSON.parse(await readFile(holdFile(root), 'utf8')) as KsmHold;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

async function writeHold(root: string, hold: KsmHold): Promise<void> {
  const file = holdFile(root);
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(`${file}.tmp`, `${JSON.stringify(hold, null, 2)}\n`);
  await rename(`${file}.tmp`, file);
}

/** What one retune did, for the log and the tests. */
export type RetuneOutcome =
  | { readonly action: 'tuned'; readonly knobs: KsmKnobs; readonly changed: boolean }
  | { readonly action: 'released'; readonly restored: KsmKnobs; readonly stopped: boolean }
  | { readonly action: 'idle' };

/**
 * Tune KSM for `mergeable` sandboxes. With some: hold KSM (recording what was
 * there), run it, scan at least `scanRate(count)` pages per wake-up (never
 * slower than the node's own settings). With none: put back what was found.
 */
export async function retuneKsm(
  root: string,
  mergeable: number,
  options: Pick<ResolvedMemoryOptions, 'maxPagesToScan' | 'sleepMillisecs'>,
  log: Logger,
  dir: string = KSM_SYSFS,
): Promise<RetuneOutcome> {
  const registry = registryDir(dir);
  return withRegistryLock(registry, () => retuneLocked(root, mergeable, options, log, dir, registry));
}

async function retuneLocked(
  root: string,
  mergeable: number,
  options: Pick<ResolvedMemoryOptions, 'maxPagesToScan' | 'sleepMillisecs'>,
  log: Logger,
  dir: string,
  registry: string,
): Promise<RetuneOutcome> {
  let hold = await readHold(root);
  const current = await readKsm(dir);
  const others = await otherHolders(registry, root);
  const machineFound = path.join(registry, 'found.json');
  if (mergeable > 0) {
    await writeFile(holderFile(registry, root), JSON.stringify({ root: path.resolve(root), pid: process.pid }));
    if (!hold) {
      // Another agent holding KSM found it before us: what it found is what the machine had.
      const shared = others.length > 0 ? ((await readJson(machineFound)) as Omit<KsmHold, 'since'> | undefined) : undefined;
      const found = shared?.found ?? { run: current.run, pagesToScan: current.pagesToScan, sleepMillisecs: current.sleepMillisecs };
      hold = { found, startedByDsec: shared?.startedByDsec ?? current.run !== 1, since: new Date().toISOString() };
      // Recorded before any knob changes: an agent dying right after still knows what to put back.
      await writeHold(root, hold);
      if (!shared) await writeFile(machineFound, JSON.stringify({ found, startedByDsec: hold.startedByDsec }));
      if (!hold.startedByDsec) {
        log.info(
          `${PLUGIN_NAME}: KSM was already running on this node (run=1, pages_to_scan ${found.pagesToScan}, sleep_millisecs ${found.sleepMillisecs}); ` +
            'dsec only raises its scan rate while it has mergeable sandboxes and will leave it running',
        );
      }
    }
    // The node's own settings are a floor: dsec never makes an admin's KSM scan slower; nor
    // slower than another agent of this machine set it for its own sandboxes.
    const knobs: KsmKnobs = {
      run: 1,
      pagesToScan: Math.max(
        scanRate(mergeable, options.maxPagesToScan),
        hold.startedByDsec ? 0 : hold.found.pagesToScan,
        others.length > 0 ? current.pagesToScan : 0,
      ),
      sleepMillisecs: Math.min(options.sleepMillisecs, hold.startedByDsec ? Infinity : hold.found.sleepMillisecs),
    };
    const changed = knobs.run !== current.run || knobs.pagesToScan !== current.pagesToScan || knobs.sleepMillisecs !== current.sleepMillisecs;
    await writeKsm(knobs, current, dir);
    if (changed) {
      log.info(`${PLUGIN_NAME}: KSM running for ${mergeable} mergeable sandbox(es): pages_to_scan ${knobs.pagesToScan}, sleep_millisecs ${knobs.sleepMillisecs}`);
    }
    return { action: 'tuned', knobs, changed };
  }
  if (!hold) return { action: 'idle' };
  await rm(holderFile(registry, root), { force: true });
  if (others.length > 0) {
    await rm(holdFile(root), { force: true });
    log.info(`${PLUGIN_NAME}: no mergeable sandbox left here; KSM stays as it is for ${others.length} other agent(s) of this machine`);
    return { action: 'released', restored: { run: current.run, pagesToScan: current.pagesToScan, sleepMillisecs: current.sleepMillisecs }, stopped: false };
  }
  await rm(machineFound, { force: true });
  // run=0 (not 2): stop scanning but keep what is merged; the pages unmerge as their owners write or exit.
  const restored: KsmKnobs = { ...hold.found, run: hold.startedByDsec ? 0 : current.run };
  await writeKsm(restored, current, dir);
  await rm(holdFile(root), { force: true });
  log.info(
    hold.startedByDsec
      ? `${PLUGIN_NAME}: no mergeable sandbox left: KSM stopped (run=0) and its scan rate put back (pages_to_scan ${restored.pagesToScan}, sleep_millisecs ${restored.sleepMillisecs})`
      : `${PLUGIN_NAME}: no mergeable sandbox left: KSM left running as found, scan rate put back (pages_to_scan ${restored.pagesToScan}, sleep_millisecs ${restored.sleepMillisecs})`,
  );
  return { action: 'released', restored, stopped: hold.startedByDsec && current.run !== 0 };
}
