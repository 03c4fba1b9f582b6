/**
 * Turns ajv's raw errors into messages a person can act on: what was
 * expected, what was found, and where. Three rules do most of the work:
 *
 * - a schema node's `errorMessage` is the "expected ..." phrase;
 * - for `oneOf`/`anyOf`, the branch the value was evidently aiming at (the
 *   one whose single required key is present, or whose type matches) speaks
 *   alone; when no branch fits, one message lists the choices, instead of
 *   the wall of errors from every branch;
 * - unknown properties get a "did you mean".
 */
import type { ErrorObject } from 'ajv';
import type { ErrorCode } from '../errors.js';
import { childPointer, parsePointer } from './pointer.js';
import { error, type Problem } from './problems.js';
import { describeValue, didYouMean } from './suggest.js';

type SchemaNode = Record<string, unknown> & {
  errorMessage?: string;
  properties?: Record<string, SchemaNode>;
  required?: string[];
  type?: string | string[];
};

export function humanizeSchemaErrors(
  errors: readonly ErrorObject[],
  sourceText?: (path: string) => string | undefined,
): Problem[] {
  const kept = dropOtherBranches(errors.filter((e) => e.keyword !== 'propertyNames'));
  const got = (path: string, value: unknown) => sourceText?.(path) ?? describeValue(value);
  return kept.map((e) => toProblem(e, got));
}

/** Resolve oneOf/anyOf errors to the branch the value aimed at, or to one summary. */
function dropOtherBranches(errors: ErrorObject[]): ErrorObject[] {
  const dropped = new Set<ErrorObject>();
  const choices = errors
    .filter((e) => e.keyword === 'oneOf' || e.keyword === 'anyOf')
    .sort((a, b) => a.schemaPath.length - b.schemaPath.length);
  for (const choice of choices) {
    if (dropped.has(choice)) continue;
    const branches = (choice.schema ?? []) as SchemaNode[];
    const picked = pickBranch(branches, choice.data);
    const prefix = `${choice.schemaPath}/`;
    for (const other of errors) {
      if (!other.schemaPath.startsWith(prefix) || !other.instancePath.startsWith(choice.instancePath)) continue;
      const keep = picked !== undefined && other.schemaPath.startsWith(`${prefix}${picked}/`);
      if (!keep) dropped.add(other);
    }
    if (picked !== undefined) dropped.add(choice);
  }
  return errors.filter((e) => !dropped.has(e));
}

function pickBranch(branches: readonly SchemaNode[], value: unknown): number | undefined {
  const keyed = branches.every((b) => Array.isArray(b.required) && b.required.length === 1);
  if (keyed && isObject(value)) {
    const present = branches.flatMap((b, index) => (b.required![0] in value ? [index] : []));
    return present.length === 1 ? present[0] : undefined;
  }
  const typed = branches.flatMap((b, index) => (typeFits(b.type, value) ? [index] : []));
  return typed.length === 1 ? typed[0] : undefined;
}

function typeFits(type: SchemaNode['type'], value: unknown): boolean {
  const types = type === undefined ? [] : Array.isArray(type) ? type : [type];
  return types.some((t) => {
    if (t === 'integer' || t === 'number') return typeof value === 'number';
    if (t === 'object') return isObject(value);
    if (t === 'array') return Array.isArray(value);
    if (t === 'null') return value === null;
    return typeof value === t;
  });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function toProblem(e: ErrorObject, got: (path: string, value: unknown) => string): Problem {
  const parent = (e.parentSchema ?? {}) as SchemaNode;
  const expected = parent.errorMessage;
  const params = e.params as Record<string, unknown>;

  if (e.propertyName !== undefined) return nameProblem(e, expected);

  if (e.keyword === 'additionalProperties') {
    const name = String(params.additionalProperty);
    const known = Object.keys(parent.properties ?? {});
    const hint = didYouMean(name, known) || (known.length > 0 ? ` (expected one of: ${known.join(', ')})` : '');
    return error('DSEC_CONFIG_UNKNOWN_PROPERTY', childPointer(e.instancePath, name), `unknown property '${name}'${hint}`, 'key');
  }

  if (e.keyword === 'required') {
    const name = String(params.missingProperty);
    const wanted = parent.properties?.[name]?.errorMessage ?? describeSchema(parent.properties?.[name]);
    const detail = wanted ? `: ${wanted}` : '';
    return error('DSEC_CONFIG_MISSING_PROPERTY', e.instancePath, `missing required property '${name}'${detail}`);
  }

  const code: ErrorCode = 'DSEC_CONFIG_INVALID_VALUE';
  const found = got(e.instancePath, e.data);
  if (e.keyword === 'enum') {
    const allowed = (params.allowedValues as unknown[]).map((v) => `'${String(v)}'`).join(', ');
    return error(code, e.instancePath, `expected one of ${allowed}, got ${found}`);
  }
  if (expected) return error(code, e.instancePath, `${expected}, got ${found}${quoteHint(e, parent)}`);
  return error(code, e.instancePath, `${genericExpectation(e)}, got ${found}`);
}

/** A bad key under layers/environments/fleets, env or labels: say what a name may be. */
function nameProblem(e: ErrorObject, expected: string | undefined): Problem {
  const name = String(e.propertyName);
  const segments = parsePointer(e.instancePath);
  const section = segments[segments.length - 1] ?? '';
  const what = NAME_KIND[section] ?? 'key';
  const shown = name.length > 40 ? `'${name.slice(0, 20)}...' (${name.length} characters)` : `'${name}'`;
  const message = `invalid ${what} ${shown}: ${expected ?? genericExpectation(e)}`;
  return error('DSEC_CONFIG_INVALID_NAME', childPointer(e.instancePath, name), message, 'key');
}

const NAME_KIND: Record<string, string> = {
  layers: 'layer name',
  environments: 'environment name',
  fleets: 'fleet name',
  env: 'environment variable name',
  labels: 'label key',
};

/**
 * YAML reads `8080` or `true` as a number or boolean; a string field then
 * needs quotes. Only said when the quoted value would be right (quoting
 * `version: 1.0` would not make it a semantic version).
 */
function quoteHint(e: ErrorObject, parent: SchemaNode): string {
  const wantsString = parent.type === 'string';
  const isScalar = typeof e.data === 'number' || typeof e.data === 'boolean';
  const pattern = typeof parent.pattern === 'string' ? new RegExp(parent.pattern, 'u') : undefined;
  const quotedFits = !pattern || pattern.test(String(e.data));
  return e.keyword === 'type' && wantsString && isScalar && quotedFits && !/quote/.test(parent.errorMessage ?? '')
    ? ' (quote it to make it a string)'
    : '';
}

function describeSchema(node: SchemaNode | undefined): string {
  if (!node) return '';
  if (Array.isArray(node.enum)) return `one of ${(node.enum as unknown[]).map((v) => `'${String(v)}'`).join(', ')}`;
  const description = typeof node.description === 'string' ? node.description : '';
  return description ? description.replace(/\.$/, '') : '';
}

function genericExpectation(e: ErrorObject): string {
  const p = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case 'type':
      return `expected ${article(String(p.type))}`;
    case 'const':
      return `expected ${JSON.stringify(p.allowedValue)}`;
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum':
      return `expected a number ${String(p.comparison)} ${String(p.limit)}`;
    case 'minLength':
      return p.limit === 1 ? 'expected a non-empty string' : `expected at least ${String(p.limit)} characters`;
    case 'maxLength':
      return `expected at most ${String(p.limit)} characters`;
    case 'minItems':
      return `expected at least ${String(p.limit)} item(s)`;
    case 'pattern':
      return `expected a string matching ${String(p.pattern)}`;
    case 'oneOf':
    case 'anyOf':
      return 'expected one of the allowed forms';
    default:
      return `expected a value that ${e.message ?? 'matches the schema'}`;
  }
}

function article(type: string): string {
  const names: Record<string, string> = {
    object: 'a mapping',
    array: 'a list',
    string: 'a string',
    integer: 'an integer',
    number: 'a number',
    boolean: 'true or false',
    null: 'nothing',
  };
  return type
    .split(',')
    .map((t) => names[t] ?? t)
    .join(' or ');
}
