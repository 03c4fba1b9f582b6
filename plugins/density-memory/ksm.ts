/**
 * KSM's knobs in sysfs, and the node-wide tuning this plugin does with them.
 *
 * KSM is one daemon per machine, so dsec must hand it back as it found it:
 * the first time it needs KSM it records the knobs' values (in
 * `<agent root>/density-memory/ksm.json`, before changing any, so an agent
 * that dies holding KSM still knows on restart), and when the last mergeable
 * sandbox goes it puts them back. It stops ksmd (run=0) only if it was the
 * one that started it: a node that ran KSM already keeps it running.
 */
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
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
  let hold = await readHold(root);
  const current = await readKsm(dir);
  if (mergeable > 0) {
    if (!hold) {
      const found = { run: current.run, pagesToScan: current.pagesToScan, sleepMillisecs: current.sleepMillisecs };
      hold = { found, startedByDsec: current.run !== 1, since: new Date().toISOString() };
      // Recorded before any knob changes: an agent dying right after still knows what to put back.
      await writeHold(root, hold);
      if (!hold.startedByDsec) {
        log.info(
          `${PLUGIN_NAME}: KSM was already running on this node (run=1, pages_to_scan ${found.pagesToScan}, sleep_millisecs ${found.sleepMillisecs}); ` +
            'dsec only raises its scan rate while it has mergeable sandboxes and will leave it running',
        );
      }
    }
    // The node's own settings are a floor: dsec never makes an admin's KSM scan slower.
    const knobs: KsmKnobs = {
      run: 1,
      pagesToScan: Math.max(scanRate(mergeable, options.maxPagesToScan), hold.startedByDsec ? 0 : hold.found.pagesToScan),
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
