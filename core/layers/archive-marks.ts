/**
 * Overlay marks in layer archives. OCI image layers (and docker save) write
 * a whiteout as an empty file `.wh.<name>` beside the path it hides, and an
 * opaque directory as a `.wh..wh..opq` file inside it; overlay-native tars
 * (a tar of an overlay upper dir) hold whiteouts as character devices 0:0.
 * All become the store's native form: a char 0:0 device at the hidden path,
 * and `trusted.overlay.opaque=y` on the directory.
 *
 * The marks are recorded while the archive is read (never written by
 * node-tar) and made once it is extracted. A whiteout of a path the same
 * archive also holds is dropped: per the OCI spec, a whiteout only hides the
 * layers below. AUFS metadata entries (`.wh..wh.plnk`, `.wh..wh.aufs`) carry
 * nothing a layer needs and are skipped. A mark on the layer root itself
 * (`./.wh..wh..opq`) is refused: the store's layer root carries no
 * attributes.
 */
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import type * as tar from 'tar';
import { DsecError } from '../errors.js';
import { isErrno, pathExists } from './fsutil.js';
import { OPAQUE_MARKER, WHITEOUT_PREFIX, makeWhiteouts, markOpaque } from './overlay-marks.js';

/** What the guard should do with an entry after the marks looked at it. */
export type MarkVerdict =
  /** Not a mark: check and extract it as usual. */
  | { readonly kind: 'entry' }
  /** A mark, recorded: do not let node-tar write it. */
  | { readonly kind: 'mark' }
  | { readonly kind: 'problem'; readonly problem: string };

const ENTRY: MarkVerdict = Object.freeze({ kind: 'entry' });
const MARK: MarkVerdict = Object.freeze({ kind: 'mark' });
const problem = (text: string): MarkVerdict => ({ kind: 'problem', problem: text });

const WHITEOUT_FILE_TYPES = new Set(['File', 'OldFile', 'ContiguousFile', 'Link']);

/** What the guard knows of paths extracted so far. */
export interface ArchivePaths {
  /** The symlink of the archive a path would be written through, if any. */
  throughSymlink(parts: readonly string[]): string | undefined;
  /** The kind the archive gave a path so far. */
  kindOf(path: string): 'file' | 'dir' | 'symlink' | undefined;
}

export class ArchiveMarks {
  /** Hidden path -> the archive entry that hid it (for messages). */
  private readonly whiteouts = new Map<string, string>();
  /** Opaque directory -> the archive entry that marked it. */
  private readonly opaque = new Map<string, string>();

  /** Look at an entry whose path `parts` passed the absolute and `..` checks. */
  classify(entry: tar.ReadEntry, parts: readonly string[], paths: ArchivePaths): MarkVerdict {
    const name = parts[parts.length - 1] ?? '';
    const parent = parts.slice(0, -1);
    const isDeviceWhiteout = entry.type === 'CharacterDevice' && entry.header.devmaj === 0 && entry.header.devmin === 0;
    if (!name.startsWith(WHITEOUT_PREFIX) && !isDeviceWhiteout) return ENTRY;
    const via = paths.throughSymlink(parts);
    if (via !== undefined) return problem(`lies under the symlink ${via}; writing it would follow the link`);
    if (isDeviceWhiteout) {
      if (parts.length === 0) return problem('would replace the layer root with a whiteout');
      this.whiteouts.set(parts.join('/'), entry.path);
      return MARK;
    }
    if (name === OPAQUE_MARKER) {
      if (parent.length === 0) return problem('marks the layer root opaque, which a layer cannot carry');
      const kind = paths.kindOf(parent.join('/'));
      if (kind !== undefined && kind !== 'dir') return problem(`marks ${parent.join('/')} opaque, but it is a ${kind}`);
      this.opaque.set(parent.join('/'), entry.path);
      return MARK;
    }
    if (name.startsWith(`${WHITEOUT_PREFIX}${WHITEOUT_PREFIX}`)) return MARK;
    const hidden = name.slice(WHITEOUT_PREFIX.length);
    if (hidden === '' || hidden === '.' || hidden === '..') return problem('is a whiteout that names no entry');
    if (!WHITEOUT_FILE_TYPES.has(entry.type)) return problem(`is a whiteout name on a ${entry.type}, not a file`);
    this.whiteouts.set([...parent, hidden].join('/'), entry.path);
    return MARK;
  }

  /**
   * Make the recorded marks in the extracted tree at `target`. Parents the
   * archive did not list are created (the caller gives them 0755 root);
   * a parent that is not a real directory by now is refused.
   */
  async apply(target: string, ref: string): Promise<void> {
    const whiteouts: string[] = [];
    for (const [path, entry] of [...this.whiteouts].sort(([a], [b]) => (a < b ? -1 : 1))) {
      const absolute = join(target, path);
      if (await pathExists(absolute)) continue;
      await realDirectory(target, path.split('/').slice(0, -1), ref, entry);
      whiteouts.push(absolute);
    }
    const opaque: string[] = [];
    for (const [path, entry] of this.opaque) {
      await realDirectory(target, path.split('/'), ref, entry);
      opaque.push(join(target, path));
    }
    await makeWhiteouts(whiteouts);
    await markOpaque(opaque);
  }
}

/** Make sure `parts` under `target` is a directory made of real directories, creating what is missing; never follows a link. */
async function realDirectory(target: string, parts: readonly string[], ref: string, entry: string): Promise<void> {
  let path = target;
  for (const part of parts) {
    path = join(path, part);
    try {
      const stat = await fs.lstat(path);
      if (!stat.isDirectory()) {
        throw new DsecError('DSEC_LAYER_UNSAFE_ARCHIVE', { ref, entry, problem: `lies under ${path.slice(target.length + 1)}, which is not a directory` });
      }
    } catch (error) {
      if (!isErrno(error, 'ENOENT')) throw error;
      await fs.mkdir(path);
    }
  }
}
