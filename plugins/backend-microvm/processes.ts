/**
 * Background commands (the `process` hook) and persistent shells (the
 * `session` hook) in a microVM, through its guest agent's session. They live
 * in the guest agent's memory, so they outlive the call, a pause and resume
 * (the VM's memory is saved with them) and a node agent restart: each is
 * reached again by handle over the next session.
 */
import type { ProcessAnswers, ProcessCall, SessionAnswers, SessionCall } from '../../core/plugin-api.js';
import { DEFAULT_EXEC_TIMEOUT_MS, execOutput, placeOf, processRequest, signalNumber, signalOf, type Target } from './calls.js';

/** The `process` hook's ops. */
export async function processInVm(target: Target, call: ProcessCall): Promise<ProcessAnswers[ProcessCall['op']]> {
  const { session } = target;
  switch (call.op) {
    case 'start': {
      // A background command has no timeout unless it asks for one.
      const request = { ...processRequest(target, call.request), timeoutMs: call.request.timeoutMs ?? 0 };
      return session.spawn(request, call.onOutput ? { onOutput: call.onOutput } : {});
    }
    case 'input':
      await session.input(call.handle, call.data ?? Buffer.alloc(0), call.eof === true);
      return true;
    case 'signal':
      await session.signal(call.handle, signalNumber(call.signal));
      return true;
    case 'resize':
      await session.resize(call.handle, call.rows, call.cols);
      return true;
    case 'wait': {
      const result = await waitAborted(session.wait(call.handle, call.timeoutMs), call.signal);
      return result ? execOutput(result) : { running: true };
    }
    case 'get': {
      const snapshot = await session.output(call.handle);
      return {
        handle: call.handle,
        pid: snapshot.pid,
        running: snapshot.running,
        stdout: snapshot.stdout,
        stderr: snapshot.stderr,
        truncated: snapshot.stdoutTruncated || snapshot.stderrTruncated,
        ...(snapshot.running
          ? {}
          : {
              exitCode: snapshot.exitCode ?? null,
              signal: signalOf(snapshot.signal, snapshot.timedOut === true, snapshot.exitCode),
              timedOut: snapshot.timedOut === true,
              durationMs: snapshot.durationMs ?? 0,
            }),
      };
    }
    case 'list':
      return (await session.processes()).map((entry) => ({
        handle: entry.handle,
        pid: entry.pid,
        running: entry.running,
        ...(entry.running ? {} : { exitCode: entry.exitCode ?? null, signal: signalOf(entry.signal, false, entry.exitCode) }),
        command: [entry.path, ...entry.args],
        ageMs: entry.ageMs,
      }));
    case 'forget':
      await session.forget(call.handle);
      return true;
  }
}

/** A wait the caller gave up on resolves to undefined at once (the process runs on). */
function waitAborted<T>(waiting: Promise<T>, signal?: AbortSignal): Promise<T | undefined> {
  if (!signal) return waiting;
  return new Promise<T | undefined>((resolve, reject) => {
    if (signal.aborted) return resolve(undefined);
    const onAbort = () => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    waiting.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** The `session` hook's ops. */
export async function sessionInVm(target: Target, call: SessionCall): Promise<SessionAnswers[SessionCall['op']]> {
  const { session, sandbox } = target;
  switch (call.op) {
    case 'open': {
      const place = placeOf(sandbox, { env: call.options.env ?? {}, ...(call.options.cwd ? { workdir: call.options.cwd } : {}) });
      const opened = await session.openSession({ handle: call.id, ...place, ...(call.options.shell ? { shell: call.options.shell } : {}) });
      return { id: opened.handle, pid: opened.pid, shell: opened.shell };
    }
    case 'run': {
      const result = await session.runInSession(call.id, call.request.command, {
        timeoutMs: call.request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_MS,
        maxOutputBytes: call.request.maxOutputBytes ?? target.defaultCap,
        ...(call.onOutput ? { onOutput: call.onOutput } : {}),
        ...(call.signal ? { signal: call.signal } : {}),
      });
      return {
        exitCode: result.exitCode,
        stdout: result.stdout,
        stderr: result.stderr,
        truncated: result.truncated,
        timedOut: result.timedOut,
        interrupted: result.interrupted,
        ended: result.ended,
        durationMs: result.durationMs,
      };
    }
    case 'interrupt':
      await session.interruptSession(call.id);
      return true;
    case 'close':
      await session.closeSession(call.id);
      return true;
    case 'list':
      return (await session.sessions()).map((entry) => ({
        id: entry.handle,
        pid: entry.pid,
        shell: entry.shell,
        busy: entry.busy,
        ended: entry.ended,
        ...(entry.cwd !== undefined ? { cwd: entry.cwd } : {}),
      }));
  }
}
