/**
 * Loop devices and read-only mounts, through util-linux (losetup, blockdev,
 * mount, umount). What is mounted is always read back from the kernel,
 * never assumed: from /proc/self/mountinfo, or, for a mount that is a
 * filesystem of its own (an image, an overlay), from its device number
 * (isFilesystemRoot), which costs two stats where the mount table grows by
 * a line per sandbox on the node (0.9 MB and 20-45 ms to read at 2,000).
 *
 * A loop device is attached explicitly (so its read-ahead can be set and its
 * read counters found), the filesystem mounted from it, and then the device
 * is "detached" at once: the kernel only marks a busy loop device
 * auto-clear, and frees it by itself when the mount goes. A crash can
 * therefore never leak a loop device of a mounted image; the one window left
 * (attached, not yet mounted) is closed by `detachUnmountedLoops`.
 */
import { execFile } from 'node:child_process';
import { readFile, stat } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export function commandMessage(error: unknown): string {
  const withStderr = error as { stderr?: string; message?: string };
  return (withStderr.stderr || withStderr.message || String(error)).trim();
}

async function run(command: string, args: readonly string[]): Promise<string> {
  try {
    return (await execFileAsync(command, args, { maxBuffer: 16 * 1024 * 1024 })).stdout;
  } catch (error) {
    throw new Error(`${command} ${args.join(' ')}: ${commandMessage(error)}`);
  }
}

/** Attach `file` read-only to a free loop device; returns `/dev/loopN`. */
export async function attachLoop(file: string, options: { readAheadSectors?: number } = {}): Promise<string> {
  const device = (await run('losetup', ['--find', '--show', '--read-only', file])).trim();
  if (options.readAheadSectors !== undefined) {
    try {
      await run('blockdev', ['--setra', String(options.readAheadSectors), device]);
    } catch (error) {
      await detachLoop(device);
      throw error;
    }
  }
  return device;
}

/** Detach a loop device; one still in use is marked auto-clear by the kernel instead. Gone already is fine. */
export async function detachLoop(device: string): Promise<void> {
  try {
    await execFileAsync('losetup', ['--detach', device]);
  } catch (error) {
    const message = commandMessage(error);
    if (/No such device|No such file|not a loop|ENXIO/i.test(message)) return;
    throw new Error(`losetup --detach ${device}: ${message}`);
  }
}

/**
 * Mount an EROFS image read-only, nosuid and nodev: its content is what
 * sandboxes wrote, and no host process should gain anything from it (inside
 * a sandbox, the overlay's own mount decides). `device`: the blob device of a
 * split image.
 */
export async function mountErofs(source: string, target: string, options: { device?: string } = {}): Promise<void> {
  const mountOptions = ['ro', 'nosuid', 'nodev', ...(options.device ? [`device=${options.device}`] : [])].join(',');
  await run('mount', ['-t', 'erofs', '-o', mountOptions, source, target]);
}

export interface MountEntry {
  readonly target: string;
  readonly fstype: string;
  readonly source: string;
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescapeMountPath(text: string): string {
  return text.replace(/\\([0-7]{3})/g, (_whole, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/** Every mount of this mount namespace. */
export async function readMounts(): Promise<MountEntry[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const mounts: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const fields = line.split(' ');
    const dash = fields.indexOf('-');
    mounts.push({ target: unescapeMountPath(fields[4] ?? ''), fstype: fields[dash + 1] ?? '', source: unescapeMountPath(fields[dash + 2] ?? '') });
  }
  return mounts;
}

/** Mounts at or under `dir`, deepest first (the order to unmount them in). */
export async function mountsUnder(dir: string): Promise<MountEntry[]> {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  return (await readMounts())
    .filter((mount) => mount.target === dir || mount.target.startsWith(prefix))
    .sort((a, b) => b.target.length - a.target.length);
}

export async function isMountPoint(path: string): Promise<boolean> {
  return (await readMounts()).some((mount) => mount.target === path);
}

/**
 * Whether `path` is the root of a filesystem other than its parent's: true
 * for a mounted EROFS image or overlay (each has a device of its own), false
 * for a plain folder or a missing path. Not for bind mounts of the same
 * filesystem, which it cannot tell from a folder.
 */
export async function isFilesystemRoot(path: string): Promise<boolean> {
  try {
    const [self, parent] = await Promise.all([stat(path), stat(dirname(path))]);
    return self.dev !== parent.dev;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
}

/** Unmount `target`, retrying while it is busy (a sandbox just stopped may still hold it). */
export async function unmount(target: string, options: { attempts?: number; delayMs?: number; isMounted?: (path: string) => Promise<boolean> } = {}): Promise<void> {
  const attempts = options.attempts ?? 10;
  const delayMs = options.delayMs ?? 50;
  const isMounted = options.isMounted ?? isMountPoint;
  for (let attempt = 1; ; attempt++) {
    if (!(await isMounted(target))) return;
    try {
      await execFileAsync('umount', [target]);
      return;
    } catch (error) {
      if (attempt >= attempts) {
        if (!(await isMounted(target))) return;
        throw new Error(`umount ${target}: ${commandMessage(error)}`);
      }
    }
    await new Promise((resolve) => setTimeout(resolve, delayMs * attempt));
  }
}

/** Bytes read through a loop device so far (sectors read, field 3 of /sys/block/loopN/stat, times 512). */
export async function loopBytesRead(device: string): Promise<number | undefined> {
  try {
    const fields = (await readFile(`/sys/block/${basename(device)}/stat`, 'utf8')).trim().split(/\s+/);
    return Number(fields[2]) * 512;
  } catch {
    return undefined;
  }
}

/** The file a loop device reads, or undefined when it is free. */
export async function loopBackingFile(device: string): Promise<string | undefined> {
  try {
    return (await readFile(`/sys/block/${basename(device)}/loop/backing_file`, 'utf8')).trim().replace(/ \(deleted\)$/, '');
  } catch {
    return undefined;
  }
}

/**
 * After the mount of an auto-clear loop device went: make sure the device
 * is free. The kernel clears it when its last opener goes, which may lag the
 * umount a little; if it still reads `file` after a short wait, detach it.
 * The check on `file` keeps us from detaching a device another attach reused.
 */
export async function settleLoop(device: string, file: string, waitMs = 500): Promise<void> {
  for (let waited = 0; waited < waitMs; waited += 25) {
    if ((await loopBackingFile(device)) !== file) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  if ((await loopBackingFile(device)) === file) await detachLoop(device);
}

export interface LoopDevice {
  readonly device: string;
  readonly file: string;
  readonly autoclear: boolean;
}

/** Loop devices whose backing file is at or under one of `prefixes`. */
export async function loopsBackedBy(prefixes: readonly string[]): Promise<LoopDevice[]> {
  const text = await run('losetup', ['--list', '--json', '--output', 'NAME,BACK-FILE,AUTOCLEAR']);
  if (text.trim() === '') return [];
  const parsed = JSON.parse(text) as { loopdevices?: Array<{ name: string; 'back-file': string | null; autoclear: boolean | string }> };
  return (parsed.loopdevices ?? [])
    .map((loop) => ({
      device: loop.name,
      // losetup appends " (deleted)" when the backing file was removed.
      file: (loop['back-file'] ?? '').replace(/ \(deleted\)$/, ''),
      autoclear: loop.autoclear === true || loop.autoclear === '1',
    }))
    .filter((loop) => prefixes.some((prefix) => loop.file === prefix || loop.file.startsWith(`${prefix}/`)));
}

/**
 * Detach loop devices of our files that no mount uses: the leftovers of a
 * crash between `attachLoop` and the mount (a mounted one is auto-clear).
 * Call it only while no attach of these prefixes is in flight.
 */
export async function detachUnmountedLoops(prefixes: readonly string[]): Promise<string[]> {
  const detached: string[] = [];
  for (const loop of await loopsBackedBy(prefixes)) {
    if (loop.autoclear) continue;
    await detachLoop(loop.device);
    detached.push(loop.device);
  }
  return detached;
}
