/**
 * density-reclaim's options, their JSON Schema and readable validation errors.
 */
import { Ajv, type ErrorObject } from 'ajv';
import { DsecError } from '../../core/plugin-api.js';

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

const validate = new Ajv({ allErrors: true }).compile<DensityReclaimOptions>(optionsSchema);

function valueAt(options: unknown, pointer: string): unknown {
  let value = options;
  for (const part of pointer.split('/').filter(Boolean)) value = (value as Record<string, unknown> | undefined)?.[part];
  return value;
}

function describe(error: ErrorObject, options: unknown): string {
  const field = error.instancePath.replace(/^\//, '').replace(/\//g, '.');
  const got = JSON.stringify(valueAt(options, error.instancePath));
  switch (error.keyword) {
    case 'additionalProperties':
      return `unknown option ${field ? `${field}.` : ''}${error.params.additionalProperty} (known: ${field === 'swap' ? 'swap.zramMiB, swap.algorithm' : 'enabled, swap'})`;
    case 'required':
      return `option ${field}.${error.params.missingProperty} is required`;
    case 'type':
      return field === '' ? 'options must be an object' : `option ${field} must be ${error.params.type === 'integer' ? 'an integer' : `a ${error.params.type}`}, got ${got}`;
    case 'minimum':
    case 'maximum':
      return `option ${field} must be ${error.keyword === 'minimum' ? 'at least' : 'at most'} ${error.params.limit}, got ${got}`;
    case 'enum':
      return `option ${field} must be one of ${(error.params.allowedValues as string[]).join(', ')}, got ${got}`;
    default:
      return `option ${field || '(options)'} ${error.message ?? 'is invalid'}`;
  }
}

/** Validate the user's options and apply the defaults; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseReclaimOptions(options: unknown): ResolvedReclaimOptions {
  const value = options ?? {};
  if (!validate(value)) {
    const problems = (validate.errors ?? []).map((error) => describe(error, value));
    throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: PLUGIN_NAME, message: problems.join('; ') });
  }
  return {
    enabled: value.enabled ?? true,
    ...(value.swap ? { swap: { zramMiB: value.swap.zramMiB, algorithm: value.swap.algorithm ?? DEFAULT_ALGORITHM } } : {}),
  };
}
