/**
 * density-memory's options, their JSON Schema and readable validation errors.
 */
import { Ajv, type ErrorObject } from 'ajv';
import { DsecError } from '../../core/plugin-api.js';

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

const validate = new Ajv({ allErrors: true }).compile<DensityMemoryOptions>(optionsSchema);

function describe(error: ErrorObject, options: Record<string, unknown>): string {
  const field = error.instancePath.replace(/^\//, '');
  const got = JSON.stringify(options[field]);
  switch (error.keyword) {
    case 'additionalProperties':
      return `unknown option ${JSON.stringify(error.params.additionalProperty)} (known: enabled, maxPagesToScan, sleepMillisecs)`;
    case 'type':
      return field === '' ? 'options must be an object' : `option ${field} must be ${error.params.type === 'integer' ? 'an integer' : `a ${error.params.type}`}, got ${got}`;
    case 'minimum':
    case 'maximum':
      return `option ${field} must be ${error.keyword === 'minimum' ? 'at least' : 'at most'} ${error.params.limit}, got ${got}`;
    default:
      return `option ${field || '(options)'} ${error.message ?? 'is invalid'}`;
  }
}

/** Validate the user's options and apply the defaults; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseMemoryOptions(options: unknown): ResolvedMemoryOptions {
  const value = options ?? {};
  if (!validate(value)) {
    const problems = (validate.errors ?? []).map((error) => describe(error, value as Record<string, unknown>));
    throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: PLUGIN_NAME, message: problems.join('; ') });
  }
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
