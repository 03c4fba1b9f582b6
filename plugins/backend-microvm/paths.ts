/**
 * Where a microVM's files are. Everything lives in the sandbox's folder
 * (removed after destroy), except the two unix sockets when that folder's
 * path is too long for one (sun_path holds 107 bytes): they then go to a
 * short folder under the system's temp dir, named by a hash of the sandbox
 * folder so a restarted agent finds them again.
 */
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { qemuPaths, type QemuPaths } from '../../core/plugin-api.js';

const MAX_SOCKET_PATH = 107;

export interface MicrovmPaths {
  readonly qemu: QemuPaths;
  /** The guest agent's unix socket (qemu listens on it). */
  readonly agentSocket: string;
  /** The saved VM while it is paused. */
  readonly stateFile: string;
  /** The raw ext4 upper disk (`upper: disk`). */
  readonly upperDisk: string;
  /** The short socket folder, when the sandbox folder is too long for sockets. */
  readonly socketDir?: string;
}

export function microvmPaths(sandboxDir: string): MicrovmPaths {
  const longest = path.join(sandboxDir, 'qemu.qmp');
  const socketDir = longest.length > MAX_SOCKET_PATH - 8 ? shortSocketDir(sandboxDir) : undefined;
  const sockets = socketDir ?? sandboxDir;
  const qemu = qemuPaths(sandboxDir);
  return {
    qemu: { ...qemu, qmp: path.join(sockets, 'qemu.qmp') },
    agentSocket: path.join(sockets, 'agent.sock'),
    stateFile: path.join(sandboxDir, 'vm.state'),
    upperDisk: path.join(sandboxDir, 'upper.img'),
    ...(socketDir ? { socketDir } : {}),
  };
}

function shortSocketDir(sandboxDir: string): string {
  const hash = createHash('sha256').update(path.resolve(sandboxDir)).digest('hex').slice(0, 16);
  return path.join(tmpdir(), `dsec-vm-${hash}`);
}
