/**
 * Crash-safe file writes for the state. Terraform's own TODO, done: write a
 * temp file in the same folder, fsync it, keep the previous version as the
 * backup, rename over the old file, fsync the folder. A crash at any point
 * leaves either the old state or the new one, never a torn or missing file.
 */
import { randomBytes } from 'node:crypto';
import { link, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';

const tempName = (file: string): string =>
  path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);

export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Write `text` to a new temp file beside `file`, fsynced; returns its path. */
export async function writeTemp(file: string, text: string, mode = 0o600): Promise<string> {
  const temp = tempName(file);
  const handle = await open(temp, 'wx', mode);
  try {
    await handle.writeFile(text);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await rm(temp, { force: true });
    throw error;
  }
  await handle.close();
  return temp;
}

/**
 * Replace `file` with `text` atomically. With `backup`, the version being
 * replaced stays at that path: a hard link to it is renamed into place first,
 * so there is no copy and no moment without a `file`.
 */
export async function writeFileAtomic(file: string, text: string, options: { backup?: string } = {}): Promise<void> {
  const temp = await writeTemp(file, text);
  try {
    if (options.backup) {
      const backupTemp = tempName(options.backup);
      try {
        await link(file, backupTemp);
        await rename(backupTemp, options.backup);
      } catch (error) {
        await rm(backupTemp, { force: true });
        // No previous version yet: nothing to back up.
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    }
    await rename(temp, file);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
  await fsyncDir(path.dirname(file));
}
