/**
 * density-admission's options, their JSON Schema and readable validation
 * errors. Defaults follow what agent sandboxes do: they use a sliver of the
 * CPU they ask for (CPU 20x) but hold their memory (memory 1x), and the host
 * keeps 512 MiB for itself and the agent.
 */
import { Ajv, type ErrorObject } from 'ajv';
import { DsecError, type OvercommitPolicy } from '../../core/plugin-api.js';

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

const validate = new Ajv({ allErrors: true, verbose: true }).compile<DensityAdmissionOptions>(optionsSchema);

const KNOWN: Readonly<Record<string, string>> = {
  '': 'enabled, overcommit, reserve',
  overcommit: 'cpu, memory',
  reserve: 'cpu, memoryMiB',
};

function describe(error: ErrorObject): string {
  const field = error.instancePath.replace(/^\//, '').replace(/\//g, '.');
  switch (error.keyword) {
    case 'additionalProperties': {
      const name = field ? `${field}.${String(error.params.additionalProperty)}` : String(error.params.additionalProperty);
      return `unknown option ${name} (known${field ? ` in ${field}` : ''}: ${KNOWN[field] ?? ''})`;
    }
    case 'minimum':
      return field.startsWith('overcommit.')
        ? `overcommit ratio ${field} must be at least 1 (requests up to ${field.slice('overcommit.'.length)} capacity x ratio; below 1 would admit less than the machine has), got ${String(error.data)}`
        : `${field} must not be negative, got ${String(error.data)}`;
    case 'type':
      return field === '' ? 'options must be an object' : `option ${field} must be a ${String(error.params.type)}`;
    default:
      return `option ${field || '(options)'} ${error.message ?? 'is invalid'}`;
  }
}

/** The policy the options ask for, defaults filled; throws DSEC_PLUGIN_OPTIONS listing every problem. */
export function parseOptions(options: unknown): { enabled: boolean; policy: OvercommitPolicy } {
  const value = options ?? {};
  if (!validate(value)) {
    const problems = (validate.errors ?? []).map(describe);
    throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: PLUGIN_NAME, message: problems.join('; ') });
  }
  return {
    enabled: value.enabled ?? true,
    policy: {
      overcommit: { ...DEFAULT_POLICY.overcommit, ...value.overcommit },
      reserve: { ...DEFAULT_POLICY.reserve, ...value.reserve },
    },
  };
}
