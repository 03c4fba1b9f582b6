/**
 * The connection to a microVM's guest agent: one GuestSession (dsec-guest's
 * async mode, protocol 2) over qemu's chardev unix socket for the
 * virtio-serial port, carrying any number of calls at once.
 *
 * qemu's chardev takes one client at a time, so a VM has one session,
 * opened again (a new sync and hello) whenever the last one closed: a
 * guest that stopped answering (the session failed with
 * DSEC_GUEST_UNREACHABLE), a resume (a new qemu, a new socket), a restarted
 * node agent. The guest agent keeps its background processes and sessions
 * across that (they live in guest memory, saved with the VM on a pause);
 * only the foreground commands of the old connection are killed by the
 * new hello.
 */
import { DsecError, GuestSession, openSocketTransport } from '../../core/plugin-api.js';

/**
 * Connect to the socket and open a session: the socket is retried until it
 * accepts (qemu starting), then guest-sync-delimited until the agent answers
 * (a booting guest), then dsec-hello, all within `timeoutMs`.
 * DSEC_GUEST_UNREACHABLE naming the sandbox when it does not answer in time.
 */
export async function openGuestSession(socket: string, id: string, timeoutMs: number): Promise<GuestSession> {
  const deadline = Date.now() + timeoutMs;
  let transport;
  try {
    transport = await openSocketTransport(socket, timeoutMs);
  } catch (error) {
    const message = error instanceof DsecError ? String(error.params.message ?? error.message) : (error as Error).message;
    throw new DsecError('DSEC_GUEST_UNREACHABLE', { id, message }, { cause: error });
  }
  // GuestSession.open closes the transport when it fails.
  return GuestSession.open(transport, { id, timeoutMs: Math.max(500, deadline - Date.now()) });
}

/** One VM's session: kept while it is open, opened again (once, however many calls ask at the same time) after it closed. */
export class GuestLink {
  private current: Promise<GuestSession> | undefined;

  constructor(
    private readonly socket: string,
    private readonly id: string,
  ) {}

  /** Use this open session (the one the boot or the resume waited on). */
  adopt(session: GuestSession): void {
    this.close();
    this.track(Promise.resolve(session));
  }

  /** The open session, or a new one (`timeoutMs` for its sync and hello); an open that fails is its error. */
  async get(timeoutMs: number): Promise<GuestSession> {
    for (let tries = 0; ; tries++) {
      const current = this.current ?? this.track(openGuestSession(this.socket, this.id, timeoutMs));
      const session = await current;
      if (!session.closed || tries > 0) return session;
      // Closed since (a stream that broke): drop it, unless another caller already replaced it.
      if (this.current === current) this.current = undefined;
    }
  }

  /** Close the session (a pause, a destroy); the next get() opens a new one. */
  close(): void {
    const current = this.current;
    this.current = undefined;
    void current?.then((session) => session.close(), () => undefined);
  }

  private track(opening: Promise<GuestSession>): Promise<GuestSession> {
    this.current = opening;
    opening.then(
      (session) =>
        session.onClose(() => {
          if (this.current === opening) this.current = undefined;
        }),
      () => {
        if (this.current === opening) this.current = undefined;
      },
    );
    return opening;
  }
}
