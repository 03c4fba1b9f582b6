/**
 * How the CLI talks to people and to programs: colours only on a TTY (and
 * never with --no-color or NO_COLOR), JSON on stdout with `--json`, errors on
 * stderr with their code, and the Terraform-style confirmation prompt.
 */
import { createInterface } from 'node:readline/promises';
import pc from 'picocolors';
import { formatDiagnostics } from '../config/index.js';
import { isDsecError } from '../errors.js';

export type Colors = ReturnType<typeof pc.createColors>;

export function wantsColor(flag: boolean | undefined): boolean {
  if (flag === false || process.env.NO_COLOR) return false;
  return Boolean(process.stdout.isTTY);
}

export function colors(enabled: boolean): Colors {
  return pc.createColors(enabled);
}

/** Columns padded to their widest cell, two spaces apart, no trailing blanks. Colour cells after, not before. */
export function table(rows: readonly (readonly string[])[]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)));
  return rows.map((row) => row.map((cell, i) => cell.padEnd(widths[i])).join('  ').trimEnd()).join('\n') + '\n';
}

/** Deterministic JSON for machine output: one document, 2-space indent, newline. */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Print an error the way a user can act on it: code, message, every located diagnostic. */
export function printError(error: unknown, options: { json: boolean; color: boolean }): void {
  const c = colors(options.color);
  if (options.json) {
    const body = isDsecError(error)
      ? error.toJSON()
      : { code: 'DSEC_INTERNAL', message: error instanceof Error ? error.message : String(error) };
    process.stdout.write(`${JSON.stringify({ error: body }, null, 2)}\n`);
    return;
  }
  if (isDsecError(error)) {
    process.stderr.write(`${c.red(c.bold('Error:'))} ${error.message} ${c.dim(`[${error.code}]`)}\n`);
    if (error.diagnostics.length > 0) {
      process.stderr.write(`${formatDiagnostics(error.diagnostics, { color: options.color })}\n`);
    }
    return;
  }
  const message = error instanceof Error ? (error.stack ?? error.message) : String(error);
  process.stderr.write(`${c.red(c.bold('Error:'))} internal error, please report it:\n${message}\n`);
}

/** Terraform's confirmation: only the literal `yes` proceeds. */
export async function confirm(question: string, detail: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    process.stderr.write(`\n${question}\n  ${detail}\n  Only 'yes' will be accepted to approve.\n\n`);
    const answer = await rl.question('  Enter a value: ');
    return answer.trim() === 'yes';
  } finally {
    rl.close();
  }
}
