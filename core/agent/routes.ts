/**
 * What a route of the agent's API is: a method, a path pattern with named
 * parts, a handler over the parsed request, and the largest body it reads.
 * A handler answers a value (sent as JSON) or a Streamed (NDJSON lines as
 * they come, for output that streams).
 */
import type { StreamEvent } from '../live.js';

/** Request bodies above this are refused (413): layers travel as paths, not bytes. */
export const MAX_BODY_BYTES = 8 * 1024 * 1024;

export interface ParsedRequest {
  readonly params: Record<string, string>;
  readonly query: URLSearchParams;
  readonly body: Record<string, unknown>;
  /** Aborted when the caller hangs up before the answer (a waiting acquire leaves the queue, an exec is killed). */
  readonly signal: AbortSignal;
}

export type Handler = (request: ParsedRequest) => Promise<unknown>;

export interface Route {
  readonly method: string;
  readonly pattern: RegExp;
  readonly names: readonly string[];
  readonly handler: Handler;
  /** The largest body this route reads. @default MAX_BODY_BYTES */
  readonly maxBodyBytes: number;
}

export function route(method: string, path: string, handler: Handler, maxBodyBytes = MAX_BODY_BYTES): Route {
  const names: string[] = [];
  const pattern = new RegExp(
    `^${path.replace(/:(\w+)/g, (_whole, name: string) => {
      names.push(name);
      return '([^/]+)';
    })}$`,
  );
  return { method, pattern, names, handler, maxBodyBytes };
}

/**
 * An answer that streams: `produce` emits events (one JSON line each) until
 * it resolves. `emit` returns false once the caller has this much unread
 * (a slow reader): the event is dropped, never buffered without bound, and
 * the producer says so in its last event. An error before the first event
 * is answered as any other error (with its status); one after it is the last
 * line, `{"event":"error",...}`.
 */
export class Streamed {
  constructor(readonly produce: (emit: (event: StreamEvent) => boolean, signal: AbortSignal) => Promise<void>) {}
}

/** How much a streamed answer may have unread by its caller before events are dropped. */
export const MAX_UNREAD_STREAM_BYTES = 8 * 1024 * 1024;
