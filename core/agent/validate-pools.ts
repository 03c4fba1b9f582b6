/**
 * Checking what callers send the pool routes: a pool record (from the
 * engine), an acquire, a release, a renew. Every problem is reported at
 * once (DSEC_AGENT_REQUEST), as in validate.ts.
 */
import { DsecError } from '../errors.js';
import {
  LABEL_FLEET,
  LABEL_LINEAGE,
  type AcquireRequest,
  type PoolSpec,
  type ReleaseRequest,
  type RenewRequest,
} from '../live.js';
import { checkLabels, checkSpec, MAX_TTL_SECONDS } from './validate.js';

/** The longest an acquire may wait: an hour (a caller wanting longer asks again). */
export const MAX_ACQUIRE_WAIT_MS = 3_600_000;
const NAME = /^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$/;

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function refuse(problems: string[]): never {
  throw new DsecError('DSEC_AGENT_REQUEST', { message: problems.join('; ') });
}

function unknownFields(input: Json, known: readonly string[], what: string, problems: string[]): void {
  const extra = Object.keys(input).filter((key) => !known.includes(key));
  if (extra.length > 0) problems.push(`unknown field(s) ${extra.join(', ')}: ${what} takes ${known.join(', ')}`);
}

function checkHolder(value: unknown, problems: string[]): string {
  if (typeof value !== 'string' || value.length < 1 || value.length > 128 || value.includes('\0')) {
    problems.push('holder must be a string of 1 to 128 characters');
  }
  return value as string;
}

function checkSeconds(value: unknown, name: string, problems: string[]): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > MAX_TTL_SECONDS) {
    problems.push(`${name} must be a number of seconds > 0 and <= ${MAX_TTL_SECONDS}, not ${JSON.stringify(value)}`);
    return undefined;
  }
  return value;
}

/** `PUT /v1/pools/:fleet`: the record as the engine sends it; the template is checked as a sandbox spec. */
export function checkPoolSpec(fleetParam: string, input: unknown): PoolSpec {
  if (!isObject(input)) refuse(['the pool must be an object {fleet, lineage, template, ready, revision, maxClaimed?, claimTtlSeconds?}']);
  const problems: string[] = [];
  unknownFields(input, ['fleet', 'lineage', 'template', 'ready', 'maxClaimed', 'claimTtlSeconds', 'revision'], 'a pool', problems);
  const { fleet, lineage, ready, maxClaimed, revision } = input;
  if (typeof revision !== 'string' || revision.length < 1 || revision.length > 128) problems.push('revision must be a string of 1 to 128 characters');
  if (typeof fleet !== 'string' || !NAME.test(fleet)) problems.push('fleet must be a fleet name');
  else if (fleet !== fleetParam) problems.push(`fleet ${fleet} does not match the path's ${fleetParam}`);
  if (typeof lineage !== 'string' || lineage.length < 1 || lineage.length > 128) problems.push('lineage must be a non-empty string');
  if (typeof ready !== 'number' || !Number.isInteger(ready) || ready < 0 || ready > 100_000) problems.push('ready must be a whole number from 0 to 100000');
  if (maxClaimed !== undefined && (typeof maxClaimed !== 'number' || !Number.isInteger(maxClaimed) || maxClaimed < 0 || maxClaimed > 1_000_000)) {
    problems.push('maxClaimed must be a whole number from 0 to 1000000');
  }
  const claimTtlSeconds = checkSeconds(input.claimTtlSeconds, 'claimTtlSeconds', problems);
  let template: PoolSpec['template'] | undefined;
  if (!isObject(input.template)) problems.push('template must be a sandbox spec without an id');
  else if ('id' in input.template) problems.push('template must not have an id: each refill gets its own');
  else {
    try {
      const { id: _id, ...checked } = checkSpec({ ...input.template, id: 'pool-template' });
      template = checked;
    } catch (error) {
      problems.push(`template: ${(error as Error).message}`);
    }
  }
  // A refill must belong to the pool it refills: the planner and the pool find members by these labels.
  if (template && (template.labels[LABEL_FLEET] !== fleet || template.labels[LABEL_LINEAGE] !== lineage)) {
    problems.push(`template.labels must carry ${LABEL_FLEET}=${String(fleet)} and ${LABEL_LINEAGE}=${String(lineage)}`);
  }
  if (problems.length > 0 || !template) refuse(problems);
  return {
    fleet: fleet as string,
    lineage: lineage as string,
    template,
    ready: ready as number,
    revision: revision as string,
    ...(maxClaimed !== undefined ? { maxClaimed: maxClaimed as number } : {}),
    ...(claimTtlSeconds !== undefined ? { claimTtlSeconds } : {}),
  };
}

export function checkAcquireRequest(input: unknown): AcquireRequest {
  if (!isObject(input)) refuse(['the acquire must be an object {holder, ttlSeconds?, labels?, waitMs?, lineage?}']);
  const problems: string[] = [];
  unknownFields(input, ['holder', 'ttlSeconds', 'labels', 'waitMs', 'lineage'], 'an acquire', problems);
  const holder = checkHolder(input.holder, problems);
  const ttlSeconds = checkSeconds(input.ttlSeconds, 'ttlSeconds', problems);
  const labels = input.labels === undefined ? undefined : checkLabels(input.labels, 'labels', problems);
  const { waitMs, lineage } = input;
  if (waitMs !== undefined && (typeof waitMs !== 'number' || !Number.isInteger(waitMs) || waitMs < 0 || waitMs > MAX_ACQUIRE_WAIT_MS)) {
    problems.push(`waitMs must be a whole number from 0 to ${MAX_ACQUIRE_WAIT_MS}`);
  }
  if (lineage !== undefined && (typeof lineage !== 'string' || lineage.length === 0)) problems.push('lineage must be a non-empty string');
  if (problems.length > 0) refuse(problems);
  return {
    holder,
    ...(ttlSeconds !== undefined ? { ttlSeconds } : {}),
    ...(labels && Object.keys(labels).length > 0 ? { labels } : {}),
    ...(waitMs !== undefined ? { waitMs: waitMs as number } : {}),
    ...(lineage !== undefined ? { lineage: lineage as string } : {}),
  };
}

export function checkReleaseRequest(input: unknown): ReleaseRequest {
  if (input === undefined) return {};
  if (!isObject(input)) refuse(['the release must be an object {keep?, holder?}']);
  const problems: string[] = [];
  unknownFields(input, ['keep', 'holder'], 'a release', problems);
  if (input.keep !== undefined && typeof input.keep !== 'boolean') problems.push('keep must be true or false');
  const holder = input.holder === undefined ? undefined : checkHolder(input.holder, problems);
  if (problems.length > 0) refuse(problems);
  return { ...(input.keep === true ? { keep: true } : {}), ...(holder !== undefined ? { holder } : {}) };
}

export function checkRenewRequest(input: unknown): RenewRequest {
  if (!isObject(input)) refuse(['the renew must be an object {holder, ttlSeconds}']);
  const problems: string[] = [];
  unknownFields(input, ['holder', 'ttlSeconds'], 'a renew', problems);
  const holder = checkHolder(input.holder, problems);
  const ttlSeconds = checkSeconds(input.ttlSeconds, 'ttlSeconds', problems);
  if (ttlSeconds === undefined && input.ttlSeconds === undefined) problems.push('ttlSeconds is required: how long the claim lasts from now');
  if (problems.length > 0) refuse(problems);
  return { holder, ttlSeconds: ttlSeconds! };
}

/** An optional `holder` a call into a sandbox names (exec, files, sessions): its calls are refused on a sandbox it does not hold. */
export function checkCallHolder(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  const problems: string[] = [];
  const holder = checkHolder(value, problems);
  if (problems.length > 0) refuse(problems);
  return holder;
}
