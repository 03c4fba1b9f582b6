import { describe, expect, it } from 'vitest';
import { normalizeArgv } from '../../../core/cli/main.js';

describe('Terraform-style single-dash flags', () => {
  it('are rewritten to their double-dash spelling', () => {
    expect(normalizeArgv(['node', 'dsec', 'plan', '-out', 'x.plan', '-detailed-exitcode', '-refresh=false'])).toEqual([
      'node', 'dsec', 'plan', '--out', 'x.plan', '--detailed-exitcode', '--refresh=false',
    ]);
  });

  it('leave single-letter flags and everything after -- alone', () => {
    expect(normalizeArgv(['node', 'dsec', '-C', 'dir', 'sandbox', 'exec', 'id', '--', 'ls', '-la', '-name'])).toEqual([
      'node', 'dsec', '-C', 'dir', 'sandbox', 'exec', 'id', '--', 'ls', '-la', '-name',
    ]);
  });
});
