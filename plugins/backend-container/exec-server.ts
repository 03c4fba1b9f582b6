/**
 * The exec server of a container sandbox: dsec-guest as the container's
 * PID 1 (`--fds 3,4`), reached through two FIFOs in the sandbox's host
 * folder. exec, the file calls, background commands and sessions go through
 * it: no runtime process per call.
 *
 * Why it can be trusted (docs/plugins/backend-container.md has the whole
 * argument): the FIFOs live in the sandbox's folder on the host (0700,
 * outside the container's mount namespace), so no process of the sandbox can
 * open them; the server holds them as fds 3 and 4, close-on-exec, and is not
 * dumpable, so /proc/1/fd cannot be opened from inside; as PID 1 of the
 * sandbox's pid namespace it ignores every signal sent from inside (it
 * handles only SIGCHLD), so `kill -9 1` or `kill -1` cannot stop it; its
 * binary is the host's, bound read-only, so replacing /bin/sh or anything
 * else in the sandbox changes nothing it reports. After an agent restart the
 * FIFOs are opened again and a hello starts a fresh session (the server
 * drops what it queued for the last agent and kills the foreground commands
 * nobody waits for any more): nothing the sandbox wrote is trusted.
 *
 * A sandbox made before the exec server existed (or whose server does not
 * answer) is driven as before: `runc exec`, and the native helper for files.
 */
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DsecError, GuestSession, openFifoTransport, type SandboxContext } from '../../core/plugin-api.js';

/** How long the first sync and hello of a session may take; past it the call falls back (exec) or fails. */
const OPEN_TIMEOUT_MS = 5_000;
/** After a failed open, the next try waits this long (calls meanwhile fall back at once). */
const RETRY_AFTER_MS = 10_000;

/** The two FIFOs of a sandbox's exec server, in its host folder: requests in, answers out. */
export function execServerFifos(dir: string): { readonly in: string; readonly out: string } {
  return { in: path.join(dir, 'guest.in'), out: path.join(dir, 'guest.out') };
}

/** The user the sandbox's commands run as, resolved on the host at create time (before any sandbox code ran). */
export interface SandboxUser {
  readonly uid: number;
  readonly gid: number;
  readonly groups: readonly number[];
  readonly home: string;
}

/** What the backend records of a sandbox's exec server (in sandbox.backend.execServer). */
export interface ExecServerRecord {
  readonly transport: 'fifo';
  readonly user: SandboxUser;
}

export function execServerOf(sandbox: SandboxContext): ExecServerRecord | undefined {
  const record = sandbox.backend.execServer as ExecServerRecord | undefined;
  return record && record.transport === 'fifo' ? record : undefined;
}

/** One session per sandbox, opened on first use (after an agent restart too) and again after it closed. */
export class ExecServers {
  private readonly sessions = new Map<string, Promise<GuestSession>>();
  private readonly failedAt = new Map<string, number>();

  /**
   * The sandbox's session, or undefined when it has no exec server, or its
   * server did not answer lately (the caller falls back to runc exec).
   */
  async tryGet(sandbox: SandboxContext): Promise<GuestSession | undefined> {
    if (!execServerOf(sandbox)) return undefined;
    const failed = this.failedAt.get(sandbox.spec.id);
    if (failed !== undefined && Date.now() - failed < RETRY_AFTER_MS) return undefined;
    try {
      return await this.get(sandbox);
    } catch {
      this.failedAt.set(sandbox.spec.id, Date.now());
      return undefined;
    }
  }

  /** The sandbox's session; DSEC_BACKEND_UNSUPPORTED without an exec server, DSEC_GUEST_UNREACHABLE when it does not answer. */
  get(sandbox: SandboxContext): Promise<GuestSession> {
    const id = sandbox.spec.id;
    if (!execServerOf(sandbox)) {
      return Promise.reject(
        new DsecError('DSEC_BACKEND_UNSUPPORTED', { backend: 'container', operation: `background commands and sessions in sandbox ${id}: it was created without an exec server (by an older dsec); replace it` }),
      );
    }
    let session = this.sessions.get(id);
    if (!session) {
      session = this.open(sandbox);
      this.sessions.set(id, session);
      session.then(
        (open) => {
          this.failedAt.delete(id);
          open.onClose(() => {
            if (this.sessions.get(id) === session) this.sessions.delete(id);
          });
        },
        () => {
          if (this.sessions.get(id) === session) this.sessions.delete(id);
        },
      );
    }
    return session;
  }

  /** Close a sandbox's session (it is being destroyed). */
  forget(id: string): void {
    const session = this.sessions.get(id);
    this.sessions.delete(id);
    this.failedAt.delete(id);
    void session?.then((open) => open.close(), () => undefined);
  }

  private async open(sandbox: SandboxContext): Promise<GuestSession> {
    const fifos = execServerFifos(sandbox.dir);
    const deadline = Date.now() + OPEN_TIMEOUT_MS;
    // Right after `runc run` the server may not have reached its poll loop yet: the FIFOs are there, the hello waits.
    for (;;) {
      try {
        const transport = await openFifoTransport(fifos.in, fifos.out);
        return await GuestSession.open(transport, { id: sandbox.spec.id, timeoutMs: Math.max(500, deadline - Date.now()) });
      } catch (error) {
        if (Date.now() >= deadline) throw error;
        await sleep(20);
      }
    }
  }
}
