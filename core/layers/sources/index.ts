/**
 * Materialise a layer's source (a directory, an archive, a busybox binary,
 * an OCI image; builds and snapshots are made by the node agent, never here)
 * as a tree in a staging directory, with the owners, modes and symlinks the
 * layer will have once published.
 */
import { promises as fs } from 'node:fs';
import { DsecError } from '../../errors.js';
import type { LayerModel, LayerSource } from '../../model.js';
import { extractArchive } from '../archive.js';
import { buildBusyboxRootfs } from './busybox.js';
import { copyTree } from './dir.js';
import { materialiseOci } from './oci.js';

/** Fill the existing, empty directory `target` with the layer's content. */
export async function materialise(layer: LayerModel, target: string): Promise<void> {
  const source: LayerSource = layer.source;
  switch (source.type) {
    case 'dir':
      await copyTree(source.path, target, layer.ref);
      break;
    case 'tar':
      await extractArchive(source.path, target, layer.ref);
      break;
    case 'busybox':
      await buildBusyboxRootfs(source.path, target, layer.ref);
      break;
    case 'oci':
      await materialiseOci(source, target, layer.ref);
      break;
    default:
      throw new DsecError('DSEC_LAYER_SOURCE', {
        ref: layer.ref,
        message: `unknown source type ${JSON.stringify((source as { type: unknown }).type)}`,
      });
  }
  // The root is not part of the digest, so it must not vary either.
  await fs.chown(target, 0, 0);
  await fs.chmod(target, 0o755);
}
