/**
 * checkPluginOptions: one schema, every kind of refusal described from the
 * schema (known keys, limits, allowed values, descriptions) or a hint.
 */
import { describe, expect, it } from 'vitest';
import { checkPluginOptions, DsecError, isDsecError } from '../../../core/plugin-api.js';

interface ExampleOptions {
  readonly root?: string;
  readonly mode?: 'fast' | 'small';
  readonly workers?: number;
  readonly ratio?: number;
  readonly reserve?: number;
  readonly name?: string;
  readonly cache?: { readonly dir: string; readonly maxBytes?: number };
}

const schema = {
  $id: 'https://dsec.dev/schemas/plugins/example.json',
  type: 'object',
  additionalProperties: false,
  properties: {
    root: { type: 'string', minLength: 1, pattern: '^/' },
    mode: { enum: ['fast', 'small'] },
    workers: { type: 'integer', minimum: 1, maximum: 64 },
    ratio: { type: 'number', exclusiveMinimum: 0 },
    reserve: { type: 'number', minimum: 0 },
    name: { type: 'string', pattern: '^[a-z]+$', description: 'Lower-case letters only.' },
    cache: {
      type: 'object',
      additionalProperties: false,
      required: ['dir'],
      properties: {
        dir: { type: 'string', pattern: '^/', description: 'The cache folder, absolute.' },
        maxBytes: { type: ['integer', 'null'], minimum: 0 },
      },
    },
  },
} as const;

const hints = { root: 'must be an absolute path', 'cache.dir': 'must be an absolute path' };

/** The problems of one refusal, in order. */
function problems(options: unknown): string[] {
  try {
    checkPluginOptions<ExampleOptions>('example', schema, options, hints);
  } catch (error) {
    if (!isDsecError(error, 'DSEC_PLUGIN_OPTIONS')) throw error;
    const prefix = 'plugin example has invalid options: ';
    expect(error.message.startsWith(prefix)).toBe(true);
    return error.message.slice(prefix.length).split('; ');
  }
  throw new Error('expected DSEC_PLUGIN_OPTIONS');
}

describe('checkPluginOptions', () => {
  it('returns valid options as they are, and an empty object for missing options', () => {
    const options = { root: '/srv', mode: 'fast', workers: 4, cache: { dir: '/c', maxBytes: null } };
    expect(checkPluginOptions<ExampleOptions>('example', schema, options)).toBe(options);
    expect(checkPluginOptions<ExampleOptions>('example', schema, undefined)).toEqual({});
    expect(checkPluginOptions<ExampleOptions>('example', schema, null)).toEqual({});
  });

  it('names an unknown option with the known keys at its level, at the top and nested', () => {
    expect(problems({ rooot: '/x', cache: { dir: '/c', size: 1 } })).toEqual([
      'unknown option rooot (known: root, mode, workers, ratio, reserve, name, cache)',
      'unknown option cache.size (known in cache: dir, maxBytes)',
    ]);
  });

  it('quotes an unknown key that does not read as a name', () => {
    expect(problems({ 'my root': '/x' })).toEqual(['unknown option "my root" (known: root, mode, workers, ratio, reserve, name, cache)']);
  });

  it('says which option is required, with its description', () => {
    expect(problems({ cache: {} })).toEqual(['option cache.dir is required (the cache folder, absolute)']);
  });

  it('says the type wanted and what was given, for options and for the options object itself', () => {
    expect(problems({ workers: '4', cache: 'yes' })).toEqual([
      'option workers must be an integer, got "4"',
      'option cache must be an object, got "yes"',
    ]);
    expect(problems({ cache: { dir: '/c', maxBytes: 'big' } })).toEqual(['option cache.maxBytes must be an integer or null, got "big"']);
    expect(problems(5)).toEqual(['options must be an object, got 5']);
    expect(problems([])).toEqual(['options must be an object, got []']);
  });

  it('gives the limit and the value of a number out of range', () => {
    expect(problems({ workers: 0, ratio: 0, reserve: -1 })).toEqual([
      'option workers must be at least 1, got 0',
      'option ratio must be more than 0, got 0',
      'option reserve must not be negative, got -1',
    ]);
    expect(problems({ workers: 65 })).toEqual(['option workers must be at most 64, got 65']);
  });

  it('lists the allowed values of an enum', () => {
    expect(problems({ mode: 'slow' })).toEqual(['option mode must be one of fast, small, got "slow"']);
  });

  it('says a pattern through the hint for that option path, once even when the length fails too', () => {
    expect(problems({ root: 'srv', cache: { dir: 'c' } })).toEqual([
      'option root must be an absolute path, got "srv"',
      'option cache.dir must be an absolute path, got "c"',
    ]);
    expect(problems({ root: '' })).toEqual(['option root must be an absolute path, got ""']);
  });

  it('falls back to the pattern and the description when no hint is given', () => {
    expect(problems({ name: 'Web' })).toEqual(['option name must match ^[a-z]+$ (lower-case letters only), got "Web"']);
  });

  it('lists every problem of the options in one DsecError', () => {
    const error = (() => {
      try {
        checkPluginOptions('example', schema, { mode: 'slow', workers: 100, extra: true });
      } catch (caught) {
        return caught;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(DsecError);
    expect(error).toMatchObject({
      code: 'DSEC_PLUGIN_OPTIONS',
      message:
        'plugin example has invalid options: unknown option extra (known: root, mode, workers, ratio, reserve, name, cache); ' +
        'option mode must be one of fast, small, got "slow"; option workers must be at most 64, got 100',
    });
  });

  it('checks the same schema again without compiling it twice (its $id stays usable)', () => {
    for (let i = 0; i < 3; i++) expect(problems({ workers: 0 })).toEqual(['option workers must be at least 1, got 0']);
  });
});
