/**
 * Background commands and sessions in a sandbox: each call goes through the
 * same door as exec (SandboxCalls.within: a paused sandbox resumed, the
 * holder checked, the call counted as activity) to the backend's `process`
 * or `session` tap, and its bytes come back in the encoding asked for.
 */
import { randomBytes } from 'node:crypto';
import { constants } from 'node:os';
import type { Dsec } from '../dsec.js';
import { DsecError } from '../errors.js';
import type { SandboxContext } from '../hooks.js';
import {
  MAX_EXEC_OUTPUT_BYTES,
  MAX_EXEC_TIMEOUT_MS,
  type OutputEncoding,
  type OutputListener,
  type ProcessAnswers,
  type ProcessCall,
  type ProcessSnapshotJson,
  type ProcessSummary,
  type ExecResult,
  type SessionAnswers,
  type SessionCall,
  type SessionInfo,
  type SessionRunResult,
} from '../live.js';
import { backendHook } from './backend-hooks.js';
import { execResult, type SandboxCalls } from './calls.js';
import { checkSandboxId } from './validate.js';
import { checkExecRequest, isTerminalSize } from './validate-exec.js';
import { checkCallHolder } from './validate-pools.js';

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
/** The most stdin one call carries: larger input goes in several. */
export const MAX_INPUT_BYTES = 4 * 1024 * 1024;
const HANDLE = /^[A-Za-z0-9_-]{1,64}$/;

function refuse(message: string): never {
  throw new DsecError('DSEC_AGENT_REQUEST', { message });
}

function handleOf(value: unknown, what = 'handle'): string {
  if (typeof value !== 'string' || !HANDLE.test(value)) refuse(`${what} must be 1 to 64 letters, digits, '_' or '-'`);
  return value;
}

function encodingOf(value: unknown): OutputEncoding {
  if (value === undefined || value === null) return 'utf8';
  if (value !== 'utf8' && value !== 'base64') refuse('encoding must be "utf8" or "base64"');
  return value;
}

function holderOf(input: unknown): string | undefined {
  return isObject(input) ? checkCallHolder(input.holder) : undefined;
}

/** A signal by name (`SIGTERM`, `TERM`) or number, as a name. */
export function signalName(value: unknown): string {
  const names = constants.signals as Record<string, number>;
  if (typeof value === 'number' && Number.isInteger(value)) {
    const name = Object.keys(names).find((key) => names[key] === value);
    if (name) return name;
  }
  if (typeof value === 'string') {
    const name = value.startsWith('SIG') ? value : `SIG${value}`;
    if (name in names) return name;
  }
  return refuse(`signal must be a signal name like SIGTERM or a number, not ${JSON.stringify(value)}`);
}

export class ProcessCalls {
  constructor(
    private readonly dsec: Dsec,
    private readonly calls: SandboxCalls,
  ) {}

  private process<K extends ProcessCall['op']>(id: string, call: Extract<ProcessCall, { op: K }>, holder?: string): Promise<ProcessAnswers[K]> {
    return this.calls.within(id, 'process', (ctx: SandboxContext) => backendHook(this.dsec, 'process', ctx.spec.backend).promise(ctx, call) as Promise<ProcessAnswers[K] | undefined>, { holder });
  }

  private session<K extends SessionCall['op']>(id: string, call: Extract<SessionCall, { op: K }>, holder?: string): Promise<SessionAnswers[K]> {
    return this.calls.within(id, 'session', (ctx: SandboxContext) => backendHook(this.dsec, 'session', ctx.spec.backend).promise(ctx, call) as Promise<SessionAnswers[K] | undefined>, { holder });
  }

  /** Start a background command (an exec request; `background` implied); `onOutput` gets its output as it comes. */
  start(idInput: unknown, input: unknown, onOutput?: OutputListener): Promise<ProcessAnswers['start']> {
    const id = checkSandboxId(idInput);
    const holder = holderOf(input);
    const request = { ...checkExecRequest(isObject(input) ? { ...input, background: true } : input), background: true };
    return this.process(id, { op: 'start', request, ...(onOutput ? { onOutput } : {}) }, holder);
  }

  /** `{data? (base64), eof?}` into its stdin. */
  async input(idInput: unknown, handleInput: unknown, input: unknown): Promise<{ written: number }> {
    const id = checkSandboxId(idInput);
    const handle = handleOf(handleInput);
    if (!isObject(input)) refuse('the input must be {data? (base64), eof?}');
    const { data, eof } = input;
    if (data !== undefined && (typeof data !== 'string' || data.length % 4 !== 0 || !BASE64.test(data))) refuse('data must be bytes in base64');
    if (eof !== undefined && typeof eof !== 'boolean') refuse('eof must be true or false');
    const bytes = data === undefined ? undefined : Buffer.from(data as string, 'base64');
    if (bytes && bytes.length > MAX_INPUT_BYTES) refuse(`data must be at most ${MAX_INPUT_BYTES} bytes a call; send more in several`);
    await this.process(id, { op: 'input', handle, ...(bytes ? { data: bytes } : {}), ...(eof === true ? { eof: true } : {}) }, holderOf(input));
    return { written: bytes?.length ?? 0 };
  }

  async signal(idInput: unknown, handleInput: unknown, input: unknown): Promise<{ ok: true }> {
    const id = checkSandboxId(idInput);
    const handle = handleOf(handleInput);
    const signal = signalName(isObject(input) ? input.signal : undefined);
    await this.process(id, { op: 'signal', handle, signal }, holderOf(input));
    return { ok: true };
  }

  async resize(idInput: unknown, handleInput: unknown, input: unknown): Promise<{ ok: true }> {
    const id = checkSandboxId(idInput);
    const handle = handleOf(handleInput);
    if (!isTerminalSize(input === undefined ? undefined : { rows: (input as Json)?.rows, cols: (input as Json)?.cols })) refuse('the size must be {rows, cols}, each from 1 to 1000');
    const { rows, cols } = input as { rows: number; cols: number };
    await this.process(id, { op: 'resize', handle, rows, cols }, holderOf(input));
    return { ok: true };
  }

  /** Until it exits, or `timeoutMs` (then `{running: true}`): its result with the output kept. */
  async wait(idInput: unknown, handleInput: unknown, input: unknown, signal?: AbortSignal): Promise<ExecResult | { running: true }> {
    const id = checkSandboxId(idInput);
    const handle = handleOf(handleInput);
    const body = isObject(input) ? input : {};
    const { timeoutMs } = body;
    if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > MAX_EXEC_TIMEOUT_MS)) {
      refuse(`timeoutMs must be a whole number from 0 to ${MAX_EXEC_TIMEOUT_MS}`);
    }
    const output = await this.process(id, { op: 'wait', handle, ...(timeoutMs !== undefined ? { timeoutMs: timeoutMs as number } : {}), ...(signal ? { signal } : {}) }, holderOf(body));
    return 'running' in output ? { running: true } : execResult(output, encodingOf(body.encoding));
  }

  async get(idInput: unknown, handleInput: unknown, query: { encoding?: string | null; holder?: string | null }): Promise<ProcessSnapshotJson> {
    const id = checkSandboxId(idInput);
    const handle = handleOf(handleInput);
    const encoding = encodingOf(query.encoding);
    const snapshot = await this.process(id, { op: 'get', handle }, query.holder ? checkCallHolder(query.holder) : undefined);
    return { ...snapshot, stdout: snapshot.stdout.toString(encoding), stderr: snapshot.stderr.toString(encoding) };
  }

  list(idInput: unknown, holder?: string | null): Promise<ProcessSummary[]> {
    return this.process(checkSandboxId(idInput), { op: 'list' }, holder ? checkCallHolder(holder) : undefined);
  }

  async forget(idInput: unknown, handleInput: unknown, holder?: string | null): Promise<{ ok: true }> {
    await this.process(checkSandboxId(idInput), { op: 'forget', handle: handleOf(handleInput) }, holder ? checkCallHolder(holder) : undefined);
    return { ok: true };
  }

  // ------------------------------------------------------------- sessions

  /** `{cwd?, env?, shell?, id?}`: open a persistent shell. */
  openSession(idInput: unknown, input: unknown): Promise<SessionInfo> {
    const id = checkSandboxId(idInput);
    const body = isObject(input) ? input : {};
    const { cwd, env, shell } = body;
    if (cwd !== undefined && (typeof cwd !== 'string' || !cwd.startsWith('/') || cwd.includes('\0'))) refuse('cwd must be an absolute path');
    if (shell !== undefined && (typeof shell !== 'string' || !shell.startsWith('/') || shell.includes('\0'))) refuse('shell must be an absolute path inside the sandbox');
    if (env !== undefined && (!isObject(env) || Object.entries(env).some(([key, value]) => typeof value !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(key) || (value as string).includes('\0')))) {
      refuse('env must be an object of variable names to strings');
    }
    const session = body.id === undefined ? `s${randomBytes(6).toString('hex')}` : handleOf(body.id, 'id');
    const options = {
      ...(cwd !== undefined ? { cwd: cwd as string } : {}),
      ...(env !== undefined ? { env: env as Record<string, string> } : {}),
      ...(shell !== undefined ? { shell: shell as string } : {}),
    };
    return this.session(id, { op: 'open', id: session, options }, holderOf(body));
  }

  /** `{command, timeoutMs?, maxOutputBytes?, encoding?}`: one command in the session's shell, to its end. */
  async runInSession(idInput: unknown, sessionInput: unknown, input: unknown, options: { onOutput?: OutputListener; signal?: AbortSignal } = {}): Promise<SessionRunResult> {
    const id = checkSandboxId(idInput);
    const session = handleOf(sessionInput, 'session');
    if (!isObject(input)) refuse('the run must be {command, timeoutMs?, maxOutputBytes?}');
    const { command, timeoutMs, maxOutputBytes } = input;
    if (typeof command !== 'string' || command.includes('\0') || command.length > 1024 * 1024) refuse('command must be a string of at most 1 MiB without NUL bytes');
    if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_EXEC_TIMEOUT_MS)) refuse('timeoutMs must be a whole number >= 1');
    if (maxOutputBytes !== undefined && (typeof maxOutputBytes !== 'number' || !Number.isInteger(maxOutputBytes) || maxOutputBytes < 0 || maxOutputBytes > MAX_EXEC_OUTPUT_BYTES)) {
      refuse(`maxOutputBytes must be a whole number from 0 to ${MAX_EXEC_OUTPUT_BYTES}`);
    }
    const encoding = encodingOf(input.encoding);
    const request = {
      command: command as string,
      ...(timeoutMs !== undefined ? { timeoutMs: timeoutMs as number } : {}),
      ...(maxOutputBytes !== undefined ? { maxOutputBytes: maxOutputBytes as number } : {}),
    };
    const output = await this.session(id, { op: 'run', id: session, request, ...options }, holderOf(input));
    return { ...output, stdout: output.stdout.toString(encoding), stderr: output.stderr.toString(encoding) };
  }

  async interruptSession(idInput: unknown, sessionInput: unknown, holder?: string | null): Promise<{ ok: true }> {
    await this.session(checkSandboxId(idInput), { op: 'interrupt', id: handleOf(sessionInput, 'session') }, holder ? checkCallHolder(holder) : undefined);
    return { ok: true };
  }

  async closeSession(idInput: unknown, sessionInput: unknown, holder?: string | null): Promise<{ ok: true }> {
    await this.session(checkSandboxId(idInput), { op: 'close', id: handleOf(sessionInput, 'session') }, holder ? checkCallHolder(holder) : undefined);
    return { ok: true };
  }

  listSessions(idInput: unknown, holder?: string | null): Promise<SessionInfo[]> {
    return this.session(checkSandboxId(idInput), { op: 'list' }, holder ? checkCallHolder(holder) : undefined);
  }
}
