/**
 * storage-3fs options and their JSON Schema (checked by the plugin API's
 * checkPluginOptions).
 */
import { checkPluginOptions } from '../../core/plugin-api.js';

export interface Storage3fsCacheOptions {
  /**
   * Node-local folder for cached blobs. Absolute.
   * @default "<node root>/storage-3fs/cache"
   */
  readonly dir?: string;
  /**
   * Most bytes of blobs kept; least recently mounted ones are evicted first.
   * @default 8589934592 (8 GiB)
   */
  readonly maxBytes?: number;
}

export interface Storage3fsOptions {
  /** The 3FS mount (or a folder in it) the store lives in, shared by every node. Absolute. */
  readonly mount: string;
  /** Keep a node-local copy of each image's data once it was mounted. Off unless given. */
  readonly cache?: Storage3fsCacheOptions;
  /**
   * `erofs`: split EROFS images (refused at first use if they cannot be
   * mounted here); `tree`: directory trees on the mount; `auto`: EROFS where
   * it mounts, else trees.
   * @default "auto"
   */
  readonly format?: 'auto' | 'erofs' | 'tree';
}

export const DEFAULT_CACHE_MAX_BYTES = 8 * 1024 * 1024 * 1024;

const PLUGIN_NAME = 'storage-3fs';

const absolutePath = { type: 'string', minLength: 1, pattern: '^/' } as const;

const optionsSchema = {
  $id: 'https://dsec.dev/schemas/plugins/storage-3fs.json',
  title: 'storage-3fs options',
  type: 'object',
  additionalProperties: false,
  required: ['mount'],
  properties: {
    mount: { ...absolutePath, description: 'The 3FS mount path, or a folder in it: the store every node shares.' },
    cache: {
      type: 'object',
      additionalProperties: false,
      properties: {
        dir: { ...absolutePath, description: 'Node-local folder for cached blobs.' },
        maxBytes: { type: 'integer', minimum: 0, description: 'Most bytes of cached blobs.' },
      },
    },
    format: { enum: ['auto', 'erofs', 'tree'], description: 'How layers are stored (default auto).' },
  },
} as const;

/** Validate the user's options; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): Storage3fsOptions {
  return checkPluginOptions<Storage3fsOptions>(PLUGIN_NAME, optionsSchema, options, {
    mount: 'must be an absolute path',
    'cache.dir': 'must be an absolute path',
  });
}
