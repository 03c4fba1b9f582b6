/**
 * Checking an exec request before a backend runs it: the command, its
 * environment and working directory, stdin (text or bytes, or kept open),
 * a terminal, background, the output's encoding, the timeout and the cap.
 * Every problem at once (DSEC_AGENT_REQUEST).
 */
import { DsecError } from '../errors.js';
import { MAX_EXEC_OUTPUT_BYTES, MAX_EXEC_TIMEOUT_MS, type ExecRequest, type OutputEncoding } from '../live.js';

type Json = Record<string, unknown>;

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function refuse(problems: string[]): never {
  throw new DsecError('DSEC_AGENT_REQUEST', { message: problems.join('; ') });
}

function stringMap(value: unknown, name: string, problems: string[]): Record<string, string> {
  if (!isObject(value) || Object.values(value).some((entry) => typeof entry !== 'string')) {
    problems.push(`${name} must be an object of strings`);
    return {};
  }
  return { ...(value as Record<string, string>) };
}

/** `{rows, cols}` of a terminal. */
export function isTerminalSize(value: unknown): value is { rows: number; cols: number } {
  if (!isObject(value)) return false;
  const ok = (n: unknown) => typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 1000;
  return ok(value.rows) && ok(value.cols) && Object.keys(value).every((key) => key === 'rows' || key === 'cols');
}

export function checkExecRequest(input: unknown): ExecRequest {
  if (!isObject(input)) refuse(['the exec request must be an object']);
  const problems: string[] = [];
  const { cmd, env, workdir, stdin, stdinBase64, openStdin, tty, background, encoding, timeoutMs, maxOutputBytes } = input;
  if (!Array.isArray(cmd) || cmd.length === 0 || cmd.some((part) => typeof part !== 'string')) {
    problems.push('cmd must be a non-empty array of strings');
  }
  // A NUL cannot reach a process (spawn refuses it), and runc refuses an empty or `=` name: the caller's mistake, said as such.
  if (Array.isArray(cmd) && cmd.some((part) => typeof part === 'string' && part.includes('\0'))) problems.push('cmd must not hold NUL bytes');
  const envMap = env === undefined ? undefined : stringMap(env, 'env', problems);
  for (const [name, value] of Object.entries(envMap ?? {})) {
    if (name === '' || /[=\0]/.test(name)) problems.push(`env name ${JSON.stringify(name)} is not a valid variable name`);
    if (value.includes('\0')) problems.push(`env value of ${name} holds a NUL byte`);
  }
  if (workdir !== undefined && (typeof workdir !== 'string' || !workdir.startsWith('/'))) problems.push('workdir must be an absolute path');
  else if (typeof workdir === 'string' && workdir.includes('\0')) problems.push('workdir must not hold NUL bytes');
  if (stdin !== undefined && typeof stdin !== 'string') problems.push('stdin must be a string');
  if (stdinBase64 !== undefined && (typeof stdinBase64 !== 'string' || stdinBase64.length % 4 !== 0 || !BASE64.test(stdinBase64))) {
    problems.push('stdinBase64 must be bytes in base64');
  }
  if (stdin !== undefined && stdinBase64 !== undefined) problems.push('give stdin or stdinBase64, not both');
  for (const [name, value] of Object.entries({ openStdin, background })) {
    if (value !== undefined && typeof value !== 'boolean') problems.push(`${name} must be true or false`);
  }
  if (tty !== undefined && !isTerminalSize(tty)) problems.push('tty must be {rows, cols}, each a whole number from 1 to 1000');
  if (encoding !== undefined && encoding !== 'utf8' && encoding !== 'base64') problems.push('encoding must be "utf8" or "base64"');
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1)) {
    problems.push('timeoutMs must be a whole number >= 1');
  } else if (timeoutMs !== undefined && timeoutMs > MAX_EXEC_TIMEOUT_MS) {
    problems.push(`timeoutMs must be at most ${MAX_EXEC_TIMEOUT_MS} (about 24 days)`);
  }
  if (maxOutputBytes !== undefined && (typeof maxOutputBytes !== 'number' || !Number.isInteger(maxOutputBytes) || maxOutputBytes < 0)) {
    problems.push('maxOutputBytes must be a whole number >= 0');
  } else if (maxOutputBytes !== undefined && maxOutputBytes > MAX_EXEC_OUTPUT_BYTES) {
    // Both streams are held in memory and sent back in one answer.
    problems.push(`maxOutputBytes must be at most ${MAX_EXEC_OUTPUT_BYTES} (32 MiB per stream)`);
  }
  if (problems.length > 0) refuse(problems);
  return {
    cmd: [...(cmd as string[])],
    ...(envMap ? { env: envMap } : {}),
    ...(workdir !== undefined ? { workdir: workdir as string } : {}),
    ...(stdin !== undefined ? { stdin: stdin as string } : {}),
    ...(stdinBase64 !== undefined ? { stdinBase64: stdinBase64 as string } : {}),
    ...(openStdin === true ? { openStdin: true } : {}),
    ...(tty !== undefined ? { tty: { rows: (tty as { rows: number }).rows, cols: (tty as { cols: number }).cols } } : {}),
    ...(background === true ? { background: true } : {}),
    ...(encoding !== undefined ? { encoding: encoding as OutputEncoding } : {}),
    ...(timeoutMs !== undefined ? { timeoutMs: timeoutMs as number } : {}),
    ...(maxOutputBytes !== undefined ? { maxOutputBytes: maxOutputBytes as number } : {}),
  };
}
