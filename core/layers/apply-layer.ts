/**
 * Writing one layer tree over another with overlayfs semantics, so that a
 * stack of layers can become one tree: OCI image layers flattened into a
 * layer, or a run of published layers squashed into one image.
 *
 * What overlayfs shows for a path, given an upper and a lower layer:
 * - a whiteout in the upper hides the path below;
 * - a file or symlink in the upper replaces whatever is below;
 * - a directory in the upper merges with a directory below, unless it is
 *   opaque, or what is below is not a directory (a file, a symlink or a
 *   whiteout stops the merge): then the lower content is hidden.
 *
 * `applyLayerTree(target, layer)` turns `target` into exactly what overlayfs
 * would show for `layer` over `target`. With `keepMarks` the result is meant
 * to sit above further layers (a squash that does not start at the base), so
 * it keeps what must still act on them: the whiteouts, and opaque marks on
 * every directory whose lower content is hidden. Without it the result is the
 * bottom of the stack: whiteouts only delete, and no mark is left.
 */
import { promises as fs, type Stats } from 'node:fs';
import { join, resolve } from 'node:path';
import { DsecError, isDsecError } from '../errors.js';
import { walkTree, type TreeEntry } from './digest.js';
import { isErrno, removeTree } from './fsutil.js';
import { findOpaqueDirs, markOpaque } from './overlay-marks.js';
import { setMetadata, writeNonDirectories } from './sources/dir.js';

export interface ApplyLayerOptions {
  /**
   * Keep whiteouts and opaque marks in `target`, because layers below it
   * remain (a squash of a run above the base).
   * @default false: `target` is the bottom of the stack
   */
  readonly keepMarks?: boolean;
  /** Names the layer in errors. @default the layer path */
  readonly ref?: string;
}

async function lstatOrUndefined(path: string): Promise<Stats | undefined> {
  try {
    return await fs.lstat(path);
  } catch (error) {
    if (isErrno(error, 'ENOENT')) return undefined;
    throw error;
  }
}

/** Empty a directory without removing it (an opaque directory hides everything that was in it). */
async function emptyDirectory(dir: string): Promise<void> {
  for (const name of await fs.readdir(dir)) await removeTree(join(dir, name));
}

/**
 * Apply the layer tree at `layer` onto the directory `target` (see the file
 * comment). `layer` is only read; `target` must not be inside it. Paths are
 * handled parents first, so by the time a path is written each of its
 * parents in `target` is a real directory, never a symlink to follow.
 */
export async function applyLayerTree(target: string, layer: string, options: ApplyLayerOptions = {}): Promise<void> {
  const ref = options.ref ?? layer;
  const keepMarks = options.keepMarks ?? false;
  target = resolve(target);
  const entries = await walkTree(layer, ref);
  try {
    const alreadyOpaque = keepMarks ? await findOpaqueDirs(target) : new Set<string>();
    const written: TreeEntry[] = [];
    const opaque: string[] = [];
    for (const entry of entries) {
      const to = join(target, entry.path);
      const existing = await lstatOrUndefined(to);
      if (entry.type === 'dir') {
        const merges = existing?.isDirectory() === true;
        if (existing && !merges) await removeTree(to);
        if (merges && entry.opaque) await emptyDirectory(to);
        if (!merges) await fs.mkdir(to);
        // Lower content is hidden when the layer says so, or when what was
        // below in the run was not a directory (it stopped the merge).
        const hides = entry.opaque || (existing !== undefined && !merges);
        if (keepMarks && hides && !alreadyOpaque.has(to)) opaque.push(to);
        written.push(entry);
        continue;
      }
      if (existing) await removeTree(to);
      if (entry.type === 'whiteout' && !keepMarks) continue;
      written.push(entry);
    }
    await writeNonDirectories(layer, target, written);
    await markOpaque(opaque);
    await setMetadata(target, written);
  } catch (error) {
    if (isDsecError(error)) throw error;
    throw new DsecError(
      'DSEC_LAYER_SOURCE',
      { ref, message: `applying ${layer} onto ${target} failed: ${(error as Error).message}` },
      { cause: error },
    );
  }
}

/**
 * Apply layer trees, bottom to top, onto the empty directory `target`: the
 * tree overlayfs would show for the stack. `keepMarks` as for applyLayerTree.
 */
export async function flattenLayers(target: string, layers: readonly string[], options: ApplyLayerOptions = {}): Promise<void> {
  for (const layer of layers) await applyLayerTree(target, layer, { ...options, ref: options.ref ?? layer });
}
