/**
 * One agent per root. The lock is a listening socket in Linux's abstract
 * namespace, named after the root's real path: binding it is atomic, and the
 * kernel frees it when the process ends, SIGKILL included, so there is never
 * a stale lock to take over. (A pid file cannot do this: two agents starting
 * after a crash both see the dead holder, both remove its file, and both go
 * on, each believing it owns the root.) Abstract names are per network
 * namespace; every agent and client of a root runs in the host's.
 */
import { createHash } from 'node:crypto';
import { realpathSync } from 'node:fs';
import net from 'node:net';

/** True when this process now holds the root; false when a live process does. */
export function lockAgentRoot(root: string): Promise<boolean> {
  const name = `\0dsec-agent-${createHash('sha256').update(realpathSync(root)).digest('hex')}`;
  const server = net.createServer();
  return new Promise((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) => (error.code === 'EADDRINUSE' ? resolve(false) : reject(error)));
    // Held until the process exits; it must not keep the process alive by itself.
    server.listen(name, () => resolve(true));
    server.unref();
  });
}
