/**
 * A Problem is a Diagnostic before it knows where it is. The checks (schema,
 * semantic, construct tree) only know document paths; the source that was
 * loaded (YAML with positions, or a dsec.ts program that recorded where each
 * construct was made) turns paths into file:line:col through its Locator. So
 * YAML and TypeScript go through exactly the same checks.
 */
import type { Diagnostic, ErrorCode, SourceLocation } from '../errors.js';

export interface Problem {
  readonly code: ErrorCode;
  readonly severity: 'error' | 'warning';
  readonly message: string;
  /** JSON pointer of the offending node, e.g. `/fleets/web/replicas`. */
  readonly path: string;
  /** Point at the last path segment's key rather than its value (unknown properties, bad names). */
  readonly at?: 'key' | 'value';
  /** Set when the problem is not about a document node (a YAML syntax error, a throw in dsec.ts). */
  readonly location?: SourceLocation;
}

/** Finds where in the source the node at a document path is. */
export type Locator = (path: string, at: 'key' | 'value') => SourceLocation;

export function error(code: ErrorCode, path: string, message: string, at?: 'key' | 'value'): Problem {
  return { code, severity: 'error', message, path, ...(at ? { at } : {}) };
}

export function warning(code: ErrorCode, path: string, message: string, at?: 'key' | 'value'): Problem {
  return { code, severity: 'warning', message, path, ...(at ? { at } : {}) };
}

/** Attach locations and sort by position, so a file reads top to bottom. */
export function locateProblems(problems: readonly Problem[], locate: Locator): Diagnostic[] {
  const seen = new Set<string>();
  const diagnostics: Diagnostic[] = [];
  for (const problem of problems) {
    const key = `${problem.code}\0${problem.path}\0${problem.message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    diagnostics.push(toDiagnostic(problem, locate));
  }
  return sortDiagnostics(diagnostics);
}

function toDiagnostic(problem: Problem, locate: Locator): Diagnostic {
  return {
    code: problem.code,
    severity: problem.severity,
    message: problem.message,
    path: problem.path,
    location: problem.location ?? locate(problem.path, problem.at ?? 'value'),
  };
}

export function sortDiagnostics(diagnostics: Diagnostic[]): Diagnostic[] {
  return diagnostics
    .map((diagnostic, index) => ({ diagnostic, index }))
    .sort((a, b) => compare(a.diagnostic, b.diagnostic) || a.index - b.index)
    .map(({ diagnostic }) => diagnostic);
}

function compare(a: Diagnostic, b: Diagnostic): number {
  const la = a.location;
  const lb = b.location;
  if (!la || !lb) return la ? -1 : lb ? 1 : 0;
  if (la.file !== lb.file) return la.file < lb.file ? -1 : 1;
  return la.line - lb.line || la.col - lb.col;
}
