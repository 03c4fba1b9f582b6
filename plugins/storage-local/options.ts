/**
 * The plugin's options, their JSON Schema and readable validation errors.
 */
import { Ajv, type ErrorObject } from 'ajv';
import { DsecError } from '../../core/plugin-api.js';

export interface StorageLocalOptions {
  /**
   * Where the store lives. Absolute.
   * @default "<node root>/storage-local"
   */
  readonly root?: string;
  /**
   * How layers are stored: `erofs` images mounted read-only (refused at first
   * use if EROFS cannot be mounted here), `tree` directories, or `auto`:
   * EROFS where it mounts, else trees, with the reason in the log.
   * @default "auto"
   */
  readonly format?: 'auto' | 'erofs' | 'tree';
  /**
   * The EROFS images' compressor: `lz4hc` packs tighter, `lz4` builds about
   * 30 times faster (publishing a GiB-sized layer in seconds, not minutes).
   * @default "lz4hc"
   */
  readonly compression?: 'lz4hc' | 'lz4';
}

const PLUGIN_NAME = 'storage-local';

const optionsSchema = {
  $id: 'https://dsec.dev/schemas/plugins/storage-local.json',
  title: 'storage-local options',
  type: 'object',
  additionalProperties: false,
  properties: {
    root: { type: 'string', minLength: 1, pattern: '^/', description: 'The store folder (absolute path).' },
    format: { enum: ['auto', 'erofs', 'tree'], description: 'How layers are stored (default auto).' },
    compression: { enum: ['lz4hc', 'lz4'], description: 'The EROFS images\' compressor (default lz4).' },
  },
} as const;

const validate = new Ajv({ allErrors: true }).compile<StorageLocalOptions>(optionsSchema);

function describe(error: ErrorObject, options: unknown): string {
  const field = error.instancePath.replace(/^\//, '');
  switch (error.keyword) {
    case 'additionalProperties':
      return `unknown option ${JSON.stringify(error.params.additionalProperty)} (known: root, format, compression)`;
    case 'pattern':
    case 'minLength': {
      const value = (options as Record<string, unknown>)[field];
      return `option ${field} must be an absolute path, got ${JSON.stringify(value)}`;
    }
    case 'enum':
      return `option ${field} must be one of ${(error.params.allowedValues as string[]).join(', ')}, got ${JSON.stringify((options as Record<string, unknown>)[field])}`;
    case 'type':
      return field === '' ? `options must be an object` : `option ${field} must be a ${error.params.type}`;
    default:
      return `option ${field || '(options)'} ${error.message ?? 'is invalid'}`;
  }
}

/** Validate the user's options; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): StorageLocalOptions {
  const value = options ?? {};
  if (validate(value)) return value;
  const problems = (validate.errors ?? []).map((error) => describe(error, value));
  throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: PLUGIN_NAME, message: problems.join('; ') });
}
