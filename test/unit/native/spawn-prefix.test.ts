/**
 * spawnPrefix: the words put before a runtime command for a sandbox's
 * process traits. Pure apart from finding the helper, which it only does
 * when a trait is set.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { nativeHelperPath, spawnPrefix } from '../../../core/native.js';

describe('spawnPrefix', () => {
  beforeAll(() => {
    // The helper is part of `npm run build`; build just it (a no-op when up to date).
    execFileSync('node', ['scripts/build-native.mjs'], { stdio: 'inherit' });
  });

  it('returns no words at all when no trait is set, so the command runs without a helper process', () => {
    expect(spawnPrefix({})).toEqual([]);
    expect(spawnPrefix({ memoryMerge: false, idleCpu: false, coreScheduling: false })).toEqual([]);
  });

  it('puts the helper, spawn, one flag per trait and -- before the command', () => {
    const helper = nativeHelperPath();
    expect(helper).toMatch(/\/dist\/native\/dsec-native$/);
    expect(spawnPrefix({ memoryMerge: true })).toEqual([helper, 'spawn', '--merge', '--']);
    expect(spawnPrefix({ idleCpu: true })).toEqual([helper, 'spawn', '--sched-idle', '--']);
    expect(spawnPrefix({ memoryMerge: true, idleCpu: true, coreScheduling: true })).toEqual([
      helper,
      'spawn',
      '--merge',
      '--sched-idle',
      '--core-sched',
      '--',
    ]);
  });
});
