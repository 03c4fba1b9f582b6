/**
 * What the microVM tests check and sweep on the host: qemu processes whose
 * command line names a folder (a test agent's temp folder), and the qemu pid
 * of a sandbox from its handle.
 */
export { isProcessAlive as isRunning, killQemuUnder, qemuProcessesUnder } from '../../../bench/lib/qemu-processes.js';

/** The qemu pid in a microVM sandbox's handle (`qemu pid 123 (tcg)`). */
export function pidOfHandle(handle: string | undefined): number {
  const pid = Number(/qemu pid (\d+)/.exec(handle ?? '')?.[1]);
  if (!Number.isInteger(pid)) throw new Error(`no qemu pid in the handle ${JSON.stringify(handle)}`);
  return pid;
}
