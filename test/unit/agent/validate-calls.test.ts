/**
 * What the agent checks of a file call or an FnCall task before a backend
 * sees it: each problem with its code and words.
 */
import { describe, expect, it } from 'vitest';
import { checkFunctionTask, checkReadFileRequest, checkSandboxPath, checkWriteFileRequest } from '../../../core/agent/validate-calls.js';
import type { DsecError } from '../../../core/errors.js';
import { DEFAULT_READ_FILE_BYTES, MAX_FILE_BYTES } from '../../../core/live.js';

const thrown = (work: () => unknown): DsecError => {
  try {
    work();
  } catch (error) {
    return error as DsecError;
  }
  throw new Error('expected a throw');
};

describe('file call checks', () => {
  it('normalises an absolute path lexically and never climbs above the root', () => {
    expect(checkSandboxPath('b', '/a/./b/../c//d/')).toBe('/a/c/d');
    expect(checkSandboxPath('b', '/../../etc/passwd')).toBe('/etc/passwd');
  });

  it('refuses a relative path, the root itself and a NUL byte with DSEC_FILE_INVALID naming the sandbox and path', () => {
    const relative = thrown(() => checkSandboxPath('box', 'etc/passwd'));
    expect(relative.code).toBe('DSEC_FILE_INVALID');
    expect(relative.message).toBe('file etc/passwd in sandbox box: the path must be absolute');
    expect(thrown(() => checkSandboxPath('box', '/..')).message).toContain('names the root directory');
    expect(thrown(() => checkSandboxPath('box', '/a\0b')).message).toContain('NUL');
    expect(thrown(() => checkSandboxPath('box', undefined)).message).toBe('file undefined in sandbox box: the path must be absolute');
  });

  it('defaults maxBytes to 16 MiB and refuses one past the 32 MiB ceiling', () => {
    expect(checkReadFileRequest('b', { path: '/x' })).toEqual({ path: '/x', maxBytes: DEFAULT_READ_FILE_BYTES });
    const over = thrown(() => checkReadFileRequest('b', { path: '/x', maxBytes: MAX_FILE_BYTES + 1 }));
    expect(over.code).toBe('DSEC_AGENT_REQUEST');
    expect(over.message).toContain(`from 0 to ${MAX_FILE_BYTES}`);
  });

  it('takes base64 content with a mode (0o644 by default), and refuses bad base64, a bad mode and content over 32 MiB', () => {
    expect(checkWriteFileRequest('b', { path: '/x', data: 'aGk=' })).toEqual({ path: '/x', data: 'aGk=', mode: 0o644 });
    expect(thrown(() => checkWriteFileRequest('b', { path: '/x', data: 'not base64!' })).code).toBe('DSEC_FILE_INVALID');
    const mode = thrown(() => checkWriteFileRequest('b', { path: '/x', data: '', mode: 0o10000 }));
    expect(mode.message).toContain('mode must be permission bits from 0 to 0o7777');
    const groups = Math.floor(MAX_FILE_BYTES / 3) + 1;
    const big = thrown(() => checkWriteFileRequest('b', { path: '/x', data: 'AAAA'.repeat(groups) }));
    expect(big.code).toBe('DSEC_FILE_TOO_LARGE');
    expect(big.message).toBe(`file /x in sandbox b is ${groups * 3} bytes, more than the ${MAX_FILE_BYTES} asked for`);
  });
});

describe('function task checks', () => {
  it('keeps a well-formed task as it is, without fields it did not set', () => {
    expect(checkFunctionTask('f', { runtime: 'python3', code: 'print(1)' })).toEqual({ runtime: 'python3', code: 'print(1)' });
    const full = { runtime: 'bash', code: 'cat x', files: { x: 'aGk=' }, stdin: 'in', args: ['-v'], env: { A: '1' }, timeoutMs: 500 };
    expect(checkFunctionTask('f', full)).toEqual(full);
  });

  it('lists every problem of a malformed task at once under DSEC_FUNCTION_INVALID naming the fleet', () => {
    const bad = thrown(() => checkFunctionTask('graders', { runtime: '', code: 3, files: { x: 1 }, args: 'no', env: { 'A-B': 'x' }, timeoutMs: 0 }));
    expect(bad.code).toBe('DSEC_FUNCTION_INVALID');
    expect(bad.message).toBe(
      'the task for fleet graders is not valid: runtime must be a non-empty string; code must be a string; ' +
        'files must be an object of path -> base64 content; args must be a list of strings; env must be an object of NAME -> string; ' +
        'timeoutMs must be a whole number from 1 to 2147483647',
    );
  });
});
