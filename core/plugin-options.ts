/**
 * Plugin options checked against the plugin's own JSON Schema, every problem
 * described in a sentence a user can act on and reported together as one
 * DSEC_PLUGIN_OPTIONS. Part of the public plugin API, so a plugin's
 * options.ts is its schema, its defaults and only the checks a schema cannot
 * say.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { DsecError } from './errors.js';

/** A plugin's options schema: a JSON Schema object (draft-07, as Ajv reads it). */
export type PluginOptionsSchema = Readonly<Record<string, unknown>>;

/**
 * Why an option's value is refused, keyed by the option's dotted path
 * (`root`, `cache.dir`, `overcommit.memory`), written as what the value must
 * be: `'must be an absolute path'`. It replaces the schema's rule in the
 * message for the rules a reader cannot guess the reason of (pattern, length,
 * format, range, multipleOf); type, enum, required and unknown keys are
 * described from the schema alone.
 */
export type PluginOptionHints = Readonly<Record<string, string>>;

/** Schemas are compiled once each: plugins are made per agent, per CLI run, per test. */
const compiled = new WeakMap<PluginOptionsSchema, ValidateFunction>();

function validatorFor(schema: PluginOptionsSchema): ValidateFunction {
  let validate = compiled.get(schema);
  if (!validate) {
    // One Ajv per schema: two plugins' schemas never share $ids or state.
    validate = new Ajv({ allErrors: true, verbose: true }).compile(schema as Record<string, unknown>);
    compiled.set(schema, validate);
  }
  return validate;
}

/** `overcommit.memory`, `layers[0]` from Ajv's JSON pointer `/overcommit/memory`, `/layers/0`. */
function optionPath(pointer: string): string {
  let path = '';
  for (const raw of pointer.split('/').slice(1)) {
    const part = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    path += /^\d+$/.test(part) ? `[${part}]` : `${path ? '.' : ''}${part}`;
  }
  return path;
}

/** A key as written in the message: bare when it reads as a name, JSON-quoted when not (a space, an empty key). */
function keyName(key: string): string {
  return /^[A-Za-z_$][\w$-]*$/.test(key) ? key : JSON.stringify(key);
}

function join(parent: string, key: string): string {
  return parent ? `${parent}.${keyName(key)}` : keyName(key);
}

function shown(value: unknown): string {
  return value === undefined ? 'nothing' : JSON.stringify(value) ?? String(value);
}

function article(type: string): string {
  if (type === 'null') return 'null';
  return `${/^[aeiou]/.test(type) ? 'an' : 'a'} ${type}`;
}

/** The schema's description as a parenthetical: first word lower-cased unless it is an acronym, no final period. */
function described(schema: unknown): string {
  const text = (schema as { description?: unknown } | undefined)?.description;
  if (typeof text !== 'string' || text.trim() === '') return '';
  const trimmed = text.trim().replace(/\.$/, '');
  const lowered = /^[A-Z][a-z]/.test(trimmed) ? trimmed[0]!.toLowerCase() + trimmed.slice(1) : trimmed;
  return ` (${lowered})`;
}

function propertiesOf(schema: unknown): Record<string, unknown> {
  const properties = (schema as { properties?: unknown } | undefined)?.properties;
  return properties && typeof properties === 'object' ? (properties as Record<string, unknown>) : {};
}

/** What a value that broke a range or form rule must be, when no hint says it better. */
function rule(error: ErrorObject): string {
  const limit = String(error.params.limit);
  switch (error.keyword) {
    case 'minimum':
      return error.params.limit === 0 ? 'must not be negative' : `must be at least ${limit}`;
    case 'maximum':
      return `must be at most ${limit}`;
    case 'exclusiveMinimum':
      return `must be more than ${limit}`;
    case 'exclusiveMaximum':
      return `must be less than ${limit}`;
    case 'multipleOf':
      return `must be a multiple of ${String(error.params.multipleOf)}`;
    case 'minLength':
      return error.params.limit === 1 ? 'must not be empty' : `must be at least ${limit} characters long`;
    case 'maxLength':
      return `must be at most ${limit} characters long`;
    case 'pattern':
      return `must match ${String(error.params.pattern)}`;
    case 'format':
      return `must be a ${String(error.params.format)}`;
    default:
      return error.message ?? 'is invalid';
  }
}

const HINTED = new Set(['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'multipleOf', 'minLength', 'maxLength', 'pattern', 'format']);

/** One Ajv error as a sentence naming the option, what it must be and what was given. */
function describeOptionError(error: ErrorObject, hints: PluginOptionHints = {}): string {
  const path = optionPath(error.instancePath);
  const subject = path ? `option ${path}` : 'options';
  const got = `, got ${shown(error.data)}`;
  switch (error.keyword) {
    case 'additionalProperties': {
      const unknown = join(path, String(error.params.additionalProperty));
      const known = Object.keys(propertiesOf(error.parentSchema)).join(', ') || 'none';
      return `unknown option ${unknown} (known${path ? ` in ${path}` : ''}: ${known})`;
    }
    case 'required': {
      const missing = String(error.params.missingProperty);
      return `option ${join(path, missing)} is required${described(propertiesOf(error.parentSchema)[missing])}`;
    }
    case 'type': {
      const types = String(error.params.type).split(',').map(article).join(' or ');
      return `${subject} must be ${types}${got}`;
    }
    case 'enum':
    case 'const': {
      const allowed = error.keyword === 'enum' ? (error.params.allowedValues as unknown[]) : [error.params.allowedValue];
      return `${subject} must be ${allowed.length === 1 ? '' : 'one of '}${allowed.map((value) => (typeof value === 'string' ? value : JSON.stringify(value))).join(', ')}${got}`;
    }
    default: {
      if (!HINTED.has(error.keyword)) return `${subject} ${error.message ?? 'is invalid'}`;
      const hint = hints[path];
      return hint ? `${subject} ${hint}${got}` : `${subject} ${rule(error)}${error.keyword === 'pattern' ? described(error.parentSchema) : ''}${got}`;
    }
  }
}

/**
 * Check a plugin's options against its schema and return them typed; a
 * missing options object (undefined, null) is `{}`. Throws
 * DSEC_PLUGIN_OPTIONS naming the plugin and listing every problem, each once,
 * in schema order. Defaults are the caller's to apply.
 */
export function checkPluginOptions<T>(plugin: string, schema: PluginOptionsSchema, options: unknown, hints: PluginOptionHints = {}): T {
  const value = options ?? {};
  const validate = validatorFor(schema);
  if (validate(value)) return value as T;
  const problems = [...new Set((validate.errors ?? []).map((error) => describeOptionError(error, hints)))];
  throw new DsecError('DSEC_PLUGIN_OPTIONS', { name: plugin, message: problems.join('; ') });
}
