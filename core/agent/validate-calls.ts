/**
 * Checking file calls and FnCall tasks before a backend sees them. Paths are
 * normalised lexically (`/a/../b` is `/b`; nothing climbs above `/`); where
 * they then lead inside the sandbox (symlinks) is the backend's to resolve,
 * inside the sandbox's own root.
 */
import { posix } from 'node:path';
import { DsecError } from '../errors.js';
import { DEFAULT_READ_FILE_BYTES, MAX_EXEC_TIMEOUT_MS, MAX_FILE_BYTES, type FunctionTask, type ReadFileRequest, type WriteFileRequest } from '../live.js';

type Json = Record<string, unknown>;

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** An absolute path inside the sandbox, normalised; not `/` itself. */
export function checkSandboxPath(id: string, input: unknown): string {
  const shown = typeof input === 'string' ? input : JSON.stringify(input);
  const invalid = (message: string) => new DsecError('DSEC_FILE_INVALID', { id, path: shown, message });
  if (typeof input !== 'string' || !input.startsWith('/')) throw invalid('the path must be absolute');
  if (input.includes('\0')) throw invalid('the path must not hold NUL bytes');
  if (input.length > 4095) throw invalid('the path is longer than 4095 characters');
  const normal = posix.normalize(input).replace(/\/+$/, '');
  if (normal === '') throw invalid('the path names the root directory, not a file');
  return normal;
}

export function checkReadFileRequest(id: string, input: unknown): Required<ReadFileRequest> {
  const body = isObject(input) ? input : {};
  const path = checkSandboxPath(id, body.path);
  const maxBytes = body.maxBytes ?? DEFAULT_READ_FILE_BYTES;
  if (typeof maxBytes !== 'number' || !Number.isInteger(maxBytes) || maxBytes < 0 || maxBytes > MAX_FILE_BYTES) {
    throw new DsecError('DSEC_AGENT_REQUEST', { message: `maxBytes must be a whole number from 0 to ${MAX_FILE_BYTES}, got ${JSON.stringify(body.maxBytes)}` });
  }
  return { path, maxBytes };
}

export function checkWriteFileRequest(id: string, input: unknown): Required<WriteFileRequest> {
  if (!isObject(input)) throw new DsecError('DSEC_AGENT_REQUEST', { message: 'the write request must be {path, data (base64), mode?}' });
  const path = checkSandboxPath(id, input.path);
  const { data } = input;
  if (typeof data !== 'string' || data.length % 4 !== 0 || !BASE64.test(data)) {
    throw new DsecError('DSEC_FILE_INVALID', { id, path, message: 'data must be the content in base64' });
  }
  const size = (data.length / 4) * 3 - (data.endsWith('==') ? 2 : data.endsWith('=') ? 1 : 0);
  if (size > MAX_FILE_BYTES) throw new DsecError('DSEC_FILE_TOO_LARGE', { id, path, size, limit: MAX_FILE_BYTES });
  const mode = input.mode ?? 0o644;
  if (typeof mode !== 'number' || !Number.isInteger(mode) || mode < 0 || mode > 0o7777) {
    throw new DsecError('DSEC_FILE_INVALID', { id, path, message: `mode must be permission bits from 0 to 0o7777, got ${JSON.stringify(input.mode)}` });
  }
  return { path, data, mode };
}

/** The task's shape; what its runtime and files mean is the FnCall backend's to check. */
export function checkFunctionTask(fleet: string, input: unknown): FunctionTask {
  const problems: string[] = [];
  if (!isObject(input)) throw new DsecError('DSEC_FUNCTION_INVALID', { fleet, message: 'the task must be an object {runtime, code, ...}' });
  const { runtime, code, files, stdin, args, env, timeoutMs } = input;
  if (typeof runtime !== 'string' || runtime === '' || runtime.includes('\0')) problems.push('runtime must be a non-empty string');
  if (typeof code !== 'string') problems.push('code must be a string');
  if (files !== undefined && (!isObject(files) || Object.values(files).some((value) => typeof value !== 'string'))) {
    problems.push('files must be an object of path -> base64 content');
  }
  if (stdin !== undefined && typeof stdin !== 'string') problems.push('stdin must be a string');
  if (args !== undefined && (!Array.isArray(args) || args.some((arg) => typeof arg !== 'string' || arg.includes('\0')))) problems.push('args must be a list of strings');
  if (env !== undefined && (!isObject(env) || Object.entries(env).some(([name, value]) => typeof value !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)))) {
    problems.push('env must be an object of NAME -> string');
  }
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_EXEC_TIMEOUT_MS)) {
    problems.push(`timeoutMs must be a whole number from 1 to ${MAX_EXEC_TIMEOUT_MS}`);
  }
  if (problems.length > 0) throw new DsecError('DSEC_FUNCTION_INVALID', { fleet, message: problems.join('; ') });
  return {
    runtime: runtime as string,
    code: code as string,
    ...(files !== undefined ? { files: { ...(files as Record<string, string>) } } : {}),
    ...(stdin !== undefined ? { stdin: stdin as string } : {}),
    ...(args !== undefined ? { args: [...(args as string[])] } : {}),
    ...(env !== undefined ? { env: { ...(env as Record<string, string>) } } : {}),
    ...(timeoutMs !== undefined ? { timeoutMs: timeoutMs as number } : {}),
  };
}
