/**
 * What the microVM tests check and sweep on the host: qemu processes whose
 * command line names a folder (a test agent's temp folder), and the qemu pid
 * of a sandbox from its handle.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Live (not zombie) qemu processes whose command line mentions `dir`. */
export function qemuProcessesUnder(dir: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8');
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      if (cmdline.startsWith('qemu-system') || cmdline.includes('/qemu-system')) {
        if (cmdline.includes(dir)) found.push(Number(name));
      }
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** SIGKILL every qemu of `dir` (a test's last resort, in afterAll). */
export function killQemusUnder(dir: string): void {
  for (const pid of qemuProcessesUnder(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}

/** The qemu pid in a microVM sandbox's handle (`qemu pid 123 (tcg)`). */
export function pidOfHandle(handle: string | undefined): number {
  const pid = Number(/qemu pid (\d+)/.exec(handle ?? '')?.[1]);
  if (!Number.isInteger(pid)) throw new Error(`no qemu pid in the handle ${JSON.stringify(handle)}`);
  return pid;
}

export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}
