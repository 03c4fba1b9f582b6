/**
 * The shape a saved plan file must have before apply trusts it. It is the
 * in-memory Plan (core/plan.ts), not the `--json` rendering
 * (schemas/plan.schema.json), so it lives beside the code that reads it.
 * Strict on what apply reads (operations, desired, prior_state), loose on
 * display-only fields.
 */
const string = { type: 'string' } as const;
const count = { type: 'integer', minimum: 0 } as const;
const stringMap = { type: 'object', additionalProperties: string } as const;

const resources = {
  type: 'object',
  required: ['cpu', 'memoryMiB', 'pids'],
  properties: { cpu: { type: 'number' }, memoryMiB: { type: 'number' }, pids: { type: 'number' } },
} as const;

const ttl = {
  type: 'object',
  properties: { maxLifetimeSeconds: { type: 'number' }, idleStopSeconds: { type: 'number' } },
} as const;

const density = {
  type: 'object',
  required: ['memorySharing', 'reclaimOnPause'],
  properties: { memorySharing: { type: 'boolean' }, reclaimOnPause: { type: 'boolean' } },
} as const;

const layerRef = {
  type: 'object',
  required: ['name', 'version', 'digest'],
  properties: { name: string, version: string, digest: string },
} as const;

const sandboxSpec = {
  type: 'object',
  required: ['id', 'backend', 'layers', 'env', 'workdir', 'user', 'resources', 'network', 'qos', 'labels'],
  properties: {
    id: { type: 'string', pattern: '^[a-z0-9-]{1,63}$' },
    backend: string,
    layers: { type: 'array', items: layerRef },
    env: stringMap,
    workdir: string,
    user: string,
    resources,
    network: string,
    qos: string,
    labels: stringMap,
    ttl,
    density,
    placement: {
      type: 'object',
      required: ['strategy', 'nodeSelector'],
      properties: { strategy: { enum: ['spread', 'pack'] }, nodeSelector: stringMap },
    },
    backendOptions: { type: 'object' },
    image: { type: 'object', required: ['path', 'format'], properties: { path: string, format: { enum: ['qcow2', 'raw'] } } },
  },
} as const;

const operation = {
  type: 'object',
  required: ['op'],
  oneOf: [
    { properties: { op: { const: 'create' }, spec: sandboxSpec }, required: ['spec'] },
    { properties: { op: { const: 'delete' }, id: string, claimed: { type: 'boolean' }, because: string }, required: ['id'] },
    {
      properties: { op: { const: 'replace' }, id: string, spec: sandboxSpec, because: string, node: string },
      required: ['id', 'spec'],
    },
    { properties: { op: { const: 'update' }, id: string, resources, ttl, density, labels: stringMap }, required: ['id', 'resources'] },
  ],
} as const;

const sandboxState = {
  type: 'object',
  required: ['id', 'node', 'specHash', 'resources', 'createdAt'],
  properties: { id: string, node: string, specHash: string, resources, createdAt: string },
} as const;

const resourceChange = {
  type: 'object',
  required: ['address', 'type', 'name', 'action', 'reason', 'before', 'after', 'replacePaths'],
  properties: {
    address: string,
    type: { enum: ['layer', 'fleet'] },
    name: string,
    action: { enum: ['no-op', 'create', 'update', 'replace', 'delete'] },
    reason: { type: ['string', 'null'] },
    before: { type: ['object', 'null'] },
    after: { type: ['object', 'null'] },
    replacePaths: { type: 'array', items: { type: 'array', items: string } },
    fleet: {
      type: 'object',
      required: ['summary', 'maxUnavailable', 'operations'],
      properties: {
        summary: { type: 'object' },
        maxUnavailable: { type: 'integer', minimum: 1 },
        operations: { type: 'array', items: operation },
        adopt: { type: 'array', items: sandboxState },
        forget: { type: 'array', items: string },
        pool: {
          type: 'object',
          required: ['keep', 'revision'],
          properties: { keep: { type: 'object', additionalProperties: count }, revision: string },
        },
      },
    },
  },
} as const;

export const PLAN_FILE_SCHEMA: Record<string, unknown> = {
  type: 'object',
  required: ['format_version', 'dsec_version', 'mode', 'prior_state', 'resource_changes', 'warnings', 'desired'],
  properties: {
    format_version: { const: '1.0' },
    dsec_version: string,
    created_at: string,
    mode: { enum: ['normal', 'destroy'] },
    config_file: string,
    prior_state: {
      type: 'object',
      required: ['lineage', 'serial'],
      properties: { lineage: string, serial: count },
    },
    resource_changes: { type: 'array', items: resourceChange },
    warnings: { type: 'array', items: string },
    desired: {
      type: 'object',
      required: ['layers', 'fleets'],
      properties: {
        layers: {
          type: 'object',
          additionalProperties: {
            type: 'object',
            required: ['ref', 'name', 'version', 'kind', 'source', 'digest'],
            // Builds and published layers have no path; every other source has one.
            properties: {
              source: {
                type: 'object',
                required: ['type'],
                if: { properties: { type: { enum: ['build', 'published'] } } },
                then: { properties: { type: { enum: ['build', 'published'] } } },
                else: { required: ['path'] },
              },
            },
          },
        },
        fleets: {
          type: 'object',
          additionalProperties: {
            type: 'object',
            required: ['name', 'environment', 'backend', 'replicas', 'resources', 'layers', 'specHash', 'update'],
            properties: { layers: { type: 'array', items: layerRef }, resources },
          },
        },
      },
    },
  },
};
