/**
 * FnCall tasks checked and prepared (pure): runtimes and their program file,
 * files decoded under /work, limits, and every problem named together in one
 * DSEC_FUNCTION_INVALID. Also the fleet's backendOptions.
 */
import { describe, expect, it } from 'vitest';
import type { ConfigModel, FunctionTask } from '../../../core/plugin-api.js';
import { checkFleetOptions, DEFAULT_POOL_OPTIONS, poolOptions } from '../../../plugins/backend-fncall/options.js';
import { prepareTask, programName } from '../../../plugins/backend-fncall/task.js';

const limits = { maxTimeoutMs: 60_000, pool: DEFAULT_POOL_OPTIONS };
const b64 = (text: string) => Buffer.from(text).toString('base64');

function caught(task: unknown): { code?: string; message: string } {
  try {
    prepareTask('fn', task as FunctionTask, limits);
  } catch (error) {
    return error as { code?: string; message: string };
  }
  throw new Error('the task was accepted');
}

describe('preparing a task', () => {
  it('writes the code to /work/main.<ext> for its runtime and passes args, env, stdin and the default timeout', () => {
    const task = prepareTask('fn', { runtime: 'python3', code: 'print(1)', args: ['a'], env: { MODE: 'x' }, stdin: 'in' }, limits);
    expect(task).toEqual({
      interpreter: 'python3',
      program: '/work/main.py',
      files: [{ path: '/work/main.py', data: Buffer.from('print(1)') }],
      args: ['a'],
      env: { MODE: 'x' },
      stdin: Buffer.from('in'),
      timeoutMs: 30_000,
    });
  });

  it('names the program file after the runtime, an interpreter path by its file name', () => {
    expect(programName('bash')).toBe('main.sh');
    expect(programName('sh')).toBe('main.sh');
    expect(programName('/usr/bin/python3.11')).toBe('main.py');
    expect(programName('/usr/local/bin/node')).toBe('main.js');
    expect(programName('/opt/tools/interp')).toBe('main');
  });

  it('decodes the files under /work, in nested folders too', () => {
    const task = prepareTask('fn', { runtime: 'sh', code: 'cat data/in.txt', files: { 'data/in.txt': b64('hello'), 'x.bin': b64('\u0000\u0001') } }, limits);
    expect(task.files.map((file) => [file.path, file.data.toString()])).toEqual([
      ['/work/main.sh', 'cat data/in.txt'],
      ['/work/data/in.txt', 'hello'],
      ['/work/x.bin', '\u0000\u0001'],
    ]);
  });

  it('refuses file paths that are absolute, climb out, are not normalised, or clash', () => {
    const error = caught({
      runtime: 'sh',
      code: '',
      files: { '/etc/passwd': b64('x'), '../up': b64('x'), 'a/../../b': b64('x'), 'a//b': b64('x'), './c': b64('x'), 'main.sh': b64('x'), d: b64('x'), 'd/e': b64('x'), f: 'not base64!' },
    });
    expect(error.code).toBe('DSEC_FUNCTION_INVALID');
    expect(error.message).toBe(
      'the task for fleet fn is not valid: ' +
        [
          'files: "/etc/passwd" must be relative to the task folder, not absolute',
          `files: "../up" must not climb out with '..'`,
          `files: "a/../../b" must not climb out with '..'`,
          `files: "a//b" must be normalised (no '.', '//' or trailing '/')`,
          `files: "./c" must be normalised (no '.', '//' or trailing '/')`,
          'files: "main.sh" is where the code goes; give the program as code',
          'files: "f" must be its content in base64',
          'files: "d" is both a file and a folder of another file',
        ].join('; '),
    );
  });

  it('refuses an unknown runtime name, a relative or unnormalised interpreter path, and a bad timeout, args or env, all at once', () => {
    const error = caught({ runtime: 'ruby', code: 1, args: ['ok', 2], env: { '1BAD': 'x', OK: 3 }, timeoutMs: 120_000, stdin: 5 });
    expect(error.code).toBe('DSEC_FUNCTION_INVALID');
    expect(error.message).toBe(
      'the task for fleet fn is not valid: ' +
        [
          'runtime "ruby" is not known: use bash, sh, python3 or an interpreter\'s absolute path',
          'code must be a string',
          'args must be a list of strings without NUL bytes',
          'env: "1BAD" is not a variable name',
          'env: OK must be a string without NUL bytes',
          'stdin must be a string',
          'timeoutMs must be a whole number from 1 to 60000, not 120000',
        ].join('; '),
    );
    expect(caught({ runtime: '/usr/bin/../bin/sh', code: '' }).message).toContain(`runtime "/usr/bin/../bin/sh" must be a normalised absolute path`);
    expect(caught({ runtime: 'sh', code: '', timeoutMs: 0 }).message).toContain('timeoutMs must be a whole number from 1 to 60000, not 0');
  });

  it("refuses code and files bigger than the fleet's /work", () => {
    const small = { maxTimeoutMs: 60_000, pool: { ...DEFAULT_POOL_OPTIONS, workMiB: 1 } };
    const big = Buffer.alloc(1024 * 1024).toString('base64');
    expect(() => prepareTask('fn', { runtime: 'sh', code: 'x', files: { big } }, small)).toThrow(
      'the code and files take 1048577 bytes, more than the 1 MiB of /work (backendOptions.workMiB)',
    );
  });
});

describe("a fleet's backendOptions", () => {
  it('fill defaults and name each bad or unknown key', () => {
    expect(poolOptions(undefined)).toEqual({ options: DEFAULT_POOL_OPTIONS, problems: [] });
    expect(poolOptions({ workMiB: 8, outputCapBytes: 100 }).options).toEqual({ workMiB: 8, tmpMiB: 64, outputCapBytes: 100 });
    expect(poolOptions({ workMiB: 0, tmpMiB: 'big', colour: 'red' }).problems).toEqual([
      { key: 'workMiB', message: 'must be a whole number from 1 to 16384, not 0' },
      { key: 'tmpMiB', message: 'must be a whole number from 1 to 16384, not "big"' },
      { key: 'colour', message: 'is not an option of the fncall backend (it has workMiB, tmpMiB, outputCapBytes)' },
    ]);
  });

  it('are checked at plan time with a located error, beside a memory limit too small for a worker', () => {
    const fleet = (name: string, backend: string, memoryMiB: number, backendOptions?: Record<string, unknown>) => ({
      name,
      backend,
      resources: { cpu: 1, memoryMiB, pids: 64 },
      ...(backendOptions ? { backendOptions } : {}),
    });
    const config = {
      fleets: { fn: fleet('fn', 'fncall', 16, { outputCapBytes: -1 }), web: fleet('web', 'container', 16, { outputCapBytes: -1 }) },
    } as unknown as ConfigModel;
    expect(checkFleetOptions(config)).toEqual([
      {
        code: 'DSEC_CONFIG_INVALID_VALUE',
        severity: 'error',
        message: "fleet 'fn' asks for 16Mi of memory, but an fncall worker needs at least 32Mi to start; set resources.memory to 32Mi or more",
        path: '/fleets/fn/resources/memory',
      },
      {
        code: 'DSEC_CONFIG_INVALID_VALUE',
        severity: 'error',
        message: "fleet 'fn': backendOptions.outputCapBytes must be a whole number from 0 to 33554432, not -1",
        path: '/fleets/fn/backendOptions/outputCapBytes',
      },
    ]);
  });
});
