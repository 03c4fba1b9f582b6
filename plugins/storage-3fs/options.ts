/**
 * storage-3fs options, their JSON Schema and readable validation errors.
 */
import { Ajv, type ErrorObject } from 'ajv';
import { DsecError } from '../../core/plugin-api.js';

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
    mount: { ...absolutePath, description: 'The 3FS mount (or a folder in it) holding the shared store.' },
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

const validate = new Ajv({ allErrors: true }).compile<Storage3fsOptions>(optionsSchema);

function valueAt(options: unknown, pointer: string): unknown {
  let value = options;
  for (const part of pointer.split('/').filter(Boolean)) value = (value as Record<string, unknown> | undefined)?.[part];
  return value;
}

function describe(error: ErrorObject, options: unknown): string {
  const field = error.instancePath.replace(/^\//, '').replace(/\//g, '.');
  switch (error.keyword) {
    case 'required':
      return `option ${error.params.missingProperty} is required (the 3FS mount path)`;
    case 'additionalProperties':
      return `unknown option ${field ? `${field}.` : ''}${error.params.additionalProperty} (known: ${field === 'cache' ? 'dir, maxBytes' : 'mount, cache, format'})`;
    case 'pattern':
    case 'minLength':
      return `option ${field} must be an absolute path, got ${JSON.stringify(valueAt(options, error.instancePath))}`;
    case 'enum':
      return `option ${field} must be one of ${(error.params.allowedValues as string[]).join(', ')}, got ${JSON.stringify(valueAt(options, error.instancePath))}`;
    case 'type':
      return field === '' ? 'options must be an object' : `option ${field} must be a ${error.params.type}`;
    default:
      return `option ${field || '(options)'} ${error.message ?? 'is invalid'}`;
  }
}

/** Validate the user's options; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): Storage3fsOptions {
  const value = options ?? {};
  if (validate(value)) return value;
  const problems = (validate.errors ?? []).map((error) => describe(error, value));
  throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: PLUGIN_NAME, message: problems.join('; ') });
}
