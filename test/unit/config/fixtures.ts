/**
 * Temp project folders for config tests: write files, load them, find
 * where a piece of text is (line:col, 1-based) to compare with diagnostics.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import type { Diagnostic } from '../../../core/errors.js';
import { isDsecError } from '../../../core/errors.js';
import { loadConfig } from '../../../core/config/index.js';

export const REPO = fileURLToPath(new URL('../../../', import.meta.url));
/** What a dsec.ts fixture imports: the definitions' source, run through tsx. */
export const DEFINITIONS = path.join(REPO, 'core/definitions/index.ts');

export class TempProject {
  readonly dir = mkdtempSync(path.join(tmpdir(), 'dsec-config-test-'));

  write(name: string, text: string): string {
    const file = path.join(this.dir, name);
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, text);
    return file;
  }

  file(name: string): string {
    return path.join(this.dir, name);
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** `line:col` of `part` inside the first occurrence of `context` in `text`. */
export function where(text: string, context: string, part: string = context): string {
  const start = text.indexOf(context);
  if (start < 0) throw new Error(`fixture does not contain ${JSON.stringify(context)}`);
  const inner = context.indexOf(part);
  if (inner < 0) throw new Error(`${JSON.stringify(context)} does not contain ${JSON.stringify(part)}`);
  const before = text.slice(0, start + inner).split('\n');
  return `${before.length}:${before[before.length - 1].length + 1}`;
}

/** Load a config that must fail, and return its diagnostics. */
export async function loadErrors(file: string): Promise<Diagnostic[]> {
  try {
    await loadConfig(file);
  } catch (error) {
    if (isDsecError(error, 'DSEC_CONFIG_INVALID')) {
      expect(error.params.count).toBe(error.diagnostics.length);
      return [...error.diagnostics];
    }
    throw error;
  }
  throw new Error(`${file} loaded without errors`);
}

/** A diagnostic as `code path file:line:col`, the three things every test checks. */
export function summary(diagnostic: Diagnostic): string {
  const location = diagnostic.location;
  const at = location ? `${path.basename(location.file)}:${location.line}:${location.col}` : '(nowhere)';
  return `${diagnostic.code} ${diagnostic.path} ${at}`;
}
