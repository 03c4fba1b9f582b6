/**
 * storage-local against the storage conformance suite: in its default
 * format (EROFS images where they mount, which they do here), forced to
 * directory trees (the fallback), and with the store moved by `root`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import storageLocal from '../../../plugins/storage-local/index.js';
import { describeStorageConformance } from '../../conformance/storage.js';
import { sweepMounts } from '../../helpers/mounts.js';

describeStorageConformance('storage-local (erofs)', () => storageLocal({ format: 'erofs' }));

describeStorageConformance('storage-local (directory trees)', () => storageLocal({ format: 'tree' }));

const movedRoot = mkdtempSync(join(tmpdir(), 'dsec-storage-local-moved-'));
afterAll(() => {
  sweepMounts(movedRoot);
  rmSync(movedRoot, { recursive: true, force: true });
});
let stores = 0;
const moved = () => join(movedRoot, `store-${++stores}`);
let current = '';
describeStorageConformance(
  'storage-local with the store moved by the root option',
  () => storageLocal({ root: (current = moved()) }),
  { scratchDirs: () => [join(current, 'staging')], mountDirs: () => [current] },
);
