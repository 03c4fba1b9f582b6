/**
 * GuestSession's answers and events read defensively (AnswerReader): each
 * field's shape is checked, a wrong one is DSEC_GUEST_UNREACHABLE naming
 * the field, never a TypeError. Also the requests' argument objects.
 */
import { AnswerReader } from './answers.js';
import type {
  GuestExitEvent,
  GuestOutputStream,
  GuestProcessRequest,
  GuestProcessResult,
  GuestProcessSnapshot,
  GuestProcessSummary,
  GuestSessionRunResult,
  GuestSessionSummary,
  GuestUserFields,
} from './mux-types.js';

/** The most one dsec-output event carries (the agent's chunks are 64 KiB). */
const MAX_EVENT_BYTES = 64 * 1024;

/** user, or uid/gid/groups/home, as the agent takes them. */
export function userArguments(request: GuestUserFields): Record<string, unknown> {
  return {
    ...(request.user !== undefined ? { user: request.user } : {}),
    ...(request.uid !== undefined ? { uid: request.uid } : {}),
    ...(request.gid !== undefined ? { gid: request.gid } : {}),
    ...(request.groups !== undefined ? { groups: [...request.groups] } : {}),
    ...(request.home !== undefined ? { home: request.home } : {}),
  };
}

export function envList(env: Readonly<Record<string, string>> | undefined): string[] {
  return Object.entries(env ?? {}).map(([key, value]) => `${key}=${value}`);
}

/** dsec-exec's arguments. */
export function processArguments(request: GuestProcessRequest, handle: string, extra: { background: boolean; stream: boolean; timeoutMs: number; maxOutput: number }): Record<string, unknown> {
  const stdin = request.stdin === undefined ? undefined : Buffer.from(request.stdin);
  return {
    handle,
    path: request.path,
    arg: [...(request.args ?? [])],
    env: envList(request.env),
    ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
    ...userArguments(request),
    ...(stdin && stdin.length > 0 ? { 'input-data': stdin.toString('base64') } : {}),
    ...(request.stdinPipe ? { stdin: 'pipe' } : {}),
    ...(request.tty ? { tty: { rows: request.tty.rows, cols: request.tty.cols } } : {}),
    'timeout-ms': extra.timeoutMs,
    'max-output': extra.maxOutput,
    ...(extra.stream ? { stream: true } : {}),
    ...(extra.background ? { background: true } : {}),
  };
}

function status(reader: AnswerReader, answer: Record<string, unknown>): { exitCode: number | null; signal?: number } {
  const exitCode = reader.optionalInteger(answer.exitcode, 'exitcode');
  const signal = reader.optionalInteger(answer.signal, 'signal');
  return { exitCode: exitCode ?? null, ...(signal !== undefined ? { signal } : {}) };
}

export function parseProcessResult(reader: AnswerReader, value: unknown, limit: number): GuestProcessResult {
  const answer = reader.object(value);
  const out = reader.bytes(answer['out-data'], 'out-data', limit);
  const err = reader.bytes(answer['err-data'], 'err-data', limit);
  const stdoutTruncated = out.cut || reader.boolean(answer['out-truncated'], 'out-truncated', false);
  const stderrTruncated = err.cut || reader.boolean(answer['err-truncated'], 'err-truncated', false);
  return {
    pid: reader.integer(answer.pid, 'pid', 1),
    ...status(reader, answer),
    stdout: out.data,
    stderr: err.data,
    stdoutTruncated,
    stderrTruncated,
    truncated: stdoutTruncated || stderrTruncated,
    timedOut: reader.boolean(answer['timed-out'], 'timed-out', false),
    durationMs: reader.integer(answer['duration-ms'] ?? 0, 'duration-ms'),
  };
}

export function parseSnapshot(reader: AnswerReader, value: unknown): GuestProcessSnapshot {
  const answer = reader.object(value);
  const running = reader.boolean(answer.running, 'running');
  const limit = 32 * 1024 * 1024;
  const out = reader.bytes(answer['out-data'], 'out-data', limit);
  const err = reader.bytes(answer['err-data'], 'err-data', limit);
  return {
    running,
    pid: reader.integer(answer.pid, 'pid', 1),
    stdout: out.data,
    stderr: err.data,
    stdoutTruncated: out.cut || reader.boolean(answer['out-truncated'], 'out-truncated', false),
    stderrTruncated: err.cut || reader.boolean(answer['err-truncated'], 'err-truncated', false),
    ...(running
      ? {}
      : { ...status(reader, answer), timedOut: reader.boolean(answer['timed-out'], 'timed-out', false), durationMs: reader.integer(answer['duration-ms'] ?? 0, 'duration-ms') }),
  };
}

function list(reader: AnswerReader, value: unknown): Record<string, unknown>[] {
  if (!Array.isArray(value)) throw reader.invalid('the answer is not a list');
  return value.map((item, index) => reader.object(item, `entry ${index}`));
}

export function parseSummaries(reader: AnswerReader, value: unknown): GuestProcessSummary[] {
  return list(reader, value).map((entry) => {
    const exitCode = reader.optionalInteger(entry.exitcode, 'exitcode');
    const signal = reader.optionalInteger(entry.signal, 'signal');
    const args = entry.arg;
    if (!Array.isArray(args) || !args.every((arg) => typeof arg === 'string')) throw reader.invalid('arg is not a list of strings');
    return {
      handle: reader.string(entry.handle, 'handle'),
      pid: reader.integer(entry.pid, 'pid', 1),
      running: reader.boolean(entry.running, 'running'),
      ...(exitCode !== undefined ? { exitCode } : {}),
      ...(signal !== undefined ? { signal } : {}),
      path: reader.string(entry.path, 'path'),
      args: args as string[],
      ageMs: reader.integer(entry['age-ms'], 'age-ms'),
    };
  });
}

export function parseExitEvent(reader: AnswerReader, data: Record<string, unknown>): GuestExitEvent {
  return {
    handle: reader.string(data.handle, 'handle'),
    pid: reader.integer(data.pid, 'pid', 1),
    ...status(reader, data),
    timedOut: reader.boolean(data['timed-out'], 'timed-out', false),
    stdoutTruncated: reader.boolean(data['out-truncated'], 'out-truncated', false),
    stderrTruncated: reader.boolean(data['err-truncated'], 'err-truncated', false),
    durationMs: reader.integer(data['duration-ms'] ?? 0, 'duration-ms'),
  };
}

export function parseOutputEvent(reader: AnswerReader, data: Record<string, unknown>): { handle: string; stream: GuestOutputStream; chunk: Buffer } {
  const stream = reader.string(data.stream, 'stream');
  if (stream !== 'stdout' && stream !== 'stderr') throw reader.invalid('stream is neither stdout nor stderr');
  const { data: chunk, cut } = reader.bytes(data.data, 'data', MAX_EVENT_BYTES);
  if (cut) throw reader.invalid(`a chunk is larger than ${MAX_EVENT_BYTES} bytes`);
  return { handle: reader.string(data.handle, 'handle'), stream, chunk };
}

export function parseRunResult(reader: AnswerReader, value: unknown, limit: number): GuestSessionRunResult {
  const answer = reader.object(value);
  const out = reader.bytes(answer['out-data'], 'out-data', limit);
  const err = reader.bytes(answer['err-data'], 'err-data', limit);
  const stdoutTruncated = out.cut || reader.boolean(answer['out-truncated'], 'out-truncated', false);
  const stderrTruncated = err.cut || reader.boolean(answer['err-truncated'], 'err-truncated', false);
  return {
    exitCode: reader.optionalInteger(answer.exitcode, 'exitcode') ?? null,
    stdout: out.data,
    stderr: err.data,
    stdoutTruncated,
    stderrTruncated,
    truncated: stdoutTruncated || stderrTruncated,
    timedOut: reader.boolean(answer['timed-out'], 'timed-out', false),
    interrupted: reader.boolean(answer.interrupted, 'interrupted', false),
    ended: reader.boolean(answer.ended, 'ended', false),
    durationMs: reader.integer(answer['duration-ms'] ?? 0, 'duration-ms'),
  };
}

export function parseSessionSummaries(reader: AnswerReader, value: unknown): GuestSessionSummary[] {
  return list(reader, value).map((entry) => ({
    handle: reader.string(entry.handle, 'handle'),
    pid: reader.integer(entry.pid, 'pid', 1),
    shell: reader.string(entry.shell, 'shell'),
    busy: reader.boolean(entry.busy, 'busy'),
    ended: reader.boolean(entry.ended, 'ended'),
    ...(entry.cwd !== undefined ? { cwd: reader.string(entry.cwd, 'cwd') } : {}),
  }));
}
