import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERRORS, DsecError, formatMessage } from '../../core/errors.js';
import { DSEC_VERSION } from '../../core/version.js';

describe('the error catalogue', () => {
  const docs = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');

  it('documents every error code in docs/errors.md, with its cause and fix', () => {
    const undocumented = Object.keys(ERRORS).filter((code) => !docs.includes(`| \`${code}\` |`));
    expect(undocumented).toEqual([]);
  });

  it('documents no code the catalogue lacks', () => {
    const documented = [...docs.matchAll(/^\| `(DSEC_[A-Z_]+)` \|/gm)].map((m) => m[1]);
    expect(documented.filter((code) => !(code in ERRORS))).toEqual([]);
  });

  it('fills message templates and keeps unknown placeholders visible', () => {
    expect(formatMessage('DSEC_STATE_LOCKED', { holder: 'pid 12' })).toBe('the state is locked by pid 12');
    expect(new DsecError('DSEC_SANDBOX_NOT_FOUND', {}).message).toBe('no sandbox {id}');
  });
});

describe('the version', () => {
  it('matches package.json', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(DSEC_VERSION).toBe(pkg.version);
  });
});
