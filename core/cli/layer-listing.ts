/**
 * Pure views of layer listings (the agent's `GET /v1/layers/:name/:version/listing`):
 * the summary `dsec layers inspect` prints, and the path clashes between the
 * layers of one environment that `dsec validate` warns about.
 */
import type { LayerListingEntry } from '../agent/layer-admin.js';

export interface ListingSummary {
  readonly entries: number;
  readonly files: number;
  readonly dirs: number;
  readonly symlinks: number;
  readonly whiteouts: number;
  readonly opaqueDirs: number;
  readonly bytes: number;
  /** Top-level entries with what is under them, biggest first. */
  readonly top: readonly { readonly path: string; readonly entries: number; readonly bytes: number }[];
  /** The first whiteouts (paths this layer deletes from the layers below). */
  readonly whiteoutPaths: readonly string[];
}

const SHOWN_WHITEOUTS = 20;
const SHOWN_TOP = 20;

export function summariseListing(entries: readonly LayerListingEntry[]): ListingSummary {
  const top = new Map<string, { entries: number; bytes: number }>();
  let files = 0;
  let dirs = 0;
  let symlinks = 0;
  let opaqueDirs = 0;
  let bytes = 0;
  const whiteoutPaths: string[] = [];
  let whiteouts = 0;
  for (const entry of entries) {
    if (entry.type === 'file') files += 1;
    else if (entry.type === 'dir') dirs += 1;
    else if (entry.type === 'symlink') symlinks += 1;
    else {
      whiteouts += 1;
      if (whiteoutPaths.length < SHOWN_WHITEOUTS) whiteoutPaths.push(entry.path);
    }
    if (entry.opaque) opaqueDirs += 1;
    bytes += entry.size;
    const head = entry.path.split('/')[0];
    const sum = top.get(head) ?? { entries: 0, bytes: 0 };
    sum.entries += 1;
    sum.bytes += entry.size;
    top.set(head, sum);
  }
  const ranked = [...top]
    .map(([path, sum]) => ({ path, ...sum }))
    .sort((a, b) => b.bytes - a.bytes || b.entries - a.entries || a.path.localeCompare(b.path))
    .slice(0, SHOWN_TOP);
  return { entries: entries.length, files, dirs, symlinks, whiteouts, opaqueDirs, bytes, top: ranked, whiteoutPaths };
}

export interface LayerClash {
  /** The lower and the upper layer (`name@version`), in stack order: the upper one wins. */
  readonly lower: string;
  readonly upper: string;
  /** Index of the upper layer in the environment's stack. */
  readonly upperIndex: number;
  readonly count: number;
  /** The first clashing paths, sorted. */
  readonly paths: readonly string[];
}

const SHOWN_CLASH_PATHS = 5;

/**
 * Paths two layers of one stack both hold, where the upper one hides the
 * lower one's entry: both non-directories, or a directory against a
 * non-directory. A whiteout is a deliberate delete and two directories
 * merge, so neither is a clash. `stack` is bottom to top.
 */
export function findClashes(stack: readonly { readonly ref: string; readonly entries: readonly LayerListingEntry[] }[]): LayerClash[] {
  const kinds = stack.map((layer) => {
    const map = new Map<string, 'dir' | 'other'>();
    for (const entry of layer.entries) if (entry.type !== 'whiteout') map.set(entry.path, entry.type === 'dir' ? 'dir' : 'other');
    return map;
  });
  const clashes: LayerClash[] = [];
  for (let upper = 1; upper < stack.length; upper++) {
    for (let lower = 0; lower < upper; lower++) {
      const paths: string[] = [];
      for (const [path, kind] of kinds[upper]) {
        const below = kinds[lower].get(path);
        if (below !== undefined && !(below === 'dir' && kind === 'dir')) paths.push(path);
      }
      if (paths.length === 0) continue;
      paths.sort();
      clashes.push({ lower: stack[lower].ref, upper: stack[upper].ref, upperIndex: upper, count: paths.length, paths: paths.slice(0, SHOWN_CLASH_PATHS) });
    }
  }
  return clashes;
}
