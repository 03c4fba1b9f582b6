/**
 * The agent's tree removal on what a sandbox may have written: directories
 * nested past PATH_MAX, which whole-path calls cannot reach.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { mkdir, rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { removeTree } from '../../../core/agent/files.js';

let tmp: string;
beforeEach(() => {
  tmp = mkdtempSync(path.join(tmpdir(), 'dsec-files-'));
});
afterEach(() => {
  // coreutils rm: it reaches what a failed removeTree left, however deep.
  execFileSync('rm', ['-rf', '--', tmp]);
});

/** `dir/x/<n>/<n>/...` with `levels` directories of 200-character names, built by wrapping (short paths only). */
async function nestDeep(dir: string, levels: number): Promise<void> {
  const name = 'd'.repeat(200);
  await mkdir(path.join(dir, 'x'), { recursive: true });
  for (let level = 0; level < levels; level++) {
    await mkdir(path.join(dir, 'w'));
    await rename(path.join(dir, 'x'), path.join(dir, 'w', name));
    await rename(path.join(dir, 'w'), path.join(dir, 'x'));
  }
}

describe('removeTree', () => {
  it('removes a folder whose directories nest deeper than PATH_MAX', async () => {
    const sandbox = path.join(tmp, 'sandboxes', 'deep');
    await nestDeep(path.join(sandbox, 'upper', 'tmp'), 25);
    await removeTree(sandbox);
    expect(existsSync(sandbox)).toBe(false);
    expect(existsSync(path.join(tmp, 'sandboxes'))).toBe(true);
  });

  it('is a no-op for a folder that is already gone', async () => {
    await expect(removeTree(path.join(tmp, 'never-made'))).resolves.toBeUndefined();
  });
});
