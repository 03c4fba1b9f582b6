/**
 * The agent's HTTP/1.1 JSON API on a Unix socket (mode 0600: only root, the
 * agent's owner, may talk to it), and for a cluster agent the same routes
 * (less /v1/shutdown: stopping is for the node's operator, on the socket) on
 * TCP, where every request must carry `Authorization: Bearer <token>`. There
 * is no TCP without a token: createAgentServer refuses one.
 *
 * Every handler error becomes a JSON `{error: {code, message, params}}` with
 * a fitting status; nothing a client sends can take the agent down.
 */
import { chmod, rm } from 'node:fs/promises';
import http from 'node:http';
import { DsecError, type ErrorCode } from '../errors.js';
import type { Logger } from '../hooks.js';
import { MAX_FILE_BYTES } from '../live.js';
import type { LayerModel } from '../model.js';
import type { NodeAgent } from './agent.js';
import { formatHostPort, MIN_TOKEN_LENGTH } from './cluster-flags.js';
import { socketAddress } from './layout.js';
import { processRoutes } from './routes-processes.js';
import { MAX_UNREAD_STREAM_BYTES, route, Streamed, type Route } from './routes.js';
import { bearerRefusal, RateLimitedLog } from './tcp-auth.js';

export { MAX_BODY_BYTES } from './routes.js';
/** Routes that carry file content (a file write, a task's files) take more: MAX_FILE_BYTES in base64, and the JSON around it. */
export const MAX_FILE_BODY_BYTES = Math.ceil((MAX_FILE_BYTES * 4) / 3) + 1024 * 1024;
const CLOSE_GRACE_MS = 3_000;

const STATUS_BY_CODE: Partial<Record<ErrorCode, number>> = {
  DSEC_AGENT_REQUEST: 400,
  DSEC_AGENT_UNAUTHORIZED: 401,
  DSEC_USAGE: 400,
  DSEC_BACKEND_UNKNOWN: 400,
  DSEC_LAYER_SOURCE: 400,
  DSEC_LAYER_UNSAFE_ARCHIVE: 400,
  DSEC_LAYER_SQUASH: 400,
  DSEC_SANDBOX_NOT_FOUND: 404,
  DSEC_LAYER_NOT_FOUND: 404,
  DSEC_ADMISSION_REFUSED: 409,
  DSEC_LAYER_IN_USE: 409,
  DSEC_LAYER_IMMUTABLE: 409,
  DSEC_LAYER_NOT_PUBLISHED: 404,
  DSEC_LAYER_BUILD: 422,
  DSEC_LAYER_CHANGED: 409,
  DSEC_SANDBOX_NOT_RUNNING: 409,
  DSEC_SANDBOX_BUSY: 409,
  DSEC_SANDBOX_CLAIMED: 409,
  DSEC_SANDBOX_NOT_CLAIMED: 409,
  DSEC_POOL_NOT_FOUND: 404,
  DSEC_POOL_AMBIGUOUS: 409,
  DSEC_POOL_EXHAUSTED: 503,
  DSEC_BACKEND_UNSUPPORTED: 501,
  DSEC_FILE_NOT_FOUND: 404,
  DSEC_FILE_TOO_LARGE: 422,
  DSEC_FILE_INVALID: 400,
  DSEC_FUNCTION_NO_WORKERS: 404,
  DSEC_FUNCTION_INVALID: 400,
  DSEC_GUEST_UNREACHABLE: 502,
  DSEC_STORAGE_MISSING: 501,
};


export interface AgentServer {
  /** Serve on the Unix socket. */
  listen(): Promise<void>;
  /** Serve on TCP (`options.tcp`, token required); resolves to the bound `host:port`. */
  listenTcp(): Promise<string>;
  close(): Promise<void>;
}

export interface TcpListenOptions {
  readonly host: string;
  readonly port: number;
  /** The shared token every TCP request must present (at least MIN_TOKEN_LENGTH characters). */
  readonly token: string;
}

export interface AgentServerOptions {
  readonly socketPath: string;
  readonly log: Logger;
  readonly onShutdown: () => void;
  /** What `GET /v1/health` says about this agent besides its pid: the fingerprint of its plugins. */
  readonly identity?: { readonly plugins?: string };
  /** Serve the API on TCP too, behind the shared token (cluster agents). */
  readonly tcp?: TcpListenOptions;
}

export function createAgentServer(agent: NodeAgent, options: AgentServerOptions): AgentServer {
  const routes = buildRoutes(agent, options.onShutdown, options.identity ?? {});
  const server = http.createServer((req, res) => {
    void handle(routes, req, res, options.log);
  });
  // exec may legitimately run for minutes; its own timeout bounds it.
  server.requestTimeout = 0;
  server.keepAliveTimeout = 30_000;
  const tcpServer = options.tcp ? createTcpServer(routes, options.tcp, options.log) : undefined;

  return {
    async listen() {
      await rm(options.socketPath, { force: true });
      // Created 0600 from the start (umask), then made sure of with chmod.
      const previous = process.umask(0o177);
      try {
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject);
          server.listen(socketAddress(options.socketPath), () => {
            server.off('error', reject);
            resolve();
          });
        });
      } finally {
        process.umask(previous);
      }
      await chmod(options.socketPath, 0o600);
    },
    async listenTcp() {
      if (!tcpServer || !options.tcp) throw new Error('listenTcp: no tcp options were given');
      const { host, port } = options.tcp;
      await new Promise<void>((resolve, reject) => {
        tcpServer.once('error', reject);
        tcpServer.listen(port, host, () => {
          tcpServer.off('error', reject);
          resolve();
        });
      });
      return formatHostPort({ host, port });
    },
    async close() {
      await Promise.all([closeGracefully(server), tcpServer?.listening ? closeGracefully(tcpServer) : undefined]);
      await rm(options.socketPath, { force: true });
    },
  };
}

function closeGracefully(server: http.Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections();
    // Requests in flight (a long exec) get a short grace, then are cut: the sandboxes keep running.
    setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS).unref();
  });
}

/** The TCP face: the token checked before anything else is read, refusals logged (rate-limited) with the caller's address. */
function createTcpServer(routes: readonly Route[], tcp: TcpListenOptions, log: Logger): http.Server {
  if (tcp.token.length < MIN_TOKEN_LENGTH) throw new Error(`the agent never serves TCP without a token of at least ${MIN_TOKEN_LENGTH} characters`);
  const tcpRoutes = routes.filter((candidate) => !candidate.pattern.test('/v1/shutdown'));
  const refusals = new RateLimitedLog(log);
  const server = http.createServer((req, res) => {
    const why = bearerRefusal(req.headers.authorization, tcp.token);
    if (why === undefined) return void handle(tcpRoutes, req, res, log);
    const from = formatHostPort({ host: req.socket.remoteAddress ?? '?', port: req.socket.remotePort ?? 0 });
    refusals.warn(`refused ${req.method} ${JSON.stringify((req.url ?? '').slice(0, 200))} over TCP from ${from}: ${why}`);
    const address = formatHostPort({ host: req.socket.localAddress ?? tcp.host, port: req.socket.localPort ?? tcp.port });
    sendError(res, 401, new DsecError('DSEC_AGENT_UNAUTHORIZED', { address, message: `${why} (send Authorization: Bearer <the cluster token>)` }));
  });
  server.requestTimeout = 0;
  server.keepAliveTimeout = 30_000;
  return server;
}

function buildRoutes(agent: NodeAgent, onShutdown: () => void, identity: { readonly plugins?: string }): Route[] {
  const layerOf = (body: Record<string, unknown>) => {
    const layer = body.layer;
    if (!layer || typeof layer !== 'object') throw new DsecError('DSEC_AGENT_REQUEST', { message: 'body must be {"layer": {...}}' });
    return layer as LayerModel;
  };
  return [
    route('GET', '/v1/health', async () => ({ ok: true, pid: process.pid, ...identity })),
    route('GET', '/v1/node', async () => agent.nodeInfo()),
    route('GET', '/v1/node/usage', async () => agent.nodeUsage()),
    route('GET', '/v1/layers', async () => agent.layers.listLayers()),
    route('POST', '/v1/layers/digest', async ({ body }) => ({ digest: await agent.layers.digestLayer(layerOf(body)) })),
    route('POST', '/v1/layers', async ({ body }) => agent.layers.publishLayer(layerOf(body))),
    route('POST', '/v1/layers/squash', async ({ body }) => agent.layers.squashLayers(body.layers)),
    route('GET', '/v1/storage', async () => agent.layers.storageStats()),
    route('POST', '/v1/layers/gc', async ({ body }) => agent.layers.gcLayers(body)),
    route('GET', '/v1/layers/:name/:version/listing', async ({ params }) => agent.layers.layerListing(params.name, params.version)),
    route('DELETE', '/v1/layers/:name/:version', async ({ params }) => {
      await agent.layers.unpublishLayer(params.name, params.version);
      return { ok: true };
    }),
    route('GET', '/v1/pools', async () => agent.claims.listPools()),
    route('PUT', '/v1/pools/:fleet', async ({ params, body }) => agent.claims.setPool(params.fleet, body)),
    route('DELETE', '/v1/pools/:fleet', async ({ params, query }) => agent.claims.deletePool(params.fleet, query.get('lineage'))),
    route('POST', '/v1/pools/:fleet/acquire', async ({ params, body, signal }) => agent.claims.acquire(params.fleet, body, signal)),
    route('GET', '/v1/sandboxes', async ({ query }) => agent.list(labelSelector(query), holderQuery(query))),
    route('POST', '/v1/sandboxes', async ({ body }) => agent.createSandbox(body.spec)),
    // Before /v1/sandboxes/:id: "pause" and "resume" are not sandbox ids here.
    route('POST', '/v1/sandboxes/pause', async ({ body }) => agent.pauseSandboxes(body)),
    route('POST', '/v1/sandboxes/resume', async ({ body }) => agent.resumeSandboxes(body)),
    route('GET', '/v1/sandboxes/:id', async ({ params }) => agent.get(params.id)),
    route('PATCH', '/v1/sandboxes/:id', async ({ params, body }) => agent.updateSandbox(params.id, body)),
    route('DELETE', '/v1/sandboxes/:id', async ({ params, query }) => agent.destroySandbox(params.id, { unlessClaimed: query.get('unlessClaimed') === '1' })),
    route('POST', '/v1/sandboxes/:id/exec', async ({ params, body, signal }) => {
      // `stream: true`: the output as it comes (NDJSON); either way the command dies if the caller hangs up.
      if (body.stream !== true) return agent.calls.exec(params.id, withoutStream(body), { signal });
      return new Streamed(async (emit, streamSignal) => {
        let dropped = false;
        const result = await agent.calls.exec(params.id, withoutStream(body), {
          signal: streamSignal,
          onStart: (handle, pid) => void emit({ event: 'start', handle, pid }),
          onOutput: (stream, chunk) => {
            if (!emit({ event: stream, data: chunk.toString('base64') })) dropped = true;
          },
        });
        emit({ event: 'exit', result: { ...result, ...(dropped ? { truncated: true } : {}) } });
      });
    }),
    ...processRoutes(agent),
    route('GET', '/v1/sandboxes/:id/files', async ({ params, query }) => agent.calls.readFile(params.id, fileQuery(query))),
    route('PUT', '/v1/sandboxes/:id/files', async ({ params, body }) => agent.calls.writeFile(params.id, body), MAX_FILE_BODY_BYTES),
    route('POST', '/v1/functions/:fleet/invoke', async ({ params, body }) => agent.calls.invoke(params.fleet, body), MAX_FILE_BODY_BYTES),
    route('POST', '/v1/sandboxes/:id/snapshot', async ({ params, body }) => agent.layers.snapshotSandbox(params.id, body)),
    route('POST', '/v1/sandboxes/:id/pause', async ({ params }) => agent.pauseSandbox(params.id)),
    route('POST', '/v1/sandboxes/:id/resume', async ({ params }) => agent.resumeSandbox(params.id)),
    route('POST', '/v1/sandboxes/:id/claim', async ({ params, body }) => agent.claims.claim(params.id, body)),
    route('DELETE', '/v1/sandboxes/:id/claim', async ({ params }) => agent.claims.unclaim(params.id)),
    route('POST', '/v1/sandboxes/:id/release', async ({ params, body }) => agent.claims.release(params.id, body)),
    route('POST', '/v1/sandboxes/:id/renew', async ({ params, body }) => agent.claims.renew(params.id, body)),
    route('POST', '/v1/shutdown', async () => {
      setImmediate(onShutdown);
      return { ok: true };
    }),
  ];
}

/** `?path=/etc/hosts&maxBytes=1024` -> {path, maxBytes}; the agent checks both. */
function fileQuery(query: URLSearchParams): { path: string | null; maxBytes?: number; holder?: string } {
  const maxBytes = query.get('maxBytes');
  if (maxBytes !== null && !/^[0-9]+$/.test(maxBytes)) throw new DsecError('DSEC_AGENT_REQUEST', { message: `maxBytes must be a whole number, got ${JSON.stringify(maxBytes)}` });
  const holder = query.get('holder');
  return { path: query.get('path'), ...(maxBytes !== null ? { maxBytes: Number(maxBytes) } : {}), ...(holder !== null ? { holder } : {}) };
}

/** `?holder=NAME`: only the sandboxes it holds. */
function holderQuery(query: URLSearchParams): { holder?: string } {
  const holder = query.get('holder');
  return holder === null ? {} : { holder };
}

/** `?label=k=v&label=k2=v2` -> {k: v, k2: v2}. */
function labelSelector(query: URLSearchParams): Record<string, string> {
  const selector: Record<string, string> = {};
  for (const pair of query.getAll('label')) {
    const eq = pair.indexOf('=');
    if (eq < 1) throw new DsecError('DSEC_AGENT_REQUEST', { message: `label selector ${JSON.stringify(pair)} must be key=value` });
    selector[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return selector;
}

async function handle(routes: readonly Route[], req: http.IncomingMessage, res: http.ServerResponse, log: Logger): Promise<void> {
  const started = performance.now();
  try {
    const url = new URL(req.url ?? '/', 'http://agent');
    const matching = routes.filter((candidate) => candidate.pattern.test(url.pathname));
    const found = matching.find((candidate) => candidate.method === req.method);
    if (!found) {
      const status = matching.length > 0 ? 405 : 404;
      const message = matching.length > 0 ? `${req.method} is not allowed on ${url.pathname}` : `no route ${req.method} ${url.pathname}`;
      return sendError(res, status, new DsecError('DSEC_AGENT_REQUEST', { message }));
    }
    const body = await readBody(req, found.maxBodyBytes);
    const match = found.pattern.exec(url.pathname)!;
    const params = Object.fromEntries(found.names.map((name, index) => [name, decodeSegment(match[index + 1])]));
    const hangUp = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) hangUp.abort();
    });
    const result = await found.handler({ params, query: url.searchParams, body, signal: hangUp.signal });
    if (result instanceof Streamed) return await stream(res, result, hangUp.signal, log);
    send(res, 200, result ?? { ok: true });
  } catch (error) {
    if (error instanceof BodyError) return sendError(res, error.status, new DsecError('DSEC_AGENT_REQUEST', { message: error.message }));
    if (error instanceof DsecError) return sendError(res, STATUS_BY_CODE[error.code] ?? 500, error);
    log.warn(`${req.method} ${req.url}: ${(error as Error).stack ?? String(error)}`);
    sendError(res, 500, new DsecError('DSEC_AGENT_INTERNAL', { message: (error as Error).message }));
  } finally {
    log.debug(`${req.method} ${req.url} ${res.statusCode} ${Math.round(performance.now() - started)} ms`);
  }
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new BodyError(400, `malformed path segment ${JSON.stringify(segment)}`);
  }
}

class BodyError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

async function readBody(req: http.IncomingMessage, limit: number): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new BodyError(413, `the request body is over ${limit} bytes`);
    chunks.push(chunk);
  }
  if (size === 0) return {};
  const text = Buffer.concat(chunks).toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new BodyError(400, `the request body is not valid JSON: ${(error as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new BodyError(400, 'the request body must be a JSON object');
  return parsed as Record<string, unknown>;
}

/** The request without `stream` (the route's switch, not part of what it asks). */
function withoutStream(body: Record<string, unknown>): Record<string, unknown> {
  const { stream: _stream, ...rest } = body;
  return rest;
}

/**
 * Answer with NDJSON as the producer emits. The headers wait for the first
 * event, so a call refused at once gets its error status like any other.
 */
async function stream(res: http.ServerResponse, streamed: Streamed, signal: AbortSignal, log: Logger): Promise<void> {
  const emit = (event: unknown): boolean => {
    if (res.destroyed || res.writableEnded) return false;
    if (!res.headersSent) res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
    if (res.writableLength > MAX_UNREAD_STREAM_BYTES) return false;
    res.write(`${JSON.stringify(event)}\n`);
    return true;
  };
  try {
    await streamed.produce(emit, signal);
  } catch (error) {
    if (!res.headersSent) throw error;
    const dsecError = error instanceof DsecError ? error : new DsecError('DSEC_AGENT_INTERNAL', { message: (error as Error).message });
    if (!(error instanceof DsecError)) log.warn(`a streamed answer failed: ${(error as Error).stack ?? String(error)}`);
    emit({ event: 'error', error: { code: dsecError.code, message: dsecError.message, params: dsecError.params } });
  }
  if (!res.headersSent) res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
  res.end();
}

function send(res: http.ServerResponse, status: number, value: unknown): void {
  if (res.headersSent) return;
  const text = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res: http.ServerResponse, status: number, error: DsecError): void {
  if (status === 413 || status === 401) {
    // Stop reading the rest of an oversized or unauthenticated upload: answer, then hang up.
    const socket = res.req.socket;
    res.setHeader('connection', 'close');
    res.on('finish', () => socket?.destroy());
  }
  send(res, status, { error: { code: error.code, message: error.message, params: error.params } });
}
