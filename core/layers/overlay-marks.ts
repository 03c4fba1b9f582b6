/**
 * The two marks overlayfs reads in a layer, in its own native form:
 *
 * - a whiteout: a character device 0:0, which hides the same path in the
 *   layers below;
 * - an opaque directory: the xattr `trusted.overlay.opaque=y`, which hides
 *   everything the layers below have under that directory.
 *
 * Node has neither mknod(2) nor an xattr API, so both go through small
 * tools: `mknod` (coreutils) driven by `xargs -0` (findutils), and
 * `getfattr`/`setfattr` from Debian's `attr` package (scripts/setup.sh
 * installs it). Each call handles a whole batch of paths, so a tree costs a
 * few processes, not one per entry. `trusted.*` xattrs need CAP_SYS_ADMIN:
 * the node agent runs as root.
 */
import { execFile, spawn } from 'node:child_process';
import type { BigIntStats, Stats } from 'node:fs';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export const OPAQUE_XATTR = 'trusted.overlay.opaque';
/** OCI / AUFS names for the same marks in archives. */
export const WHITEOUT_PREFIX = '.wh.';
export const OPAQUE_MARKER = '.wh..wh..opq';

/** A whiteout as overlayfs writes it: a character device with device number 0:0. */
export function isWhiteout(stat: Stats | BigIntStats): boolean {
  return stat.isCharacterDevice() && Number(stat.rdev) === 0;
}

/** The tools are missing: say which package brings them. */
function toolError(tool: string, error: unknown): Error {
  if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
    return new Error(`${tool} is not installed: install Debian's attr package (scripts/setup.sh does)`);
  }
  const stderr = (error as { stderr?: string }).stderr?.trim();
  return new Error(`${tool} failed: ${stderr || (error as Error).message}`);
}

/** getfattr prints names with `\ooo` octal escapes for backslash, newline and other control bytes. */
function unescapeName(text: string): string {
  const latin1 = text.replace(/\\([0-7]{3})/g, (_whole, octal: string) => String.fromCharCode(parseInt(octal, 8)));
  return Buffer.from(latin1, 'latin1').toString('utf8');
}

/**
 * Absolute paths of the opaque directories under `root` (root included if it
 * is), in one `getfattr -R` walk that never follows symlinks.
 */
export async function findOpaqueDirs(root: string): Promise<Set<string>> {
  let stdout: string;
  try {
    ({ stdout } = await execFileAsync(
      'getfattr',
      ['--recursive', '--physical', '--no-dereference', '--absolute-names', '--dump', '--encoding=hex', '--match', `^${OPAQUE_XATTR.replace(/\./g, '\\.')}$`, '--', root],
      { encoding: 'latin1', maxBuffer: 256 * 1024 * 1024 },
    ));
  } catch (error) {
    throw toolError('getfattr', error);
  }
  const opaque = new Set<string>();
  let file: string | undefined;
  for (const line of stdout.split('\n')) {
    if (line.startsWith('# file: ')) file = unescapeName(line.slice('# file: '.length));
    // 0x79 is "y"; overlayfs reads any other value as not opaque.
    else if (file !== undefined && line === `${OPAQUE_XATTR}=0x79`) opaque.add(file);
  }
  return opaque;
}

/** Mark directories opaque (`trusted.overlay.opaque=y`). */
export async function markOpaque(dirs: readonly string[]): Promise<void> {
  for (const batch of batches(dirs)) {
    try {
      await execFileAsync('setfattr', ['-n', OPAQUE_XATTR, '-v', 'y', '--', ...batch]);
    } catch (error) {
      throw toolError('setfattr', error);
    }
  }
}

/** Remove the opaque mark from directories that carry it. */
export async function clearOpaque(dirs: readonly string[]): Promise<void> {
  for (const batch of batches(dirs)) {
    try {
      await execFileAsync('setfattr', ['-x', OPAQUE_XATTR, '--', ...batch]);
    } catch (error) {
      throw toolError('setfattr', error);
    }
  }
}

/** Create whiteouts (char 0:0, mode 0000, owned by the caller: root) at absolute paths that do not exist yet. */
export async function makeWhiteouts(paths: readonly string[]): Promise<void> {
  if (paths.length === 0) return;
  const input = Buffer.from(paths.map((path) => `${path}\0`).join(''));
  await new Promise<void>((resolve, reject) => {
    const child = spawn('xargs', ['-0', '-I{}', 'mknod', '-m', '000', '{}', 'c', '0', '0'], { stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', (error) => reject(toolError('xargs/mknod', error)));
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`mknod failed: ${stderr.trim() || `exit ${code}`}`))));
    child.stdin.end(input);
  });
}

/** Arguments in batches well under ARG_MAX. */
function* batches(paths: readonly string[], maxBytes = 64 * 1024): Generator<string[]> {
  let batch: string[] = [];
  let bytes = 0;
  for (const path of paths) {
    const size = Buffer.byteLength(path) + 1;
    if (batch.length > 0 && bytes + size > maxBytes) {
      yield batch;
      batch = [];
      bytes = 0;
    }
    batch.push(path);
    bytes += size;
  }
  if (batch.length > 0) yield batch;
}
