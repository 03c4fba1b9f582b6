/** The unix socket connect both guest clients use (sync: channel.ts; async: mux-transport.ts). */
import { createConnection, type Socket } from 'node:net';

/** Connect to a unix socket within `timeoutMs` (the guest agent's, or qemu's chardev for it). */
export function openSocket(path: string, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ path });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('connect timed out'));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (error) => {
      clearTimeout(timer);
      socket.destroy();
      reject(error);
    });
  });
}
