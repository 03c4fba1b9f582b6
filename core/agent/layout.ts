/**
 * The files of an agent root, in one place:
 *
 *   <root>/agent.sock        the API (0600)
 *   <root>/agent.pid         the daemon's pid
 *   <root>/agent.log         its log
 *   <root>/sandboxes/<id>/   one folder per sandbox (record.json, backend files)
 *   <root>/builds/<identity>.json   what each layer build gave (build.ts)
 *   <root>/snapshots/, inspect/    short-lived snapshot copies and layer readers (cleaned at start)
 *   <root>/<plugin name>/    each plugin's own data
 */
import { closeSync, fstatSync, openSync, statSync } from 'node:fs';
import path from 'node:path';

export function agentPaths(root: string) {
  const absolute = path.resolve(root);
  return {
    root: absolute,
    socket: path.join(absolute, 'agent.sock'),
    pidFile: path.join(absolute, 'agent.pid'),
    logFile: path.join(absolute, 'agent.log'),
    sandboxes: path.join(absolute, 'sandboxes'),
  };
}

/** The daemon's exit code when another agent already serves its root. */
export const EXIT_ALREADY_RUNNING = 3;

/** Unix socket paths are limited to 107 bytes (sun_path). */
const MAX_SOCKET_PATH = 100;
const dirHandles = new Map<string, number>();

/**
 * A path to connect to or bind the socket by, short enough for sun_path: the
 * path itself, or for a deep project folder `/proc/self/fd/<N>/agent.sock`
 * through a descriptor held on the folder (the kernel resolves it as usual).
 */
export function socketAddress(socketPath: string): string {
  if (Buffer.byteLength(socketPath) <= MAX_SOCKET_PATH) return socketPath;
  const dir = path.dirname(socketPath);
  let fd = dirHandles.get(dir);
  // The folder may have been removed and made again since: then hold the new one.
  if (fd !== undefined && !sameInode(fd, dir)) {
    closeSync(fd);
    fd = undefined;
  }
  if (fd === undefined) {
    fd = openSync(dir, 'r');
    dirHandles.set(dir, fd);
  }
  return `/proc/self/fd/${fd}/${path.basename(socketPath)}`;
}

function sameInode(fd: number, dir: string): boolean {
  try {
    const held = fstatSync(fd);
    const now = statSync(dir);
    return held.ino === now.ino && held.dev === now.dev;
  } catch {
    return false;
  }
}
