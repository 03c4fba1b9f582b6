/**
 * Checking what callers send the agent. The agent is the last line before a
 * runtime runs something, so it re-checks what the engine already validated
 * and reports every problem at once (DSEC_AGENT_REQUEST).
 */
import { DsecError } from '../errors.js';
import {
  DEFAULT_DENSITY,
  MAX_EXEC_OUTPUT_BYTES,
  MAX_EXEC_TIMEOUT_MS,
  RESERVED_LABEL_PREFIX,
  type DensitySettings,
  type DiskImageRef,
  type ExecRequest,
  type LayerRef,
  type SandboxSpec,
  type SandboxTarget,
  type SandboxTtl,
} from '../live.js';
import type { Resources } from '../model.js';

export const SANDBOX_ID_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;

export const DEFAULT_RESOURCES: Resources = Object.freeze({ cpu: 1, memoryMiB: 256, pids: 256 });

type Json = Record<string, unknown>;

function refuse(problems: string[]): never {
  throw new DsecError('DSEC_AGENT_REQUEST', { message: problems.join('; ') });
}

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringMap(value: unknown, name: string, problems: string[]): Record<string, string> {
  if (value === undefined) return {};
  if (!isObject(value) || Object.values(value).some((entry) => typeof entry !== 'string')) {
    problems.push(`${name} must be an object of strings`);
    return {};
  }
  return { ...(value as Record<string, string>) };
}

export function checkSandboxId(id: unknown): string {
  if (typeof id !== 'string' || !SANDBOX_ID_PATTERN.test(id)) {
    refuse([`sandbox id ${JSON.stringify(id)} must match ${SANDBOX_ID_PATTERN.source} (lower-case letters, digits, '-', at most 63)`]);
  }
  return id;
}

/** Resources from a partial input on top of `base`, each a positive number. */
export function checkResources(input: unknown, base: Resources = DEFAULT_RESOURCES, problems: string[] = []): Resources {
  if (input !== undefined && !isObject(input)) {
    problems.push('resources must be an object');
    return base;
  }
  const merged = { ...base, ...(input ?? {}) } as Json;
  const extra = Object.keys(merged).filter((key) => !['cpu', 'memoryMiB', 'pids'].includes(key));
  if (extra.length > 0) problems.push(`resources: unknown field(s) ${extra.join(', ')}`);
  const cpu = merged.cpu;
  const memoryMiB = merged.memoryMiB;
  const pids = merged.pids;
  if (typeof cpu !== 'number' || !(cpu > 0) || cpu > 1024) problems.push('resources.cpu must be a number > 0');
  if (typeof memoryMiB !== 'number' || !Number.isInteger(memoryMiB) || memoryMiB < 8) problems.push('resources.memoryMiB must be a whole number >= 8');
  if (typeof pids !== 'number' || !Number.isInteger(pids) || pids < 1) problems.push('resources.pids must be a whole number >= 1');
  return { cpu: cpu as number, memoryMiB: memoryMiB as number, pids: pids as number };
}

/** A complete SandboxSpec from what a caller sent, defaults filled. */
export function checkSpec(input: unknown): SandboxSpec {
  if (!isObject(input)) refuse(['spec must be an object']);
  const problems: string[] = [];
  const id = checkSandboxId(input.id);
  if (typeof input.backend !== 'string' || input.backend === '') problems.push('backend must be a non-empty string');
  const layers: LayerRef[] = [];
  if (!Array.isArray(input.layers)) problems.push('layers must be an array of {name, version, digest}');
  else {
    input.layers.forEach((layer, index) => {
      if (!isObject(layer) || typeof layer.name !== 'string' || typeof layer.version !== 'string' || typeof layer.digest !== 'string') {
        problems.push(`layers[${index}] must be {name, version, digest}`);
      } else layers.push({ name: layer.name, version: layer.version, digest: layer.digest });
    });
  }
  const workdir = input.workdir ?? '/';
  if (typeof workdir !== 'string' || !workdir.startsWith('/')) problems.push('workdir must be an absolute path');
  const user = input.user ?? 'root';
  if (typeof user !== 'string' || !/^[A-Za-z0-9_.][A-Za-z0-9_.-]*(:[A-Za-z0-9_.][A-Za-z0-9_.-]*)?$/.test(user)) {
    problems.push('user must be a name or uid, optionally :group');
  }
  const network = input.network ?? 'none';
  if (network !== 'none') problems.push(`network must be "none", not ${JSON.stringify(network)}`);
  const qos = input.qos ?? 'best-effort';
  if (qos !== 'best-effort' && qos !== 'latency-sensitive') problems.push('qos must be "best-effort" or "latency-sensitive"');
  const env = stringMap(input.env, 'env', problems);
  const badEnv = Object.keys(env).find((key) => !/^[A-Za-z_][A-Za-z0-9_]*$/.test(key));
  if (badEnv !== undefined) problems.push(`env name ${JSON.stringify(badEnv)} is not a valid variable name`);
  const labels = stringMap(input.labels, 'labels', problems);
  const resources = checkResources(input.resources, DEFAULT_RESOURCES, problems);
  const ttl = input.ttl === undefined ? undefined : checkTtl(input.ttl, problems);
  const density = input.density === undefined ? undefined : checkDensity(input.density, DEFAULT_DENSITY, problems);
  // The backend plugin validates its own options; the agent only checks they are an object.
  if (input.backendOptions !== undefined && !isObject(input.backendOptions)) problems.push('backendOptions must be an object');
  const image = input.image === undefined ? undefined : checkDiskImage(input.image, problems);
  if (problems.length > 0) refuse(problems);
  return {
    id,
    backend: input.backend as string,
    layers,
    env,
    workdir: workdir as string,
    user: user as string,
    resources,
    network: 'none',
    qos: qos as SandboxSpec['qos'],
    labels,
    ...(ttl !== undefined && Object.keys(ttl).length > 0 ? { ttl } : {}),
    ...(density !== undefined ? { density } : {}),
    ...(input.backendOptions !== undefined ? { backendOptions: { ...(input.backendOptions as Json) } } : {}),
    ...(image !== undefined ? { image } : {}),
  };
}

function checkDiskImage(input: unknown, problems: string[]): DiskImageRef | undefined {
  if (!isObject(input) || typeof input.path !== 'string' || !input.path.startsWith('/') || input.path.includes('\0')) {
    problems.push('image must be {path, format} with an absolute path');
    return undefined;
  }
  if (input.format !== 'qcow2' && input.format !== 'raw') {
    problems.push(`image.format must be "qcow2" or "raw", not ${JSON.stringify(input.format)}`);
    return undefined;
  }
  return { path: input.path, format: input.format };
}

/** The longest TTL or claim: ten years, far past any sandbox's life, and well inside a Date. */
export const MAX_TTL_SECONDS = 10 * 365 * 24 * 3600;

function checkSeconds(value: unknown, name: string, problems: string[]): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > MAX_TTL_SECONDS) {
    problems.push(`${name} must be a number of seconds > 0 and <= ${MAX_TTL_SECONDS}, not ${JSON.stringify(value)}`);
    return undefined;
  }
  return value;
}

/** `{maxLifetimeSeconds?, idleStopSeconds?}`; `{}` means no limits. */
export function checkTtl(input: unknown, problems: string[]): SandboxTtl {
  if (!isObject(input)) {
    problems.push('ttl must be an object {maxLifetimeSeconds?, idleStopSeconds?}');
    return {};
  }
  const extra = Object.keys(input).filter((key) => key !== 'maxLifetimeSeconds' && key !== 'idleStopSeconds');
  if (extra.length > 0) problems.push(`ttl: unknown field(s) ${extra.join(', ')}`);
  const maxLifetimeSeconds = checkSeconds(input.maxLifetimeSeconds, 'ttl.maxLifetimeSeconds', problems);
  const idleStopSeconds = checkSeconds(input.idleStopSeconds, 'ttl.idleStopSeconds', problems);
  return {
    ...(maxLifetimeSeconds !== undefined ? { maxLifetimeSeconds } : {}),
    ...(idleStopSeconds !== undefined ? { idleStopSeconds } : {}),
  };
}

/** Density switches from a partial input on top of `base`. */
export function checkDensity(input: unknown, base: DensitySettings, problems: string[]): DensitySettings {
  if (!isObject(input)) {
    problems.push('density must be an object {memorySharing?, reclaimOnPause?}');
    return base;
  }
  const extra = Object.keys(input).filter((key) => key !== 'memorySharing' && key !== 'reclaimOnPause');
  if (extra.length > 0) problems.push(`density: unknown field(s) ${extra.join(', ')}`);
  const merged = { ...base, ...input } as Json;
  for (const key of ['memorySharing', 'reclaimOnPause']) {
    if (typeof merged[key] !== 'boolean') problems.push(`density.${key} must be true or false`);
  }
  return { memorySharing: merged.memorySharing === true, reclaimOnPause: merged.reclaimOnPause !== false };
}

/** What `PATCH /v1/sandboxes/:id` asks of the sandboxes whose spec is `current`; see SandboxUpdate. */
export interface CheckedUpdate {
  readonly resources?: Resources;
  readonly ttl?: SandboxTtl;
  readonly density?: DensitySettings;
  readonly labels?: Record<string, string>;
}

export function checkSandboxUpdate(input: unknown, current: SandboxSpec): CheckedUpdate {
  if (!isObject(input)) refuse(['the update must be an object {resources?, ttl?, density?, labels?}']);
  const problems: string[] = [];
  const extra = Object.keys(input).filter((key) => !['resources', 'ttl', 'density', 'labels'].includes(key));
  if (extra.length > 0) problems.push(`unknown field(s) ${extra.join(', ')}: an update takes resources, ttl, density and labels`);
  const resources = input.resources === undefined ? undefined : checkResources(input.resources, current.resources, problems);
  const ttl = input.ttl === undefined ? undefined : checkTtl(input.ttl, problems);
  const base = current.density ?? DEFAULT_DENSITY;
  const density = input.density === undefined ? undefined : checkDensity(input.density, base, problems);
  if (density !== undefined && density.memorySharing !== base.memorySharing) {
    problems.push(
      `density.memorySharing cannot change on a live sandbox (its processes were started ${base.memorySharing ? 'with' : 'without'} merging): it forces a replace`,
    );
  }
  const labels = input.labels === undefined ? undefined : checkLabels(input.labels, 'labels', problems);
  if (problems.length > 0) refuse(problems);
  return { ...(resources ? { resources } : {}), ...(ttl ? { ttl } : {}), ...(density ? { density } : {}), ...(labels ? { labels } : {}) };
}

/** Labels a caller may set: strings, keys of 1 to 128 characters outside dsec's own `dsec.io/`, values of at most 256. */
export function checkLabels(input: unknown, name: string, problems: string[]): Record<string, string> {
  const labels = stringMap(input, name, problems);
  for (const [key, value] of Object.entries(labels)) {
    if (key.length < 1 || key.length > 128) problems.push(`${name}: key ${JSON.stringify(key.slice(0, 140))} must have 1 to 128 characters`);
    else if (key.startsWith(RESERVED_LABEL_PREFIX)) problems.push(`${name}: key ${key} is reserved (dsec.io/ labels are dsec's own)`);
    if (value.length > 256) problems.push(`${name}: the value of ${key} is over 256 characters`);
  }
  return labels;
}

export interface ClaimRequest {
  readonly holder: string;
  readonly ttlSeconds?: number;
}

export function checkClaimRequest(input: unknown): ClaimRequest {
  if (!isObject(input)) refuse(['the claim must be an object {holder, ttlSeconds?}']);
  const problems: string[] = [];
  const extra = Object.keys(input).filter((key) => key !== 'holder' && key !== 'ttlSeconds');
  if (extra.length > 0) problems.push(`unknown field(s) ${extra.join(', ')}: a claim takes holder and ttlSeconds`);
  const { holder } = input;
  if (typeof holder !== 'string' || holder.length < 1 || holder.length > 128 || holder.includes('\0')) {
    problems.push('holder must be a string of 1 to 128 characters');
  }
  const ttlSeconds = checkSeconds(input.ttlSeconds, 'ttlSeconds', problems);
  if (problems.length > 0) refuse(problems);
  return { holder: holder as string, ...(ttlSeconds !== undefined ? { ttlSeconds } : {}) };
}

/** A batch call's target: ids and/or a label selector, at least one of them non-empty (never "all" by omission). */
export function checkTarget(input: unknown): SandboxTarget {
  if (!isObject(input)) refuse(['the target must be an object {ids?, labels?}']);
  const problems: string[] = [];
  const extra = Object.keys(input).filter((key) => key !== 'ids' && key !== 'labels');
  if (extra.length > 0) problems.push(`unknown field(s) ${extra.join(', ')}: a target takes ids and labels`);
  const { ids } = input;
  if (ids !== undefined && (!Array.isArray(ids) || ids.some((id) => typeof id !== 'string'))) problems.push('ids must be an array of sandbox ids');
  const labels = input.labels === undefined ? undefined : stringMap(input.labels, 'labels', problems);
  const named = Array.isArray(ids) ? ids.length : 0;
  if (problems.length === 0 && named === 0 && Object.keys(labels ?? {}).length === 0) {
    problems.push('name the sandboxes: ids and/or labels (a batch call never means every sandbox)');
  }
  if (problems.length > 0) refuse(problems);
  const checkedIds = ((ids as string[] | undefined) ?? []).map(checkSandboxId);
  return { ...(checkedIds.length > 0 ? { ids: checkedIds } : {}), ...(labels && Object.keys(labels).length > 0 ? { labels } : {}) };
}

export { checkExecRequest } from './validate-exec.js';
