/**
 * A `dir` source: the tree copied as it is, with modes, owners, mtimes,
 * symlinks, hard links within the tree, whiteouts and opaque directories.
 * The pieces (write the non-directories, set the metadata) are shared with
 * `applyLayerTree`, which writes a layer over an existing tree.
 */
import { constants, promises as fs } from 'node:fs';
import { join, sep } from 'node:path';
import { DsecError, isDsecError } from '../../errors.js';
import { walkTree, type TreeEntry } from '../digest.js';
import { mapLimit } from '../fsutil.js';
import { makeWhiteouts, markOpaque } from '../overlay-marks.js';

const COPY_CONCURRENCY = 8;

/**
 * Copy the tree at `source` into `target`: modes, owners and mtimes kept,
 * symlinks copied as symlinks, hard links within the tree kept as hard links,
 * whiteouts and opaque marks kept. Other device nodes, sockets and FIFOs are
 * refused (by `walkTree`).
 */
export async function copyTree(source: string, target: string, ref: string): Promise<void> {
  const entries = await walkTree(source, ref);
  await refuseTargetInsideSource(source, target, ref);
  try {
    for (const entry of entries) {
      if (entry.type === 'dir') await fs.mkdir(join(target, entry.path));
    }
    await writeNonDirectories(source, target, entries);
    await markOpaque(entries.filter((entry) => entry.opaque).map((entry) => join(target, entry.path)));
    await setMetadata(target, entries);
  } catch (error) {
    if (isDsecError(error)) throw error;
    throw new DsecError(
      'DSEC_LAYER_SOURCE',
      { ref, message: `copying ${source} failed (did it change while being copied?): ${(error as Error).message}` },
      { cause: error },
    );
  }
}

/**
 * Write the files, symlinks and whiteouts of `entries` (walked from
 * `source`) under `target`, whose directories exist and where none of these
 * paths exists. The first path of each multiply-linked inode is copied, the
 * others are hard-linked to it.
 */
export async function writeNonDirectories(source: string, target: string, entries: readonly TreeEntry[]): Promise<void> {
  const firstPathOfInode = new Map<string, string>();
  const links: Array<[TreeEntry, string]> = [];
  const copies: TreeEntry[] = [];
  const whiteouts: string[] = [];
  for (const entry of entries) {
    if (entry.type === 'dir') continue;
    if (entry.type === 'whiteout') {
      whiteouts.push(join(target, entry.path));
      continue;
    }
    if (entry.type === 'file' && entry.stat.nlink > 1n) {
      const inode = `${entry.stat.dev}:${entry.stat.ino}`;
      const first = firstPathOfInode.get(inode);
      if (first !== undefined) {
        links.push([entry, first]);
        continue;
      }
      firstPathOfInode.set(inode, entry.path);
    }
    copies.push(entry);
  }
  await mapLimit(copies, COPY_CONCURRENCY, async (entry) => {
    const to = join(target, entry.path);
    if (entry.type === 'symlink') await fs.symlink(entry.target!, to);
    else await fs.copyFile(join(source, entry.path), to, constants.COPYFILE_FICLONE);
  });
  for (const [entry, first] of links) await fs.link(join(target, first), join(target, entry.path));
  await makeWhiteouts(whiteouts);
}

/** Give each entry under `target` its owner, mode and mtime; children before parents, so a parent's mtime stays. */
export async function setMetadata(target: string, entries: readonly TreeEntry[]): Promise<void> {
  for (const entry of [...entries].reverse()) {
    const to = join(target, entry.path);
    await fs.lchown(to, entry.uid, entry.gid);
    // chown clears setuid/setgid, so the mode is set after it.
    if (entry.type !== 'symlink') await fs.chmod(to, entry.mode);
    await fs.lutimes(to, entry.stat.atime, entry.stat.mtime);
  }
}

/** Copying a tree into itself never ends: refuse a store that lives inside the source. */
async function refuseTargetInsideSource(source: string, target: string, ref: string): Promise<void> {
  const [realSource, realTarget] = await Promise.all([fs.realpath(source), fs.realpath(target)]);
  const prefix = realSource.endsWith(sep) ? realSource : realSource + sep;
  if (realTarget.startsWith(prefix)) {
    throw new DsecError('DSEC_LAYER_SOURCE', {
      ref,
      message: `the layer store (${realTarget}) is inside the source directory ${realSource}; move one of them`,
    });
  }
}
