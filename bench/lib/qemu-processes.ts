/**
 * qemu processes on this host, found by a folder their command line names
 * (a test agent's or a benchmark's temp folder: their disks, sockets and
 * logs are there). Benchmarks and tests use it to check that nothing is
 * left and, as a last resort, to kill what a failed run left behind.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** PF_EXITING (include/linux/sched.h): set as a process begins to exit, before it is a zombie. */
const PF_EXITING = 0x4;

/** Whether a process is alive: neither exiting (a SIGKILLed qemu takes a while to free its guest memory) nor a zombie. */
export function isProcessAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[0] !== 'Z' && fields[0] !== 'X' && (Number(fields[6]) & PF_EXITING) === 0;
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
