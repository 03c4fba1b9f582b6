/**
 * Telling whether a pid is (still) the agent of a given root, by its command
 * line, so a recycled pid is never mistaken for the agent and signalled.
 */
import { readFileSync } from 'node:fs';

export function isAgentProcess(pid: number, root: string): boolean {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    const rootAt = argv.indexOf('--root');
    return argv.some((arg) => arg.endsWith('agent/main.js')) && rootAt >= 0 && argv[rootAt + 1] === root;
  } catch {
    return false;
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
