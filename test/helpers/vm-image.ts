/**
 * The full-VM backend's test image: the same builder the benchmarks use
 * (bench/lib is part of the compiled tree, test/ is not), re-exported under
 * the name tests import; and a sweep for qemu processes a failed test left.
 */
import { readdirSync, readFileSync } from 'node:fs';

export * from '../../bench/lib/vm-image.js';
export { GUEST_AGENT_PORT } from '../../bench/lib/vm-image-parts.js';

/** Pids of live qemu processes whose command line mentions `dir` (their overlay, sockets, logs are there). */
export function qemuProcessesUnder(dir: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      const argv = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      if (argv[0]?.includes('qemu-system') && argv.some((arg) => arg.includes(dir))) found.push(Number(name));
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

/** SIGKILL every qemu under `dir` (a test's safety net). Never throws. */
export function killQemuUnder(dir: string): void {
  for (const pid of qemuProcessesUnder(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}
