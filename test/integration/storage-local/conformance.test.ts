/**
 * storage-local against the storage conformance suite: with the store in its
 * default place under the node root, and moved elsewhere with `root`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';
import storageLocal from '../../../plugins/storage-local/index.js';
import { describeStorageConformance } from '../../conformance/storage.js';

describeStorageConformance('storage-local', () => storageLocal());

const movedRoot = mkdtempSync(join(tmpdir(), 'dsec-storage-local-moved-'));
afterAll(() => rmSync(movedRoot, { recursive: true, force: true }));
let stores = 0;
const moved = () => join(movedRoot, `store-${++stores}`);
let current = '';
describeStorageConformance(
  'storage-local with the store moved by the root option',
  () => storageLocal({ root: (current = moved()) }),
  { scratchDirs: () => [join(current, 'staging')] },
);
