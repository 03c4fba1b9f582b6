/**
 * What a starting agent takes over from the one before it (a crash, an
 * upgrade, a reboot of the agent alone): running sandboxes are re-adopted,
 * ones whose processes are gone are kept as `stopped` (so refresh sees the
 * drift), and whatever never finished is cleaned up: creates, recycles,
 * layer builds, layer listings and snapshots.
 */
import { mkdir } from 'node:fs/promises';
import type { Dsec } from '../dsec.js';
import type { NodeContext } from '../hooks.js';
import { isBuildSandbox } from './build.js';
import { removeTree } from './files.js';
import { cleanInterrupted } from './layer-admin.js';
import type { PoolManager } from './pools.js';
import type { SandboxEntry, SandboxStore } from './store.js';

export interface AdoptionDeps {
  readonly dsec: Dsec;
  readonly node: NodeContext;
  readonly store: SandboxStore;
  readonly pools: PoolManager;
  /** The destroy hooks, then the folder and record (the agent's teardown). */
  readonly teardown: (entry: SandboxEntry) => Promise<void>;
  /** Ask the backend what became of a sandbox, the lock held. */
  readonly probe: (entry: SandboxEntry) => Promise<void>;
}

/** The ids the start found, by what became of them (for the agent's first log line). */
export interface Adoption {
  readonly adopted: string[];
  readonly stopped: string[];
  readonly cleaned: string[];
}

export async function adoptPrevious(deps: AdoptionDeps): Promise<Adoption> {
  const { store, dsec } = deps;
  const log = dsec.log;
  await mkdir(store.dir, { recursive: true, mode: 0o700 });
  const { records, orphans, unreadable } = await store.readAll();
  const adoption: Adoption = { adopted: [], stopped: [], cleaned: [] };
  for (const { dir, error } of unreadable) log.warn(`ignoring ${dir}: unreadable record: ${error}`);
  for (const dir of orphans) {
    await removeTree(dir).catch((error: Error) => log.warn(`could not remove ${dir}: ${error.message}`));
  }
  await deps.pools.load();
  for (const entry of records) {
    const id = entry.ctx.spec.id;
    store.add(entry);
    // An unfinished create is cleaned up; so is an unfinished recycle (its release was answered, or never will be).
    if (entry.ctx.status === 'creating' || entry.recycling) {
      await deps.teardown(entry).then(
        () => adoption.cleaned.push(id),
        (error: Error) => log.warn(`sandbox ${id}: cleaning up an unfinished create failed: ${error.message}`),
      );
      continue;
    }
    if (entry.ctx.status === 'failed') continue;
    await deps.probe(entry);
    (entry.ctx.status === 'stopped' ? adoption.stopped : adoption.adopted).push(id);
  }
  // A layer build never outlives its agent: its sandbox goes, and the next apply builds again.
  for (const entry of store.all().filter((candidate) => isBuildSandbox(candidate.ctx.spec))) {
    await deps.teardown(entry).then(
      () => adoption.cleaned.push(entry.ctx.spec.id),
      (error: Error) => log.warn(`sandbox ${entry.ctx.spec.id}: removing an interrupted layer build failed: ${error.message}`),
    );
  }
  await cleanInterrupted(dsec.hooks, deps.node).then(
    (released) => adoption.cleaned.push(...released),
    (error: Error) => log.warn(`cleaning up interrupted layer listings and snapshots failed: ${error.message}`),
  );
  return adoption;
}
