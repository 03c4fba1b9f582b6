/**
 * Squash: merge a run of consecutive published layers into one image,
 * offline, so a sandbox stacking that run needs one mount instead of many.
 *
 * The merge is what overlayfs would show for the run (applyLayerTree: upper
 * wins, whiteouts and opaque dirs honoured). A run that starts at a base
 * layer is the bottom of every stack it appears in, so its whiteouts are
 * applied and dropped; any other run keeps them (and marks opaque every
 * directory whose lower content it hides), because layers below it remain.
 * The merged tree is stored like any layer's content, and the squash is
 * recorded under the run's ordered digest list; the plan never sees it.
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { DsecError, isDsecError } from '../errors.js';
import type { LayerRecord, LayerRef, SquashRecord } from '../live.js';
import { flattenLayers } from './apply-layer.js';
import { digestTree } from './digest.js';
import type { LayerStore } from './store.js';

/** Merge `layers` (bottom to top, published with these digests) into one image; the existing squash if it was done. */
export async function squashLayers(store: LayerStore, layers: readonly LayerRef[]): Promise<SquashRecord> {
  const label = layers.map((layer) => `${layer.name}@${layer.version}`).join(', ') || '(none)';
  const refuse = (message: string) => new DsecError('DSEC_LAYER_SQUASH', { layers: label, message });
  if (layers.length < 2) throw refuse('a squash needs at least two consecutive layers');
  const records: LayerRecord[] = [];
  for (const layer of layers) {
    const record = await store.readRef(layer.name, layer.version);
    if (!record) throw refuse(`${layer.name}@${layer.version} is not published on this node`);
    if (record.digest !== layer.digest) throw refuse(`${layer.name}@${layer.version} is published with digest ${record.digest}, not ${layer.digest}`);
    records.push(record);
  }
  const digests = records.map((record) => record.digest);
  const done = await store.squashes.read(digests);
  if (done && (await store.holder(done.digest))) return done;

  const bottom = records[0].kind === 'base';
  // A private in-use record keeps the layers mounted, and unpublishable, while they are read.
  const user = `squash-${randomBytes(6).toString('hex')}`;
  const staging = await store.stage();
  try {
    // Each layer alone: a squash of a shorter run must not stand in for its parts here.
    const trees: string[] = [];
    await store.locked(async () => {
      await store.inUse.write({
        sandbox: user,
        node: store.node,
        layers: records.map((record) => ({ ref: `${record.name}@${record.version}`, digest: record.digest })),
        mounts: digests,
        since: new Date().toISOString(),
      });
      const mounts = await store.mounts();
      for (const record of records) trees.push((await mounts.attach(record.digest, `${record.name}@${record.version}`)).path);
    });
    await flattenLayers(staging.tree, trees, { keepMarks: !bottom, ref: label });
    await fs.chown(staging.tree, 0, 0);
    await fs.chmod(staging.tree, 0o755);
    const tree = await digestTree(staging.tree, label);
    const { primary } = await store.formats();
    const prepared = (await store.holder(tree.digest)) ? undefined : await primary.prepare(staging.tree, tree.digest);
    try {
      const { format } = await store.locked(() => store.installContent(tree.digest, async () => prepared ?? primary.prepare(staging.tree, tree.digest)));
      const squash: SquashRecord = {
        layers: records.map((record) => ({ name: record.name, version: record.version, digest: record.digest })),
        digest: tree.digest,
        bottom,
        format,
        sizeBytes: tree.sizeBytes,
        files: tree.entries,
        createdAt: new Date().toISOString(),
      };
      await store.squashes.write(squash);
      store.log.info(`${store.name}: squashed ${label} into ${tree.digest} (${tree.entries} entries${bottom ? ', from the base: whiteouts applied' : ', whiteouts kept'})`);
      return squash;
    } finally {
      await prepared?.discard();
    }
  } catch (error) {
    if (isDsecError(error)) throw error;
    throw refuse((error as Error).message);
  } finally {
    await staging.remove();
    await store.release(user);
  }
}
