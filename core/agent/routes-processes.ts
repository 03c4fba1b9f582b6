/**
 * The agent's routes for background commands and sessions:
 *
 *   POST   /v1/sandboxes/:id/processes                   start one (`stream: true`: its output as it comes, to its exit)
 *   GET    /v1/sandboxes/:id/processes                   list them
 *   GET    /v1/sandboxes/:id/processes/:handle           its state and output so far (?encoding=base64)
 *   POST   /v1/sandboxes/:id/processes/:handle/stdin     {data? (base64), eof?}
 *   POST   /v1/sandboxes/:id/processes/:handle/signal    {signal}
 *   POST   /v1/sandboxes/:id/processes/:handle/resize    {rows, cols}
 *   POST   /v1/sandboxes/:id/processes/:handle/wait      {timeoutMs?}: its result, or {running: true}
 *   DELETE /v1/sandboxes/:id/processes/:handle           kill it, forget it
 *   POST   /v1/sandboxes/:id/sessions                    open a shell {cwd?, env?, shell?}
 *   GET    /v1/sandboxes/:id/sessions                    list them
 *   POST   /v1/sandboxes/:id/sessions/:sid/run           {command, timeoutMs?, maxOutputBytes?, stream?}
 *   POST   /v1/sandboxes/:id/sessions/:sid/interrupt
 *   DELETE /v1/sandboxes/:id/sessions/:sid
 *
 * The stdin, signal and resize routes also reach a foreground command
 * started with a stream (the handle is in its first event).
 */
import type { NodeAgent } from './agent.js';
import { route, Streamed, type Route } from './routes.js';

export function processRoutes(agent: NodeAgent): Route[] {
  const calls = agent.processes;
  return [
    route('POST', '/v1/sandboxes/:id/processes', async ({ params, body }) => {
      const { stream, ...request } = body;
      if (stream !== true) return calls.start(params.id, request);
      // Its output as it comes, then its end; a caller that hangs up leaves it running (it is a background command).
      return new Streamed(async (emit, streamSignal) => {
        let dropped = false;
        const started = await calls.start(params.id, request, (name, chunk) => {
          if (!emit({ event: name, data: chunk.toString('base64') })) dropped = true;
        });
        emit({ event: 'start', handle: started.handle, pid: started.pid });
        const result = await calls.wait(params.id, started.handle, { encoding: request.encoding, holder: request.holder }, streamSignal);
        emit({ event: 'exit', result: { ...result, handle: started.handle, ...(dropped ? { truncated: true } : {}) } });
      });
    }),
    route('GET', '/v1/sandboxes/:id/processes', async ({ params, query }) => calls.list(params.id, query.get('holder'))),
    route('GET', '/v1/sandboxes/:id/processes/:handle', async ({ params, query }) =>
      calls.get(params.id, params.handle, { encoding: query.get('encoding'), holder: query.get('holder') }),
    ),
    route('POST', '/v1/sandboxes/:id/processes/:handle/stdin', async ({ params, body }) => calls.input(params.id, params.handle, body)),
    route('POST', '/v1/sandboxes/:id/processes/:handle/signal', async ({ params, body }) => calls.signal(params.id, params.handle, body)),
    route('POST', '/v1/sandboxes/:id/processes/:handle/resize', async ({ params, body }) => calls.resize(params.id, params.handle, body)),
    route('POST', '/v1/sandboxes/:id/processes/:handle/wait', async ({ params, body, signal }) => calls.wait(params.id, params.handle, body, signal)),
    route('DELETE', '/v1/sandboxes/:id/processes/:handle', async ({ params, query }) => calls.forget(params.id, params.handle, query.get('holder'))),
    route('POST', '/v1/sandboxes/:id/sessions', async ({ params, body }) => calls.openSession(params.id, body)),
    route('GET', '/v1/sandboxes/:id/sessions', async ({ params, query }) => calls.listSessions(params.id, query.get('holder'))),
    route('POST', '/v1/sandboxes/:id/sessions/:sid/run', async ({ params, body, signal }) => {
      const { stream, ...request } = body;
      if (stream !== true) return calls.runInSession(params.id, params.sid, request, { signal });
      return new Streamed(async (emit, streamSignal) => {
        let dropped = false;
        const result = await calls.runInSession(params.id, params.sid, request, {
          signal: streamSignal,
          onOutput: (name, chunk) => {
            if (!emit({ event: name, data: chunk.toString('base64') })) dropped = true;
          },
        });
        emit({ event: 'exit', result: { ...result, ...(dropped ? { truncated: true } : {}) } });
      });
    }),
    route('POST', '/v1/sandboxes/:id/sessions/:sid/interrupt', async ({ params, query }) => calls.interruptSession(params.id, params.sid, query.get('holder'))),
    route('DELETE', '/v1/sandboxes/:id/sessions/:sid', async ({ params, query }) => calls.closeSession(params.id, params.sid, query.get('holder'))),
  ];
}
