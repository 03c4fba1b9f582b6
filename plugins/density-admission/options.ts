/**
 * density-admission's options, their JSON Schema and their defaults.
 * Defaults follow what agent sandboxes do: they use a sliver of the CPU they
 * ask for (CPU 20x) but hold their memory (memory 1x), and the host keeps
 * 512 MiB for itself and the agent.
 */
import { checkPluginOptions, type OvercommitPolicy } from '../../core/plugin-api.js';

export const PLUGIN_NAME = 'density-admission';

export interface DensityAdmissionOptions {
  /** Off: no taps at all, so anything the backends accept is admitted and the node reports no policy. @default true */
  readonly enabled?: boolean;
  /** Ratios of requests to capacity per resource, each >= 1. @default { cpu: 20, memory: 1 } */
  readonly overcommit?: { readonly cpu?: number; readonly memory?: number };
  /** Kept for the host, taken off capacity before the ratio applies. @default { cpu: 0, memoryMiB: 512 } */
  readonly reserve?: { readonly cpu?: number; readonly memoryMiB?: number };
}

export const DEFAULT_POLICY: OvercommitPolicy = Object.freeze({
  overcommit: Object.freeze({ cpu: 20, memory: 1 }),
  reserve: Object.freeze({ cpu: 0, memoryMiB: 512 }),
});

const ratio = { type: 'number', minimum: 1 } as const;
const amount = { type: 'number', minimum: 0 } as const;

const optionsSchema = {
  $id: 'https://dsec.dev/schemas/plugins/density-admission.json',
  title: 'density-admission options',
  type: 'object',
  additionalProperties: false,
  properties: {
    enabled: { type: 'boolean' },
    overcommit: { type: 'object', additionalProperties: false, properties: { cpu: ratio, memory: ratio } },
    reserve: { type: 'object', additionalProperties: false, properties: { cpu: amount, memoryMiB: amount } },
  },
} as const;

/**
 * Why a ratio below 1 is refused: the schema only says "at least 1", a user
 * setting 0.5 to be careful needs to hear that it would leave capacity unused.
 */
const ratioHint = (resource: string): string =>
  `must be at least 1, as an overcommit ratio (requests up to ${resource} capacity x ratio; below 1 would admit less than the machine has)`;
const hints = { 'overcommit.cpu': ratioHint('cpu'), 'overcommit.memory': ratioHint('memory') };

/** The policy the options ask for, defaults filled; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): { enabled: boolean; policy: OvercommitPolicy } {
  const value = checkPluginOptions<DensityAdmissionOptions>(PLUGIN_NAME, optionsSchema, options, hints);
  return {
    enabled: value.enabled ?? true,
    policy: {
      overcommit: { ...DEFAULT_POLICY.overcommit, ...value.overcommit },
      reserve: { ...DEFAULT_POLICY.reserve, ...value.reserve },
    },
  };
}
