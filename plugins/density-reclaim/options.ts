/**
 * density-reclaim's options, their JSON Schema and their defaults.
 */
import { checkPluginOptions } from '../../core/plugin-api.js';

export type ZramAlgorithm = 'lz4' | 'zstd' | 'lzo-rle';

export interface SwapOptions {
  /** The zram device's size: the most uncompressed memory it holds (it takes RAM only for what it stores, compressed). */
  readonly zramMiB: number;
  /** The compressor; refused at agent start when this kernel lacks it (the log lists what it has). @default "lzo-rle" */
  readonly algorithm?: ZramAlgorithm;
}

export interface DensityReclaimOptions {
  /** Switch the plugin off: a pause only freezes, nothing is reclaimed or set up. @default true */
  readonly enabled?: boolean;
  /** Set up a compressed swap device in RAM (zram) at agent start, so a pause can push anonymous memory out. @default none: without swap a pause drops page cache only */
  readonly swap?: SwapOptions;
}

export interface ResolvedReclaimOptions {
  readonly enabled: boolean;
  readonly swap?: Required<SwapOptions>;
}

export const PLUGIN_NAME = 'density-reclaim';
export const DEFAULT_ALGORITHM: ZramAlgorithm = 'lzo-rle';
/** The smallest device worth making; mkswap refuses below 40 KiB anyway. */
export const MIN_ZRAM_MIB = 16;

const optionsSchema = {
  $id: 'https://dsec.dev/schemas/plugins/density-reclaim.json',
  title: 'density-reclaim options',
  type: 'object',
  additionalProperties: false,
  properties: {
    enabled: { type: 'boolean', description: 'Reclaim on pause and set up swap (default true).' },
    swap: {
      type: 'object',
      additionalProperties: false,
      required: ['zramMiB'],
      properties: {
        zramMiB: { type: 'integer', minimum: MIN_ZRAM_MIB, maximum: 16 * 1024 * 1024, description: 'zram swap device size in MiB.' },
        algorithm: { enum: ['lz4', 'zstd', 'lzo-rle'], description: 'zram compressor (default lzo-rle).' },
      },
    },
  },
} as const;

/** Validate the user's options and apply the defaults; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseReclaimOptions(options: unknown): ResolvedReclaimOptions {
  const value = checkPluginOptions<DensityReclaimOptions>(PLUGIN_NAME, optionsSchema, options);
  return {
    enabled: value.enabled ?? true,
    ...(value.swap ? { swap: { zramMiB: value.swap.zramMiB, algorithm: value.swap.algorithm ?? DEFAULT_ALGORITHM } } : {}),
  };
}
