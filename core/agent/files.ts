/**
 * Small file helpers the agent relies on for crash safety: a JSON write that
 * is either fully there or not at all (temp file, fsync, rename, fsync the
 * folder), and a check that nothing is mounted below a folder before it is
 * removed (rm -rf through a live mount would reach into it).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { open, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

export async function writeJsonAtomic(file: string, value: unknown, mode = 0o600): Promise<void> {
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  const handle = await open(temp, 'w', mode);
  try {
    await handle.writeFile(`${JSON.stringify(value, null, 2)}\n`);
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await rename(temp, file);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
  await syncDir(path.dirname(file));
}

async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } catch {
    // some filesystems refuse fsync on a directory; the rename is still atomic
  } finally {
    await handle.close();
  }
}

export async function readJson<T>(file: string): Promise<T> {
  return JSON.parse(await readFile(file, 'utf8')) as T;
}

/** Mount points at or below `dir` (from /proc/self/mountinfo). */
export async function mountsUnder(dir: string): Promise<string[]> {
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  return text
    .split('\n')
    .map((line) => (line.split(' ')[4] ?? '').replace(/\\([0-7]{3})/g, (_w, octal: string) => String.fromCharCode(parseInt(octal, 8))))
    .filter((point) => point === dir || point.startsWith(prefix));
}

/**
 * rm -rf, refused while anything is still mounted below. A sandbox's folder
 * holds what its code wrote, e.g. directories nested past PATH_MAX, which
 * fs.rm (whole paths) cannot unlink (ENAMETOOLONG): then coreutils rm, which
 * walks with openat and never leaves the filesystem, finishes the job.
 */
export async function removeTree(dir: string): Promise<void> {
  const mounted = await mountsUnder(dir);
  if (mounted.length > 0) throw new Error(`refusing to remove ${dir}: still mounted: ${mounted.join(', ')}`);
  try {
    await rm(dir, { recursive: true, force: true });
  } catch (error) {
    try {
      await execFileAsync('rm', ['-rf', '--one-file-system', '--', dir]);
    } catch (rmError) {
      const stderr = (rmError as { stderr?: string }).stderr?.trim();
      throw new Error(`removing ${dir} failed: ${(error as Error).message}; rm -rf: ${stderr || (rmError as Error).message}`);
    }
  }
}
