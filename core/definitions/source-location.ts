/**
 * Where a construct was made: the first stack frame outside this folder and
 * the constructs library, i.e. the user's `new Fleet(...)` line in dsec.ts.
 * Diagnostics about a construct point there.
 */
import { readFileSync } from 'node:fs';
import { findSourceMap } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { SourceLocation } from '../errors.js';

export interface CapturedLocation {
  readonly location: SourceLocation;
  /**
   * False when the stack gave only the file: tsx runs a dsec.ts outside an
   * ESM package ("type": "module") as CommonJS from a data: URL without a
   * source map, so the frame's line and column mean nothing. The construct's
   * `new Kind(scope, 'id'` is then looked up in the file's text instead.
   */
  readonly exact: boolean;
}

const DEFINITIONS_DIR = path.dirname(fileURLToPath(import.meta.url));

/**
 * Where the construct `kind` named `id` (`''` for the App) of the tree rooted
 * at `root` is being made.
 *
 * The call sites are read as objects and mapped through Node's source-map
 * cache, which knows tsx's maps (the loader turns source maps on while it
 * runs dsec.ts). Where Node has no map for a file, the stack text stands in:
 * whoever replaced Error.prepareStackTrace (a test runner, source-map-support)
 * has mapped it in their own terms.
 */
export function captureLocation(root: object, kind: string, id: string): CapturedLocation | undefined {
  const { sites, lines } = currentStack();
  for (const [index, site] of sites.entries()) {
    const frame = siteLocation(site, lines[index]);
    // Both the running file and the mapped one: dist/core/definitions/*.js maps back to core/definitions/*.ts.
    const running = toPath(site.getFileName() ?? '');
    if (!frame || isLibraryFile(frame.location.file) || (running && isLibraryFile(running))) continue;
    return frame.exact ? frame : findInText(frame, root, kind, id);
  }
  return undefined;
}

/** The call sites of this point, and the stack text's frame lines when they line up with them. */
function currentStack(): { sites: NodeJS.CallSite[]; lines: (string | undefined)[] } {
  const prepare = Error.prepareStackTrace;
  const limit = Error.stackTraceLimit;
  try {
    Error.stackTraceLimit = 50;
    const text = String(new Error().stack ?? '');
    Error.prepareStackTrace = (_error, callSites) => callSites;
    const stack = new Error().stack as unknown;
    const sites = Array.isArray(stack) ? (stack as NodeJS.CallSite[]) : [];
    const lines = text.split('\n').filter((line) => line.trim().startsWith('at '));
    return { sites, lines: lines.length === sites.length ? lines : [] };
  } finally {
    Error.prepareStackTrace = prepare;
    Error.stackTraceLimit = limit;
  }
}

/**
 * One call site -> a location in the original source: through Node's
 * source-map cache, else through `formatted` (the same frame as the stack
 * text shows it), else as it runs.
 */
export function siteLocation(site: NodeJS.CallSite, formatted?: string): CapturedLocation | undefined {
  const name = site.getFileName() ?? site.getScriptNameOrSourceURL?.() ?? undefined;
  const line = site.getLineNumber();
  const col = site.getColumnNumber();
  if (!name || line === null || col === null) return undefined;
  if (name.startsWith('data:')) {
    // tsx's CommonJS path: `data:text/javascript,<code>?filePath=<the .ts file>`.
    const match = /[?&]filePath=([^&]+)$/.exec(name);
    if (!match) return undefined;
    const file = decodeURIComponent(match[1]).replace(/\?.*$/, '');
    return { location: { file, line: 1, col: 1 }, exact: false };
  }
  const entry = findSourceMap(name)?.findEntry(line - 1, col - 1);
  if (entry && 'originalSource' in entry && entry.originalSource) {
    const file = toPath(entry.originalSource);
    if (file) return { location: { file, line: entry.originalLine + 1, col: entry.originalColumn + 1 }, exact: true };
  }
  const file = toPath(name);
  if (!file) return undefined;
  const shown = formatted === undefined ? undefined : frameLocation(formatted);
  if (shown && shown.file === file) return { location: shown, exact: true };
  return { location: { file, line, col }, exact: true };
}

/** `at fn (file:line:col)` or `at file:line:col` -> its location. */
function frameLocation(text: string): SourceLocation | undefined {
  const trimmed = text.trim();
  const where = trimmed.endsWith(')') ? trimmed.slice(trimmed.lastIndexOf('(') + 1, -1) : trimmed.slice(3);
  const match = /^(.*):(\d+):(\d+)$/.exec(where);
  const file = match ? toPath(match[1]) : undefined;
  return match && file ? { file, line: Number(match[2]), col: Number(match[3]) } : undefined;
}

function toPath(where: string): string | undefined {
  const bare = where.replace(/\?.*$/, '');
  if (bare.startsWith('file://')) return fileURLToPath(bare);
  return path.isAbsolute(bare) ? bare : undefined;
}

/** This folder (as source or as built), and the constructs library. */
function isLibraryFile(file: string): boolean {
  const sourceDir = DEFINITIONS_DIR.replace(`${path.sep}dist${path.sep}core${path.sep}`, `${path.sep}core${path.sep}`);
  return (
    file.startsWith(DEFINITIONS_DIR + path.sep) ||
    file.startsWith(sourceDir + path.sep) ||
    file.includes(`${path.sep}node_modules${path.sep}constructs${path.sep}`)
  );
}

/** Text searches so far per tree, file and construct, so the 2nd `new Layer(x, 'base'` finds the 2nd match. */
const occurrences = new WeakMap<object, Map<string, number>>();

function findInText(frame: CapturedLocation, root: object, kind: string, id: string): CapturedLocation {
  const { file } = frame.location;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return frame;
  }
  const key = `${file}\0${kind}\0${id}`;
  const counts = occurrences.get(root) ?? new Map<string, number>();
  occurrences.set(root, counts);
  const seen = counts.get(key) ?? 0;
  counts.set(key, seen + 1);
  const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const call = `new\\s+${escape(kind)}\\s*\\(`;
  const pattern = new RegExp(id === '' ? call : `${call}\\s*[^,()]+,\\s*(['"\`])${escape(id)}\\1`, 'g');
  const matches = [...text.matchAll(pattern)];
  const match = matches[Math.min(seen, matches.length - 1)];
  if (!match || match.index === undefined) return frame;
  const before = text.slice(0, match.index).split('\n');
  return { location: { file, line: before.length, col: before[before.length - 1].length + 1 }, exact: false };
}
