/**
 * density-placement's options, their JSON Schema and their defaults.
 */
import { checkPluginOptions } from '../../core/plugin-api.js';

export const PLUGIN_NAME = 'density-placement';

export interface DensityPlacementOptions {
  /** Off: no tap, so no node is chosen and the cluster provider fails every create with DSEC_PLACEMENT_FAILED (another plugin must answer `place`). @default true */
  readonly enabled?: boolean;
  /** How many candidate nodes `spread` samples before taking the least loaded (power of k choices). @default 2 */
  readonly k?: number;
}

export const DEFAULT_K = 2;

const optionsSchema = {
  $id: 'https://dsec.dev/schemas/plugins/density-placement.json',
  title: 'density-placement options',
  type: 'object',
  additionalProperties: false,
  properties: {
    enabled: { type: 'boolean' },
    k: { type: 'integer', minimum: 1, maximum: 64 },
  },
} as const;

const hints = {
  k: 'must be a whole number from 1 to 64, how many nodes spread samples (1 is random placement; 2 already spreads a burst evenly)',
};

/** The options, defaults filled; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): { enabled: boolean; k: number } {
  const value = checkPluginOptions<DensityPlacementOptions>(PLUGIN_NAME, optionsSchema, options, hints);
  return { enabled: value.enabled ?? true, k: value.k ?? DEFAULT_K };
}
