/**
 * The plugin's options and their JSON Schema (checked by the plugin API's
 * checkPluginOptions).
 */
import { checkPluginOptions } from '../../core/plugin-api.js';

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

/** Validate the user's options; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): StorageLocalOptions {
  return checkPluginOptions<StorageLocalOptions>(PLUGIN_NAME, optionsSchema, options, { root: 'must be an absolute path' });
}
