import { describe, expect, it } from 'vitest';
import type { LayerListingEntry } from '../../../core/agent/layer-admin.js';
import { findClashes, summariseListing } from '../../../core/cli/layer-listing.js';

const entry = (path: string, type: LayerListingEntry['type'], size = 0, opaque = false): LayerListingEntry => ({
  path,
  type,
  mode: type === 'dir' ? 0o755 : 0o644,
  uid: 0,
  gid: 0,
  size,
  ...(opaque ? { opaque } : {}),
});

describe('the layer listing summary', () => {
  it('counts entries by type and sums the top-level folders, biggest first', () => {
    const summary = summariseListing([
      entry('etc', 'dir'),
      entry('etc/group', 'whiteout'),
      entry('opt', 'dir', 0, true),
      entry('opt/big', 'file', 5000),
      entry('opt/link', 'symlink'),
      entry('usr', 'dir'),
      entry('usr/x', 'file', 10),
    ]);
    expect(summary).toMatchObject({ entries: 7, files: 2, dirs: 3, symlinks: 1, whiteouts: 1, opaqueDirs: 1, bytes: 5010, whiteoutPaths: ['etc/group'] });
    expect(summary.top.map((top) => top.path)).toEqual(['opt', 'usr', 'etc']);
    expect(summary.top[0]).toEqual({ path: 'opt', entries: 3, bytes: 5000 });
  });
});

describe('path clashes between the layers of a stack', () => {
  it('reports a file held by two layers and a file over a directory, naming the upper layer as the winner', () => {
    const clashes = findClashes([
      { ref: 'base@1', entries: [entry('etc', 'dir'), entry('etc/hosts', 'file'), entry('usr', 'dir'), entry('usr/lib', 'dir')] },
      { ref: 'tools@1', entries: [entry('etc', 'dir'), entry('etc/hosts', 'file'), entry('usr', 'dir'), entry('usr/lib', 'file')] },
    ]);
    expect(clashes).toEqual([{ lower: 'base@1', upper: 'tools@1', upperIndex: 1, count: 2, paths: ['etc/hosts', 'usr/lib'] }]);
  });

  it('does not count merging directories or deliberate deletes (whiteouts) as clashes', () => {
    const clashes = findClashes([
      { ref: 'base@1', entries: [entry('etc', 'dir'), entry('etc/group', 'file')] },
      { ref: 'tools@1', entries: [entry('etc', 'dir'), entry('etc/group', 'whiteout'), entry('etc/new', 'file')] },
    ]);
    expect(clashes).toEqual([]);
  });

  it('compares every pair of a three-layer stack and caps the paths it shows', () => {
    const many = Array.from({ length: 8 }, (_, index) => entry(`f${index}`, 'file'));
    const clashes = findClashes([
      { ref: 'a@1', entries: many },
      { ref: 'b@1', entries: [entry('other', 'file')] },
      { ref: 'c@1', entries: [...many, entry('other', 'file')] },
    ]);
    expect(clashes.map((clash) => [clash.lower, clash.upper, clash.count, clash.paths.length])).toEqual([
      ['a@1', 'c@1', 8, 5],
      ['b@1', 'c@1', 1, 1],
    ]);
  });
});
