/**
 * isFilesystemRoot, which the layer store and the container backend use
 * instead of reading the node's mount table (a line per sandbox): true for
 * a mounted filesystem of its own, false for a plain folder, a missing path
 * and the folder again once unmounted. Real mounts (a tmpfs), cleaned up.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isFilesystemRoot, isMountPoint } from '../../../core/layers/mounts.js';

const dir = mkdtempSync(path.join(tmpdir(), 'dsec-fsroot-'));
const target = path.join(dir, 'mnt');
mkdirSync(target);

afterAll(() => {
  try {
    execFileSync('umount', [target], { stdio: 'ignore' });
  } catch {
    // not mounted
  }
  rmSync(dir, { recursive: true, force: true });
});

describe('isFilesystemRoot', () => {
  it('tells a mounted filesystem from a folder, as the mount table does', async () => {
    expect(await isFilesystemRoot(target)).toBe(false);
    expect(await isFilesystemRoot(path.join(dir, 'missing'))).toBe(false);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', target]);
    expect(await isFilesystemRoot(target)).toBe(true);
    expect(await isMountPoint(target)).toBe(true);
    mkdirSync(path.join(target, 'inner'));
    expect(await isFilesystemRoot(path.join(target, 'inner'))).toBe(false);
    execFileSync('umount', [target]);
    expect(await isFilesystemRoot(target)).toBe(false);
    expect(await isMountPoint(target)).toBe(false);
  });
});
