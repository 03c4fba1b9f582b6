/**
 * Calls into a running sandbox (exec, readFile, writeFile) and FnCall tasks
 * on a fleet's pool. Every sandbox call goes the same way: admitted through
 * `awake` (a paused sandbox is resumed first; the call counts as activity
 * for the idle reaper and keeps a pause out while it runs), then the
 * backend's tap for that operation, keyed by its kind. A backend without the
 * tap is DSEC_BACKEND_UNSUPPORTED naming it; a failure on a sandbox that
 * died meanwhile is DSEC_SANDBOX_NOT_RUNNING rather than the runtime's words.
 */
import type { Dsec } from '../dsec.js';
import { asBackendFailure, DsecError } from '../errors.js';
import type { NodeContext, SandboxContext } from '../hooks.js';
import {
  LABEL_FLEET,
  LABEL_LINEAGE,
  type ExecIO,
  type ExecOutput,
  type ExecResult,
  type FileContent,
  type FunctionResult,
  type OutputEncoding,
  type ReadFileRequest,
  type WriteFileRequest,
} from '../live.js';
import { backendHook, backendSupports, type BackendHookKind } from './backend-hooks.js';
import type { PauseControl } from './pause.js';
import type { SandboxEntry, SandboxStore } from './store.js';
import { checkExecRequest, checkSandboxId } from './validate.js';
import { checkCallHolder } from './validate-pools.js';
import { checkFunctionTask, checkReadFileRequest, checkWriteFileRequest } from './validate-calls.js';

export interface CallHost {
  readonly dsec: Dsec;
  readonly node: NodeContext;
  readonly store: SandboxStore;
  readonly pauses: PauseControl;
  /** Ask the backend what became of a sandbox (a vanished one becomes `stopped`). */
  probe(entry: SandboxEntry): Promise<void>;
  /** A call that names a holder is refused unless that holder has the sandbox (claim-service.ts). */
  checkHolder(entry: SandboxEntry, holder: string | undefined): void;
}

type SandboxOperation = Extract<BackendHookKind, 'exec' | 'process' | 'session' | 'readFile' | 'writeFile'>;

export class SandboxCalls {
  constructor(private readonly host: CallHost) {}

  /**
   * Run a command in a sandbox to its end. With `io`, its output streams to
   * `io.onOutput` as it comes and the command dies when `io.signal` aborts
   * (the caller went away). The answer's output is in the request's encoding.
   */
  async exec(idInput: unknown, requestInput: unknown, io: ExecIO = {}): Promise<ExecResult> {
    const id = checkSandboxId(idInput);
    const holder = holderOf(requestInput);
    const request = checkExecRequest(requestInput);
    if (request.background) throw new DsecError('DSEC_AGENT_REQUEST', { message: 'a background command is started with POST /v1/sandboxes/:id/processes' });
    // exec's own failures keep their words (a runtime's message reads better than a wrapper's).
    const output = await this.within(id, 'exec', (ctx) => backendHook(this.host.dsec, 'exec', ctx.spec.backend).promise(ctx, request, io), { wrap: false, holder });
    return execResult(output, request.encoding);
  }

  /** One file from inside a sandbox (`{path, maxBytes?, holder?}`). */
  readFile(idInput: unknown, requestInput: unknown): Promise<FileContent> {
    const id = checkSandboxId(idInput);
    const holder = holderOf(requestInput);
    const request: ReadFileRequest = checkReadFileRequest(id, requestInput);
    return this.within(id, 'readFile', (ctx) => backendHook(this.host.dsec, 'readFile', ctx.spec.backend).promise(ctx, request), { holder });
  }

  /** Create or replace one file inside a sandbox (`{path, data (base64), mode?, holder?}`), parents created. */
  async writeFile(idInput: unknown, requestInput: unknown): Promise<{ path: string; size: number }> {
    const id = checkSandboxId(idInput);
    const holder = holderOf(requestInput);
    const request: WriteFileRequest = checkWriteFileRequest(id, requestInput);
    await this.within(id, 'writeFile', (ctx) => backendHook(this.host.dsec, 'writeFile', ctx.spec.backend).promise(ctx, request), { holder });
    return { path: request.path, size: Buffer.byteLength(request.data, 'base64') };
  }

  /**
   * Run a stateless task on the fleet's pool on this node: the fleet's
   * sandboxes (by their fleet label) name the backend, whose `invoke` tap
   * queues and runs it.
   */
  async invoke(fleetInput: unknown, taskInput: unknown): Promise<FunctionResult> {
    if (typeof fleetInput !== 'string' || fleetInput === '') throw new DsecError('DSEC_AGENT_REQUEST', { message: 'the fleet name must be a non-empty string' });
    const fleet = fleetInput;
    const task = checkFunctionTask(fleet, taskInput);
    const workers = this.host.store.all().filter((entry) => entry.ctx.spec.labels[LABEL_FLEET] === fleet && entry.ctx.status !== 'failed');
    const where = `node ${this.host.node.name}`;
    if (workers.length === 0) throw new DsecError('DSEC_FUNCTION_NO_WORKERS', { fleet, where });
    // A cluster agent serves every project that places sandboxes on it; pools are keyed by fleet name,
    // so two projects' fleets of one name would share workers (and environments). Refused, never mixed.
    const lineages = [...new Set(workers.map((entry) => entry.ctx.spec.labels[LABEL_LINEAGE] ?? '(none)'))].sort();
    if (lineages.length > 1) throw new DsecError('DSEC_FUNCTION_AMBIGUOUS', { fleet, where, count: lineages.length, lineages: lineages.join(', ') });
    const backends = new Set(workers.map((entry) => entry.ctx.spec.backend));
    // While a fleet is replaced onto another backend both kinds are there: the one that takes tasks answers.
    const backend = [...backends].sort().find((kind) => backendSupports(this.host.dsec, 'invoke', kind)) ?? [...backends].sort()[0];
    const result = await backendHook(this.host.dsec, 'invoke', backend).promise({ fleet, node: this.host.node, task });
    if (result === undefined) throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend, operation: 'invoke' });
    this.touchWorker(result.worker);
    return result;
  }

  /**
   * A task is activity for the worker that ran it, so a pool under load is
   * never reaped as idle (`ttl.idleStop`). Kept in memory at once (the reaper
   * reads it there); written to disk every few seconds at most
   * (store.persistActivity).
   */
  private touchWorker(id: string): void {
    const entry = this.host.store.get(id);
    if (!entry) return;
    entry.lastActivityAt = new Date().toISOString();
    this.host.store.persistActivity(entry);
  }

  /**
   * Admit a call into a sandbox (resuming a paused one, refusing a holder
   * that does not hold it), run it on the backend's tap for `operation`,
   * and say clearly what went wrong. Every call into a sandbox goes here.
   */
  async within<R>(
    id: string,
    operation: SandboxOperation,
    run: (ctx: SandboxContext) => Promise<R | undefined>,
    options: { wrap?: boolean; holder?: string } = {},
  ): Promise<R> {
    // Unsupported, or another holder's, is said before a paused sandbox is woken for nothing.
    const known = this.host.store.get(id);
    if (known) {
      backendHook(this.host.dsec, operation, known.ctx.spec.backend);
      this.host.checkHolder(known, options.holder);
    }
    const call = await this.host.pauses.awake(id);
    const { ctx } = call.entry;
    try {
      // Again: the claim may have changed while a paused sandbox was resumed.
      this.host.checkHolder(call.entry, options.holder);
    } catch (error) {
      call.done();
      throw error;
    }
    const { backend } = ctx.spec;
    try {
      let result: R | undefined;
      try {
        result = await run(ctx);
      } catch (error) {
        if (isUnsupported(error)) throw error;
        // The sandbox may have died since we last looked: say that, rather than the runtime's words.
        await this.host.probe(call.entry);
        if (ctx.status !== 'running') throw new DsecError('DSEC_SANDBOX_NOT_RUNNING', { id, status: ctx.status });
        throw options.wrap === false ? error : asBackendFailure(error, backend, operation, id);
      }
      if (result === undefined) throw new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend, operation });
      return result;
    } finally {
      call.done();
    }
  }
}

function isUnsupported(error: unknown): boolean {
  return error instanceof DsecError && error.code === 'DSEC_BACKEND_UNSUPPORTED';
}

/** The `holder` a call may name (its calls are refused on a sandbox it does not hold). */
function holderOf(input: unknown): string | undefined {
  return typeof input === 'object' && input !== null ? checkCallHolder((input as { holder?: unknown }).holder) : undefined;
}

/** A backend's exec output as the caller asked for it: text, or the bytes in base64. */
export function execResult(output: ExecOutput, encoding: OutputEncoding = 'utf8'): ExecResult {
  return { ...output, stdout: output.stdout.toString(encoding), stderr: output.stderr.toString(encoding) };
}
