/**
 * The sandbox's root filesystem: an overlay of the read-only layer trees with
 * a private writable upper dir, mounted with mount(8) and taken down with
 * umount(8), both started by the launcher. Mount state is read from the
 * kernel, never guessed: the overlay is a filesystem of its own, so its
 * device number says whether it is still mounted (two stats; the node's
 * mount table grows by a line per sandbox and costs tens of milliseconds
 * to read at 2,000).
 */
import { isFilesystemRoot } from '../../core/plugin-api.js';
import { launcher } from './launcher.js';

/** The kernel takes at most a page of mount options. */
const MAX_MOUNT_OPTIONS = 4000;

export interface OverlayDirs {
  /** Bottom to top, as the storage plugin sets `sandbox.lowerDirs`. */
  readonly lowerDirs: readonly string[];
  /**
   * The writable upper dir and overlayfs's work dir, both or neither.
   * Neither: a read-only overlay (the kernel then wants two lower dirs at least).
   */
  readonly upperDir?: string;
  readonly workDir?: string;
  readonly target: string;
}

/**
 * What the upper dir must be whatever the host's overlay defaults: whole.
 * A snapshot copies the upper dir alone, so a metadata-only copy-up (a file
 * whose data stays below) or a redirected directory (whose content stays
 * below) would be lost from it; the index is only for those features.
 */
const SELF_CONTAINED_UPPER = 'redirect_dir=off,metacopy=off,index=off';

/** overlayfs wants the top layer first; `lowerDirs` come bottom to top. */
export function overlayOptions(dirs: OverlayDirs): string {
  const writable = dirs.upperDir !== undefined && dirs.workDir !== undefined;
  if (!writable && (dirs.upperDir !== undefined || dirs.workDir !== undefined)) throw new Error('an overlay takes an upper dir and a work dir together, or neither');
  const all = [...dirs.lowerDirs, ...(writable ? [dirs.upperDir!, dirs.workDir!] : [])];
  const bad = all.find((dir) => /[,:\n]/.test(dir) || !dir.startsWith('/'));
  if (bad !== undefined) throw new Error(`overlay directory ${JSON.stringify(bad)} must be absolute and free of ',' and ':'`);
  if (dirs.lowerDirs.length === 0) throw new Error('no layers were resolved for the sandbox (is a storage plugin loaded?)');
  if (!writable && dirs.lowerDirs.length < 2) throw new Error('a read-only overlay needs two lower dirs at least');
  const lower = `lowerdir=${[...dirs.lowerDirs].reverse().join(':')}`;
  const options = writable ? `${lower},upperdir=${dirs.upperDir},workdir=${dirs.workDir},${SELF_CONTAINED_UPPER}` : lower;
  if (options.length > MAX_MOUNT_OPTIONS) {
    throw new Error(`the overlay mount options are ${options.length} bytes, over the kernel's limit of ${MAX_MOUNT_OPTIONS}: too many or too deep layer paths`);
  }
  return options;
}

export async function mountOverlay(dirs: OverlayDirs): Promise<void> {
  const options = overlayOptions(dirs);
  try {
    await runOk('mount', ['-t', 'overlay', 'overlay', '-o', options, dirs.target]);
  } catch (error) {
    throw new Error(`mount overlay on ${dirs.target}: ${commandMessage(error)}`);
  }
}

/**
 * Unmount the sandbox's overlay at `target` (and any stacked on it).
 * Retries while busy (a process that was just killed may still hold it),
 * then detaches lazily as the last resort so the sandbox can still be
 * removed. Nothing else is ever mounted below it in the host's namespace
 * (the container's own mounts live in its namespace); were anything left,
 * the agent's removeTree refuses to delete the folder.
 */
export async function unmountAll(target: string, options: { attempts?: number; delayMs?: number } = {}): Promise<void> {
  const attempts = options.attempts ?? 10;
  const delayMs = options.delayMs ?? 50;
  for (let attempt = 1; ; attempt++) {
    if (!(await isFilesystemRoot(target))) return;
    try {
      await runOk('umount', attempt < attempts ? [target] : ['-l', target]);
      continue;
    } catch (error) {
      if (attempt >= attempts) {
        if (!(await isFilesystemRoot(target))) return;
        throw new Error(`umount ${target}: ${commandMessage(error)}`);
      }
    }
    await new Promise((resolve) => setTimeout(resolve, delayMs * attempt));
  }
}

/** Run mount(8) or umount(8) through the launcher; a non-zero exit throws with its stderr. */
async function runOk(command: 'mount' | 'umount', args: readonly string[]): Promise<void> {
  const result = await launcher().run(command, args);
  if (result.code !== 0) {
    throw Object.assign(new Error(`${command} exited ${result.code ?? result.signal}`), { stderr: result.stderr });
  }
}

function commandMessage(error: unknown): string {
  const withStderr = error as { stderr?: string; message?: string };
  return (withStderr.stderr || withStderr.message || String(error)).trim();
}
