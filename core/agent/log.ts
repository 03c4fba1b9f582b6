/**
 * The agent's log: one timestamped line per event, appended to
 * `<root>/agent.log`. Writes are synchronous so the last lines before a crash
 * are on disk, and the volume is low (one line per sandbox step).
 */
import { openSync, writeSync } from 'node:fs';
import type { Logger } from '../hooks.js';

export function fileLogger(file: string, options: { debug?: boolean } = {}): Logger & { fd: number } {
  const fd = openSync(file, 'a', 0o600);
  const write = (level: string, message: string) => {
    try {
      writeSync(fd, `${new Date().toISOString()} ${level} ${message}\n`);
    } catch {
      // a full disk must not take the agent down
    }
  };
  return {
    fd,
    info: (message) => write('info ', message),
    warn: (message) => write('warn ', message),
    debug: (message) => {
      if (options.debug) write('debug', message);
    },
  };
}
