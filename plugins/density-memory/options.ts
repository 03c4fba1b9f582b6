/**
 * density-memory's options, their JSON Schema and their defaults.
 */
import { checkPluginOptions } from '../../core/plugin-api.js';

export interface DensityMemoryOptions {
  /** Switch the plugin off (a bench measuring density without sharing): no trait is set, KSM is left alone. @default true */
  readonly enabled?: boolean;
  /**
   * The most pages ksmd scans per wake-up, however many mergeable sandboxes
   * the node has: ksmd's CPU time grows with it (see the plugin's doc for
   * what it cost here).
   * @default 5000
   */
  readonly maxPagesToScan?: number;
  /** How long ksmd sleeps between scans while dsec runs it. @default 20 */
  readonly sleepMillisecs?: number;
}

export interface ResolvedMemoryOptions {
  readonly enabled: boolean;
  readonly maxPagesToScan: number;
  readonly sleepMillisecs: number;
}

export const PLUGIN_NAME = 'density-memory';
export const DEFAULT_MAX_PAGES_TO_SCAN = 5000;
export const DEFAULT_SLEEP_MILLISECS = 20;
/** The scan rate's floor, and what each mergeable sandbox adds to it. */
export const PAGES_PER_SANDBOX = 100;

const optionsSchema = {
  $id: 'https://dsec.dev/schemas/plugins/density-memory.json',
  title: 'density-memory options',
  type: 'object',
  additionalProperties: false,
  properties: {
    enabled: { type: 'boolean', description: 'Set traits and tune KSM (default true).' },
    maxPagesToScan: { type: 'integer', minimum: PAGES_PER_SANDBOX, maximum: 1_000_000, description: 'Cap of KSM pages_to_scan (default 5000).' },
    sleepMillisecs: { type: 'integer', minimum: 1, maximum: 60_000, description: 'KSM sleep_millisecs while dsec runs it (default 20).' },
  },
} as const;

/** Validate the user's options and apply the defaults; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseMemoryOptions(options: unknown): ResolvedMemoryOptions {
  const value = checkPluginOptions<DensityMemoryOptions>(PLUGIN_NAME, optionsSchema, options);
  return {
    enabled: value.enabled ?? true,
    maxPagesToScan: value.maxPagesToScan ?? DEFAULT_MAX_PAGES_TO_SCAN,
    sleepMillisecs: value.sleepMillisecs ?? DEFAULT_SLEEP_MILLISECS,
  };
}

/** KSM's pages_to_scan for this many mergeable sandboxes: PAGES_PER_SANDBOX each, at least one sandbox's worth, at most the cap. */
export function scanRate(mergeableSandboxes: number, maxPagesToScan: number = DEFAULT_MAX_PAGES_TO_SCAN): number {
  const wanted = PAGES_PER_SANDBOX * Math.max(1, Math.floor(mergeableSandboxes));
  return Math.min(Math.max(wanted, PAGES_PER_SANDBOX), maxPagesToScan);
}
