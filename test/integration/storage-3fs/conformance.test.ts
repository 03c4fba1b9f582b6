/**
 * storage-3fs against the storage conformance suite, pointed at a temp
 * folder standing in for the 3FS mount (the same code path as a real one):
 * with split EROFS images, with the node-local blob cache, and forced to
 * directory trees.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import storage3fs from '../../../plugins/storage-3fs/index.js';
import { describeStorageConformance } from '../../conformance/storage.js';
import { sweepMounts } from '../../helpers/mounts.js';

const mounts = mkdtempSync(join(tmpdir(), 'dsec-3fs-stand-in-'));
afterAll(() => {
  sweepMounts(mounts);
  rmSync(mounts, { recursive: true, force: true });
});

let count = 0;
let current = '';
/** A fresh folder standing in for the shared 3FS mount, per test (the plugin refuses a mount path that is not there). */
function freshMount(): string {
  current = join(mounts, `mount-${++count}`);
  mkdirSync(current);
  return current;
}
const dirs = {
  scratchDirs: (nodeRoot: string) => [join(current, 'staging'), join(nodeRoot, 'storage-3fs', 'staging')],
  mountDirs: (nodeRoot: string) => [nodeRoot, current],
};

describeStorageConformance('storage-3fs (split erofs, on a stand-in directory)', () => storage3fs({ mount: freshMount(), format: 'erofs' }), dirs);

describeStorageConformance(
  'storage-3fs with the node-local blob cache',
  () => storage3fs({ mount: freshMount(), format: 'erofs', cache: { maxBytes: 64 * 1024 * 1024 } }),
  dirs,
);

describeStorageConformance('storage-3fs (directory trees)', () => storage3fs({ mount: freshMount(), format: 'tree' }), dirs);
