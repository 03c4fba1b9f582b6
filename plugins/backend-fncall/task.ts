/**
 * An FnCall task, checked and turned into what a worker runs: which
 * interpreter, the program file's name, the files to write (decoded), and the
 * limits. Every problem is reported together as DSEC_FUNCTION_INVALID.
 * Pure: nothing here talks to a worker.
 */
import { posix } from 'node:path';
import { DsecError, type FunctionTask } from '../../core/plugin-api.js';
import type { PoolOptions } from './options.js';
import { WORK_DIR } from './shape.js';

export const DEFAULT_TASK_TIMEOUT_MS = 30_000;
/** Files a task may bring at most (each is one write over the guest socket). */
export const MAX_TASK_FILES = 1000;
const MAX_PATH = 4095;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The runtimes named by a word, and the extension their program file gets. */
export const NAMED_RUNTIMES: Readonly<Record<string, string>> = Object.freeze({ bash: 'sh', sh: 'sh', python3: 'py' });

/** An interpreter given by path: the program file's extension from its name (python3.11 -> py). */
const EXTENSIONS: readonly [RegExp, string][] = [
  [/^python/, 'py'],
  [/^(ba|da|a|z|k)?sh$/, 'sh'],
  [/^node(js)?$/, 'js'],
  [/^ruby/, 'rb'],
  [/^perl/, 'pl'],
  [/^php/, 'php'],
  [/^lua/, 'lua'],
];

export interface PreparedFile {
  /** Absolute, under WORK_DIR. */
  readonly path: string;
  readonly data: Buffer;
}

export interface PreparedTask {
  /** A name looked up in the worker's PATH, or an absolute path. */
  readonly interpreter: string;
  /** The program file, under WORK_DIR. */
  readonly program: string;
  /** The program first, then the task's files (the guest creates their folders). */
  readonly files: readonly PreparedFile[];
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly stdin?: Buffer;
  readonly timeoutMs: number;
}

export interface TaskLimits {
  readonly maxTimeoutMs: number;
  readonly pool: PoolOptions;
}

export function programName(runtime: string): string {
  const named = NAMED_RUNTIMES[runtime];
  const extension = named ?? EXTENSIONS.find(([pattern]) => pattern.test(posix.basename(runtime)))?.[1];
  return extension ? `main.${extension}` : 'main';
}

/** Check a task for `fleet`'s pool and prepare it; throws DSEC_FUNCTION_INVALID naming every problem. */
export function prepareTask(fleet: string, task: FunctionTask, limits: TaskLimits): PreparedTask {
  const problems: string[] = [];
  const input = task as unknown as Record<string, unknown>;
  const { runtime, code } = input;

  if (typeof runtime !== 'string' || runtime === '') problems.push('runtime must be a non-empty string');
  else if (runtime.startsWith('/')) {
    if (runtime.includes('\0') || posix.normalize(runtime) !== runtime || runtime.length > MAX_PATH) {
      problems.push(`runtime ${JSON.stringify(runtime)} must be a normalised absolute path (no '..', '.', '//')`);
    }
  } else if (!(runtime in NAMED_RUNTIMES)) {
    problems.push(`runtime ${JSON.stringify(runtime)} is not known: use ${Object.keys(NAMED_RUNTIMES).join(', ')} or an interpreter's absolute path`);
  }
  if (typeof code !== 'string') problems.push('code must be a string');

  const program = posix.join(WORK_DIR, programName(typeof runtime === 'string' ? runtime : ''));
  const files: PreparedFile[] = typeof code === 'string' ? [{ path: program, data: Buffer.from(code, 'utf8') }] : [];
  const dirs = new Set<string>();
  const given = input.files ?? {};
  if (typeof given !== 'object' || given === null || Array.isArray(given)) problems.push('files must be an object of relative path -> base64 content');
  else {
    const entries = Object.entries(given as Record<string, unknown>);
    if (entries.length > MAX_TASK_FILES) problems.push(`a task brings at most ${MAX_TASK_FILES} files, not ${entries.length}`);
    for (const [name, content] of entries.slice(0, MAX_TASK_FILES)) {
      const problem = checkRelativePath(name);
      if (problem) {
        problems.push(`files: ${JSON.stringify(name)} ${problem}`);
        continue;
      }
      if (typeof content !== 'string' || content.length % 4 !== 0 || !BASE64.test(content)) {
        problems.push(`files: ${JSON.stringify(name)} must be its content in base64`);
        continue;
      }
      const path = posix.join(WORK_DIR, name);
      if (path === program) {
        problems.push(`files: ${JSON.stringify(name)} is where the code goes; give the program as code`);
        continue;
      }
      files.push({ path, data: Buffer.from(content, 'base64') });
      for (let dir = posix.dirname(path); dir !== WORK_DIR; dir = posix.dirname(dir)) dirs.add(dir);
    }
  }
  // A file named like a folder another file needs (`a` and `a/b`) cannot be written.
  for (const file of files) if (dirs.has(file.path)) problems.push(`files: ${JSON.stringify(posix.relative(WORK_DIR, file.path))} is both a file and a folder of another file`);
  const bytes = files.reduce((sum, file) => sum + file.data.length, 0);
  const room = limits.pool.workMiB * 1024 * 1024;
  if (bytes > room) problems.push(`the code and files take ${bytes} bytes, more than the ${limits.pool.workMiB} MiB of ${WORK_DIR} (backendOptions.workMiB)`);

  const args = input.args ?? [];
  if (!Array.isArray(args) || args.some((arg) => typeof arg !== 'string' || arg.includes('\0'))) problems.push('args must be a list of strings without NUL bytes');
  const env = input.env ?? {};
  if (typeof env !== 'object' || env === null || Array.isArray(env)) problems.push('env must be an object of NAME -> string');
  else {
    for (const [name, value] of Object.entries(env as Record<string, unknown>)) {
      if (!ENV_NAME.test(name)) problems.push(`env: ${JSON.stringify(name)} is not a variable name`);
      else if (typeof value !== 'string' || value.includes('\0')) problems.push(`env: ${name} must be a string without NUL bytes`);
    }
  }
  const stdin = input.stdin;
  if (stdin !== undefined && typeof stdin !== 'string') problems.push('stdin must be a string');
  const timeoutMs = input.timeoutMs ?? DEFAULT_TASK_TIMEOUT_MS;
  if (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > limits.maxTimeoutMs) {
    problems.push(`timeoutMs must be a whole number from 1 to ${limits.maxTimeoutMs}, not ${JSON.stringify(input.timeoutMs)}`);
  }

  if (problems.length > 0) throw new DsecError('DSEC_FUNCTION_INVALID', { fleet, message: problems.join('; ') });
  return {
    interpreter: runtime as string,
    program,
    files,
    args: [...(args as string[])],
    env: { ...(env as Record<string, string>) },
    ...(typeof stdin === 'string' ? { stdin: Buffer.from(stdin, 'utf8') } : {}),
    timeoutMs: timeoutMs as number,
  };
}

/** Why `name` is not a file path relative to the task's folder (undefined when it is one). */
function checkRelativePath(name: string): string | undefined {
  if (name === '' || name.includes('\0') || name.length > MAX_PATH) return 'must be a non-empty path without NUL bytes';
  if (name.startsWith('/')) return 'must be relative to the task folder, not absolute';
  const parts = name.split('/');
  if (parts.some((part) => part === '..')) return "must not climb out with '..'";
  if (parts.some((part) => part === '' || part === '.')) return "must be normalised (no '.', '//' or trailing '/')";
  return undefined;
}
