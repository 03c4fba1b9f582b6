/**
 * Diagnostics the way compilers and CI annotations print them, one a line:
 * `dsec.yaml:12:15: error DSEC_CONFIG_UNKNOWN_LAYER at /environments/shell/layers/1: unknown layer 'pyton' (declared: base, hello)`.
 * File names are shown relative to the working directory when inside it.
 */
import path from 'node:path';
import pc from 'picocolors';
import type { Diagnostic } from '../errors.js';

export interface FormatOptions {
  /** Colour the severity and the code. @default false */
  readonly color?: boolean;
}

export function formatDiagnostics(diagnostics: readonly Diagnostic[], options: FormatOptions = {}): string {
  const colors = pc.createColors(options.color ?? false);
  return diagnostics
    .map((diagnostic) => {
      const where = diagnostic.location
        ? `${displayFile(diagnostic.location.file)}:${diagnostic.location.line}:${diagnostic.location.col}: `
        : '';
      const severity =
        diagnostic.severity === 'error' ? colors.red(colors.bold('error')) : colors.yellow(colors.bold('warning'));
      const at = diagnostic.path ? ` at ${diagnostic.path}` : '';
      return `${colors.bold(where)}${severity} ${colors.dim(diagnostic.code)}${at}: ${diagnostic.message}`;
    })
    .join('\n');
}

function displayFile(file: string): string {
  const relative = path.relative(process.cwd(), file);
  return relative && !relative.startsWith('..') && !path.isAbsolute(relative) ? relative : file;
}
