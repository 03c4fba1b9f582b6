/**
 * backend-fncall's options: the plugin's own (one per agent), and each
 * fleet's `backendOptions` (the pool's scratch sizes and output cap), checked
 * at plan time with a located message and again on the node before a worker
 * is made.
 */
import { checkPluginOptions, MAX_EXEC_OUTPUT_BYTES, type ConfigModel, type Diagnostic } from '../../core/plugin-api.js';

export const PLUGIN_NAME = 'backend-fncall';
/** The backend kind this plugin provisions (`backend: fncall` in a fleet). */
export const BACKEND_KIND = 'fncall';

export interface BackendFncallOptions {
  /** The guest agent binary on the host, bound into every worker. @default dist/native/dsec-guest of this package */
  readonly guestPath?: string;
  /** The longest timeout a task may ask for. @default 600000 (10 minutes) */
  readonly maxTimeoutMs?: number;
  /** Tasks a fleet's queue holds at most; one more is refused with DSEC_FUNCTION_NO_WORKERS. @default 10000 */
  readonly maxQueued?: number;
  /** How long a new worker's guest agent has to answer. @default 10000 */
  readonly connectTimeoutMs?: number;
}

export interface FncallSettings {
  readonly guestPath?: string;
  readonly maxTimeoutMs: number;
  readonly maxQueued: number;
  readonly connectTimeoutMs: number;
}

const optionsSchema = {
  $id: 'https://dsec.dev/schemas/plugins/backend-fncall.json',
  title: 'backend-fncall options',
  type: 'object',
  additionalProperties: false,
  properties: {
    guestPath: { type: 'string', pattern: '^/', description: 'The dsec-guest binary on the host (default: the one this package built).' },
    maxTimeoutMs: { type: 'integer', minimum: 1, maximum: 86_400_000, description: 'The longest timeout a task may ask for.' },
    maxQueued: { type: 'integer', minimum: 1, maximum: 1_000_000, description: 'Tasks a fleet queue holds at most.' },
    connectTimeoutMs: { type: 'integer', minimum: 100, maximum: 600_000, description: "How long a new worker's guest agent has to answer." },
  },
} as const;

/** Throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): FncallSettings {
  const parsed = checkPluginOptions<BackendFncallOptions>(PLUGIN_NAME, optionsSchema, options, { guestPath: 'must be an absolute path' });
  return {
    ...(parsed.guestPath !== undefined ? { guestPath: parsed.guestPath } : {}),
    maxTimeoutMs: parsed.maxTimeoutMs ?? 600_000,
    maxQueued: parsed.maxQueued ?? 10_000,
    connectTimeoutMs: parsed.connectTimeoutMs ?? 10_000,
  };
}

/** A fleet's pool settings, from its `backendOptions`. */
export interface PoolOptions {
  /** Size of each worker's /work tmpfs (the task's code and files). @default 64 */
  readonly workMiB: number;
  /** Size of each worker's /tmp tmpfs. @default 64 */
  readonly tmpMiB: number;
  /** stdout and stderr are each cut after this many bytes (`truncated`). @default 1 MiB */
  readonly outputCapBytes: number;
}

export const DEFAULT_POOL_OPTIONS: PoolOptions = Object.freeze({ workMiB: 64, tmpMiB: 64, outputCapBytes: 1024 * 1024 });
const MAX_SCRATCH_MIB = 16 * 1024;

/** The pool settings and every problem with `backendOptions` (each as `key: what it must be`). */
export function poolOptions(backendOptions: Readonly<Record<string, unknown>> | undefined): { options: PoolOptions; problems: { key: string; message: string }[] } {
  const given = backendOptions ?? {};
  const problems: { key: string; message: string }[] = [];
  const whole = (key: keyof PoolOptions, min: number, max: number): number => {
    const value = given[key];
    if (value === undefined) return DEFAULT_POOL_OPTIONS[key];
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
      problems.push({ key, message: `must be a whole number from ${min} to ${max}, not ${JSON.stringify(value)}` });
      return DEFAULT_POOL_OPTIONS[key];
    }
    return value;
  };
  const options = {
    workMiB: whole('workMiB', 1, MAX_SCRATCH_MIB),
    tmpMiB: whole('tmpMiB', 1, MAX_SCRATCH_MIB),
    outputCapBytes: whole('outputCapBytes', 0, MAX_EXEC_OUTPUT_BYTES),
  };
  for (const key of Object.keys(given)) {
    if (!(key in DEFAULT_POOL_OPTIONS)) problems.push({ key, message: `is not an option of the fncall backend (it has ${Object.keys(DEFAULT_POOL_OPTIONS).join(', ')})` });
  }
  return { options, problems };
}

/**
 * A worker is a container sandbox: runc's init and the first exec need room
 * inside the memory limit (the container backend's MIN_CONTAINER_MEMORY_MIB
 * says why), and the guest agent a little more.
 */
export const MIN_WORKER_MEMORY_MIB = 32;

/** Engine side: one located error per problem in an fncall fleet's backendOptions, and a memory limit too small for a worker. */
export function checkFleetOptions(config: ConfigModel): Diagnostic[] {
  const diagnostics: Diagnostic[] = [];
  for (const fleet of Object.values(config.fleets)) {
    if (fleet.backend !== BACKEND_KIND) continue;
    if (fleet.resources.memoryMiB < MIN_WORKER_MEMORY_MIB) {
      diagnostics.push({
        code: 'DSEC_CONFIG_INVALID_VALUE',
        severity: 'error',
        message:
          `fleet '${fleet.name}' asks for ${fleet.resources.memoryMiB}Mi of memory, but an fncall worker needs at least ` +
          `${MIN_WORKER_MEMORY_MIB}Mi to start; set resources.memory to ${MIN_WORKER_MEMORY_MIB}Mi or more`,
        path: `/fleets/${pointerToken(fleet.name)}/resources/memory`,
      });
    }
    for (const problem of poolOptions(fleet.backendOptions).problems) {
      diagnostics.push({
        code: 'DSEC_CONFIG_INVALID_VALUE',
        severity: 'error',
        message: `fleet '${fleet.name}': backendOptions.${problem.key} ${problem.message}`,
        path: `/fleets/${pointerToken(fleet.name)}/backendOptions/${pointerToken(problem.key)}`,
      });
    }
  }
  return diagnostics;
}

function pointerToken(name: string): string {
  return name.replaceAll('~', '~0').replaceAll('/', '~1');
}
