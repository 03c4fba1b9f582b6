/**
 * A typed client for the node agent's API: over its Unix socket
 * (`new AgentClient(socketPath)`), or over TCP with the cluster token
 * (`new AgentClient({url: 'http://10.0.0.5:7001', token})`). Error bodies
 * come back as the same DsecError (code, params and message) the agent threw,
 * so callers handle a remote failure exactly like a local one. An answer that
 * is not JSON is DSEC_AGENT_BAD_ANSWER: whatever sent it is not to be trusted.
 */
import http from 'node:http';
import { DsecError, ERRORS, type ErrorCode } from '../errors.js';
import type {
  AcquireRequest,
  BatchOutcome,
  ExecRequest,
  ExecResult,
  FileContent,
  FunctionResult,
  FunctionTask,
  LayerRecord,
  LayerRef,
  NodeInfo,
  NodeUsage,
  PoolInfo,
  PoolSpec,
  ReleaseRequest,
  ReleaseResult,
  RenewRequest,
  SandboxInfo,
  SandboxSpec,
  SandboxTarget,
  SandboxUpdate,
  SquashRecord,
  StorageStats,
  ReadFileRequest,
  WriteFileRequest,
} from '../live.js';
import type { LayerKind, LayerModel, Resources } from '../model.js';
import type { GcResult, LayerListing } from './layer-admin.js';
import { socketAddress } from './layout.js';

/** What `POST /v1/sandboxes/:id/snapshot` takes. */
export interface SnapshotRequestBody {
  /** `name@version` of the new layer. */
  readonly as: string;
  /** @default "workspace" */
  readonly kind?: LayerKind;
  /** Absolute paths inside the sandbox left out of the layer (secrets, build residue). */
  readonly exclude?: readonly string[];
}

export interface AgentClientOptions {
  /** Per-request timeout in ms (0: none). exec adds its own timeout to it. @default 0 */
  readonly timeoutMs?: number;
  /**
   * Connections open to the agent at once; calls past it queue in this
   * process. A streamed exec, a session run or a release holds one for as
   * long as it lasts, so a driver of many rollouts needs many.
   * @default 1024
   */
  readonly maxConnections?: number;
}

const DEFAULT_MAX_CONNECTIONS = 1024;

/** Where an agent answers over TCP, and the cluster token it wants. */
export interface AgentTcpTarget {
  /** `http://HOST:PORT` */
  readonly url: string;
  readonly token: string;
}

export class AgentClient {
  /** The Unix socket this client talks to; empty for a TCP client. */
  readonly socketPath: string;
  /** What messages name: the socket path, or `host:port` over TCP. */
  readonly address: string;
  private readonly tcp: { readonly host: string; readonly port: number; readonly authorization: string } | undefined;
  private readonly agent: http.Agent;

  constructor(target: string | AgentTcpTarget, private readonly options: AgentClientOptions = {}) {
    this.agent = new http.Agent({ keepAlive: true, maxSockets: options.maxConnections ?? DEFAULT_MAX_CONNECTIONS });
    if (typeof target === 'string') {
      this.socketPath = target;
      this.address = target;
      this.tcp = undefined;
      return;
    }
    const url = parseAgentUrl(target.url);
    if (!target.token) throw new DsecError('DSEC_USAGE', { message: `AgentClient ${target.url}: a token is required over TCP` });
    this.socketPath = '';
    this.address = url.host;
    // URL keeps IPv6 hosts in brackets; http.request wants them bare.
    this.tcp = { host: url.hostname.replace(/^\[(.*)\]$/, '$1'), port: Number(url.port || 80), authorization: `Bearer ${target.token}` };
  }

  /** `plugins`: the fingerprint of the agent's plugins (see pluginsFingerprint); absent from agents older than it. */
  health(options: { timeoutMs?: number } = {}): Promise<{ ok: true; pid: number; plugins?: string }> {
    return this.request('GET', '/v1/health', undefined, options.timeoutMs);
  }

  node(): Promise<NodeInfo> {
    return this.request('GET', '/v1/node');
  }

  listLayers(): Promise<LayerRecord[]> {
    return this.request('GET', '/v1/layers');
  }

  async digestLayer(layer: LayerModel): Promise<string> {
    return (await this.request<{ digest: string }>('POST', '/v1/layers/digest', { layer })).digest;
  }

  publishLayer(layer: LayerModel): Promise<LayerRecord> {
    return this.request('POST', '/v1/layers', { layer });
  }

  /** Merge a run of consecutive published layers (bottom to top) into one image, on the agent's node. */
  squashLayers(layers: readonly LayerRef[]): Promise<SquashRecord> {
    return this.request('POST', '/v1/layers/squash', { layers });
  }

  /** The node's storage: format, why it fell back to trees, mounted images and bytes read from each. */
  storageStats(): Promise<StorageStats> {
    return this.request('GET', '/v1/storage');
  }

  /** Unpublish every layer no sandbox uses and `keep` (the config's `name@version`s) does not name; `dryRun` only says which. */
  gcLayers(request: { keep: readonly string[]; dryRun?: boolean }): Promise<GcResult> {
    return this.request('POST', '/v1/layers/gc', request);
  }

  /** Every entry of a published layer (paths, types, modes, sizes). */
  layerListing(name: string, version: string): Promise<LayerListing> {
    return this.request('GET', `/v1/layers/${encodeURIComponent(name)}/${encodeURIComponent(version)}/listing`);
  }

  async unpublishLayer(name: string, version: string): Promise<void> {
    await this.request('DELETE', `/v1/layers/${encodeURIComponent(name)}/${encodeURIComponent(version)}`);
  }

  /** The sandboxes whose labels (their own and their claim's) match; with `holder`, only the ones it holds. */
  listSandboxes(labels?: Readonly<Record<string, string>>, options: { holder?: string } = {}): Promise<SandboxInfo[]> {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(labels ?? {})) query.append('label', `${key}=${value}`);
    if (options.holder !== undefined) query.set('holder', options.holder);
    const suffix = query.size > 0 ? `?${query}` : '';
    return this.request('GET', `/v1/sandboxes${suffix}`);
  }

  /** The node's pool records with their counts. */
  listPools(): Promise<PoolInfo[]> {
    return this.request('GET', '/v1/pools');
  }

  /** Create or replace a fleet's pool record on this node (the engine, at apply). */
  setPool(pool: PoolSpec): Promise<PoolInfo> {
    return this.request('PUT', `/v1/pools/${encodeURIComponent(pool.fleet)}`, pool);
  }

  /** Remove a fleet's pool record (its sandboxes stay). */
  async deletePool(fleet: string, lineage: string): Promise<void> {
    await this.request('DELETE', `/v1/pools/${encodeURIComponent(fleet)}?${new URLSearchParams({ lineage })}`);
  }

  /** Take a ready sandbox of the fleet's pool for `request.holder` (waiting up to `waitMs`); resolves to it, claimed. */
  acquire(fleet: string, request: AcquireRequest): Promise<SandboxInfo> {
    return this.request('POST', `/v1/pools/${encodeURIComponent(fleet)}/acquire`, request);
  }

  /** Recycle a claimed sandbox (its pool already made a fresh one), or with `keep` keep it, unclaimed. */
  release(id: string, request: ReleaseRequest = {}): Promise<ReleaseResult> {
    return this.request('POST', `/v1/sandboxes/${encodeURIComponent(id)}/release`, request);
  }

  /** The holder extends its claim to `ttlSeconds` from now. */
  renew(id: string, request: RenewRequest): Promise<SandboxInfo> {
    return this.request('POST', `/v1/sandboxes/${encodeURIComponent(id)}/renew`, request);
  }

  createSandbox(spec: SandboxSpec): Promise<SandboxInfo> {
    return this.request('POST', '/v1/sandboxes', { spec });
  }

  getSandbox(id: string): Promise<SandboxInfo> {
    return this.request('GET', `/v1/sandboxes/${encodeURIComponent(id)}`);
  }

  /**
   * Change a live sandbox: its resources (merged onto the current ones, applied
   * by the backend), its TTLs, its density settings. A bare `Partial<Resources>`
   * is still taken as `{resources}` (the pre-SandboxUpdate form) for older callers.
   */
  updateSandbox(id: string, change: SandboxUpdate | Partial<Resources>): Promise<SandboxInfo> {
    return this.request('PATCH', `/v1/sandboxes/${encodeURIComponent(id)}`, asSandboxUpdate(change));
  }

  /** Freeze each targeted sandbox (by ids and/or labels); one outcome per sandbox, past failures. */
  pauseSandboxes(target: SandboxTarget): Promise<BatchOutcome[]> {
    return this.request('POST', '/v1/sandboxes/pause', target);
  }

  /** Thaw each targeted sandbox; one outcome per sandbox. */
  resumeSandboxes(target: SandboxTarget): Promise<BatchOutcome[]> {
    return this.request('POST', '/v1/sandboxes/resume', target);
  }

  /** Freeze one sandbox (a no-op on a paused one). Refused (DSEC_SANDBOX_BUSY) while an exec runs in it. */
  pauseSandbox(id: string): Promise<SandboxInfo> {
    return this.request('POST', `/v1/sandboxes/${encodeURIComponent(id)}/pause`);
  }

  /** Thaw one sandbox (a no-op on a running one). */
  resumeSandbox(id: string): Promise<SandboxInfo> {
    return this.request('POST', `/v1/sandboxes/${encodeURIComponent(id)}/resume`);
  }

  /** Hold a sandbox for `holder` (its fleet's TTLs stop applying) until released or `ttlSeconds` pass. */
  claimSandbox(id: string, holder: string, ttlSeconds?: number): Promise<SandboxInfo> {
    return this.request('POST', `/v1/sandboxes/${encodeURIComponent(id)}/claim`, { holder, ...(ttlSeconds !== undefined ? { ttlSeconds } : {}) });
  }

  /** End a sandbox's claim and keep the sandbox (a pool's is marked kept); a no-op when it has none. */
  releaseSandbox(id: string): Promise<SandboxInfo> {
    return this.request('DELETE', `/v1/sandboxes/${encodeURIComponent(id)}/claim`);
  }

  /** The node's usage report: counts, requested and used CPU and memory, per fleet, and the density plugins' figures. */
  nodeUsage(): Promise<NodeUsage> {
    return this.request('GET', '/v1/node/usage');
  }

  /** `unlessClaimed`: refused with DSEC_SANDBOX_CLAIMED when a holder has it (apply's deletes). */
  destroySandbox(id: string, options: { unlessClaimed?: boolean } = {}): Promise<{ id: string; existed: boolean }> {
    return this.request('DELETE', `/v1/sandboxes/${encodeURIComponent(id)}${options.unlessClaimed ? '?unlessClaimed=1' : ''}`);
  }

  /** Publish a sandbox's writable layer as `as` (name@version), without the `exclude` paths. */
  snapshotSandbox(id: string, request: SnapshotRequestBody): Promise<LayerRecord> {
    return this.request('POST', `/v1/sandboxes/${encodeURIComponent(id)}/snapshot`, request);
  }

  /** Run a command to its end. `signal`: the caller gives up; the agent then kills the command. */
  exec(id: string, request: ExecRequest, options: { signal?: AbortSignal } = {}): Promise<ExecResult> {
    return this.request('POST', `/v1/sandboxes/${encodeURIComponent(id)}/exec`, request, this.options.timeoutMs ?? 0, options.signal);
  }

  /** One file from inside a sandbox, base64 (a paused sandbox is resumed first). */
  readFile(id: string, request: ReadFileRequest): Promise<FileContent> {
    const query = new URLSearchParams({ path: request.path });
    if (request.maxBytes !== undefined) query.set('maxBytes', String(request.maxBytes));
    return this.request('GET', `/v1/sandboxes/${encodeURIComponent(id)}/files?${query}`);
  }

  /** Create or replace one file inside a sandbox (parents created). */
  async writeFile(id: string, request: WriteFileRequest): Promise<void> {
    await this.request('PUT', `/v1/sandboxes/${encodeURIComponent(id)}/files`, request);
  }

  /** Run a stateless task on one of the fleet's FnCall workers on this node. */
  invokeFunction(fleet: string, task: FunctionTask): Promise<FunctionResult> {
    return this.request('POST', `/v1/functions/${encodeURIComponent(fleet)}/invoke`, task);
  }

  shutdown(): Promise<{ ok: true }> {
    return this.request('POST', '/v1/shutdown');
  }

  /** Close idle connections. The agent keeps running. */
  close(): void {
    this.agent.destroy();
  }

  /**
   * One request; retried once when a kept-alive socket turned out to be
   * closed by the agent. `signal` aborts it (the agent sees the caller go).
   */
  async request<T>(method: string, path: string, body?: unknown, timeoutMs = this.options.timeoutMs ?? 0, signal?: AbortSignal): Promise<T> {
    try {
      return await this.send<T>(method, path, body, timeoutMs, signal);
    } catch (error) {
      if ((error as { retryable?: boolean }).retryable) return this.send<T>(method, path, body, timeoutMs, signal);
      throw error;
    }
  }

  /**
   * A request whose answer streams (NDJSON): each line is handed to
   * `onEvent` as it comes; resolves when the answer ends. An error status
   * is the agent's error, as for `request`; a line that is not JSON is
   * DSEC_AGENT_BAD_ANSWER. `signal` hangs up (the agent then stops the work).
   */
  stream(method: string, path: string, body: unknown, onEvent: (event: unknown) => void, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const req = this.open(method, path, body, (res) => {
        if ((res.statusCode ?? 500) !== 200) return this.readJson(res, method, path, resolve as () => void, reject);
        let buffered = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          buffered += chunk;
          for (let end = buffered.indexOf('\n'); end >= 0; end = buffered.indexOf('\n')) {
            const line = buffered.slice(0, end);
            buffered = buffered.slice(end + 1);
            if (!line) continue;
            let event: unknown;
            try {
              event = JSON.parse(line);
            } catch {
              req.destroy();
              return reject(new DsecError('DSEC_AGENT_BAD_ANSWER', { address: this.address, message: `${method} ${path}: a streamed line that is not JSON: ${JSON.stringify(line.slice(0, 200))}` }));
            }
            onEvent(event);
          }
        });
        res.on('error', (error) => reject(this.unreachable(error)));
        res.on('end', () => resolve());
      }, signal);
      req.on('error', (error) => reject(this.unreachable(error)));
    });
  }

  /** Start a request (body as JSON, the token over TCP); `signal` destroys it. */
  private open(method: string, path: string, body: unknown, onResponse: (res: http.IncomingMessage) => void, signal?: AbortSignal): http.ClientRequest {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers: http.OutgoingHttpHeaders = payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) };
    if (this.tcp) headers.authorization = this.tcp.authorization;
    const where = this.tcp ? { host: this.tcp.host, port: this.tcp.port } : { socketPath: socketAddress(this.socketPath) };
    const req = http.request({ ...where, path, method, agent: this.agent, headers, ...(signal ? { signal } : {}) }, onResponse);
    req.end(payload);
    return req;
  }

  /** Read a whole JSON answer: resolve it, or reject with the agent's error. */
  private readJson<T>(res: http.IncomingMessage, method: string, path: string, resolve: (value: T) => void, reject: (error: Error) => void): void {
    const chunks: Buffer[] = [];
    res.on('data', (chunk: Buffer) => chunks.push(chunk));
    res.on('error', (error) => reject(this.unreachable(error)));
    res.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let parsed: unknown;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        const message = `${method} ${path}: HTTP ${res.statusCode} with a body that is not JSON: ${JSON.stringify(text.slice(0, 200))}`;
        return reject(new DsecError('DSEC_AGENT_BAD_ANSWER', { address: this.address, message }));
      }
      if (res.statusCode === 401) return reject(this.unauthorized(parsed));
      if ((res.statusCode ?? 500) >= 400) return reject(toDsecError(parsed, res.statusCode ?? 500));
      resolve(parsed as T);
    });
  }

  private send<T>(method: string, path: string, body: unknown, timeoutMs: number, signal?: AbortSignal): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const req = this.open(method, path, body, (res) => this.readJson(res, method, path, resolve, reject), signal);
      if (timeoutMs > 0) {
        req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      }
      req.on('error', (error: NodeJS.ErrnoException) => {
        const wrapped = this.unreachable(error);
        // A kept-alive socket the agent closed as idle (its keepAliveTimeout) just as this request went out: never read, so sent again.
        if (req.reusedSocket && (error.code === 'ECONNRESET' || error.code === 'EPIPE')) Object.assign(wrapped, { retryable: true });
        reject(wrapped);
      });
    });
  }

  private unreachable(error: Error): DsecError {
    return new DsecError('DSEC_AGENT_UNREACHABLE', { address: this.address, message: error.message }, { cause: error });
  }

  /** A 401 names this client's address and the agent's reason (a proxy's 401 without our body still maps here). */
  private unauthorized(body: unknown): DsecError {
    const reason = (body as { error?: { message?: unknown; params?: { message?: unknown } } } | undefined)?.error;
    const message = typeof reason?.params?.message === 'string' ? reason.params.message : 'the token was refused';
    return new DsecError('DSEC_AGENT_UNAUTHORIZED', { address: this.address, message });
  }
}

function parseAgentUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new DsecError('DSEC_USAGE', { message: `AgentClient: ${JSON.stringify(text)} is not a URL (expected http://HOST:PORT)` });
  }
  if (url.protocol !== 'http:' || !url.port) {
    throw new DsecError('DSEC_USAGE', { message: `AgentClient: ${JSON.stringify(text)}: expected http://HOST:PORT` });
  }
  return url;
}

const RESOURCE_FIELDS = ['cpu', 'memoryMiB', 'pids'];

/** A bare `Partial<Resources>` (the pre-SandboxUpdate form) as `{resources}`; a SandboxUpdate as it is. */
export function asSandboxUpdate(change: SandboxUpdate | Partial<Resources>): SandboxUpdate {
  const keys = Object.keys(change);
  const legacy = keys.length > 0 && keys.every((key) => RESOURCE_FIELDS.includes(key));
  return legacy ? { resources: change as Resources } : (change as SandboxUpdate);
}

/** The agent's `{error: {code, message, params}}` back into the DsecError it was. */
function toDsecError(body: unknown, status: number): DsecError {
  const error = (body as { error?: { code?: string; message?: string; params?: Record<string, unknown> } } | undefined)?.error;
  if (!error || typeof error.code !== 'string' || !(error.code in ERRORS)) {
    return new DsecError('DSEC_AGENT_REQUEST', { message: `the agent answered ${status}: ${JSON.stringify(body).slice(0, 300)}` });
  }
  const rebuilt = new DsecError(error.code as ErrorCode, error.params ?? {});
  if (typeof error.message === 'string') rebuilt.message = error.message;
  return rebuilt;
}

/** True when `error` means "no agent answered" (as opposed to a refusal by a live agent). */
export function isUnreachable(error: unknown): boolean {
  return error instanceof DsecError && error.code === 'DSEC_AGENT_UNREACHABLE';
}

/** True when nobody listened on the socket, so the request surely never reached an agent (safe to send again). */
export function neverDelivered(error: unknown): boolean {
  const cause = (error as { cause?: NodeJS.ErrnoException } | undefined)?.cause;
  return isUnreachable(error) && (cause?.code === 'ECONNREFUSED' || cause?.code === 'ENOENT');
}
