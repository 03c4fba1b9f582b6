/**
 * qemu processes on this host, found by a folder their command line names
 * (a test agent's or a benchmark's temp folder: their disks, sockets and
 * logs are there). Benchmarks and tests use it to check that nothing is
 * left and, as a last resort, to kill what a failed run left behind.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Whether a process is alive (a zombie is not). */
export function isProcessAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}

/** Pids of live qemu processes whose command line mentions `dir`. */
export function qemuProcessesUnder(dir: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      if (argv[0]?.includes('qemu-system') && argv.some((arg) => arg.includes(dir)) && isProcessAlive(Number(name))) found.push(Number(name));
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

/** SIGKILL every qemu under `dir`; returns how many there were. Never throws. */
export function killQemuUnder(dir: string): number {
  const pids = qemuProcessesUnder(dir);
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  return pids.length;
}
