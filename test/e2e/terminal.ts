/**
 * Running `dsec` on a real pseudo-terminal (util-linux `script`), and reading
 * what a person would see: the output is replayed on a small screen model
 * that understands the few control sequences the CLI and its progress bar
 * write (carriage return, line feed, cursor column, erase line, save and
 * restore cursor). Anything garbled on a terminal is garbled here too.
 */
import { spawn } from 'node:child_process';
import { DSEC_BIN, type Project, type RunResult } from './harness.js';

/** `dsec args` with stdin, stdout and stderr on one pty; `input` is typed in. `stdout` holds the raw bytes. */
export function runOnTerminal(project: Project, args: readonly string[], input = ''): Promise<RunResult> {
  const command = [process.execPath, DSEC_BIN, ...args].map((word) => `'${word.replace(/'/g, `'\\''`)}'`).join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['--quiet', '--return', '--command', command, '/dev/null'], {
      cwd: project.dir,
      env: { ...process.env, NO_COLOR: '1', TERM: 'xterm', COLUMNS: '160', LINES: '50' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(input);
  });
}

/** The lines left on the screen once `output` was written to an empty terminal (trailing blanks trimmed). */
export function screen(output: string): string[] {
  const rows: string[][] = [[]];
  let row = 0;
  let col = 0;
  let saved = { row: 0, col: 0 };
  const line = () => (rows[row] ??= []);
  for (let i = 0; i < output.length; i += 1) {
    const ch = output[i];
    if (ch === '\x1b') {
      const csi = /^\x1b\[([?\d;]*)([A-Za-z])/.exec(output.slice(i, i + 16));
      if (csi) {
        const [whole, params, op] = csi;
        const n = Number.parseInt(params, 10);
        if (op === 'G') col = (Number.isNaN(n) ? 1 : n) - 1;
        else if (op === 'K' && params === '2') rows[row] = [];
        else if (op === 'K') line().length = Math.min(line().length, col);
        else if (op === 'J') {
          line().length = Math.min(line().length, col);
          rows.length = row + 1;
        }
        else if (op === 'A') row = Math.max(0, row - (Number.isNaN(n) ? 1 : n));
        else if (op === 'B') row += Number.isNaN(n) ? 1 : n;
        i += whole.length - 1;
        continue;
      }
      if (output[i + 1] === '7') saved = { row, col };
      if (output[i + 1] === '8') ({ row, col } = saved);
      i += 1;
      continue;
    }
    if (ch === '\r') col = 0;
    else if (ch === '\n') {
      row += 1;
      col = 0;
    } else if (ch >= ' ') {
      const current = line();
      while (current.length < col) current.push(' ');
      current[col] = ch;
      col += 1;
    }
  }
  const text = Array.from({ length: rows.length }, (_, r) => (rows[r] ?? []).join('').trimEnd());
  while (text.length > 0 && text[text.length - 1] === '') text.pop();
  return text;
}
