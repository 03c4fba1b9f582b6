/**
 * The node side of a store: turning a sandbox's layers into lower dirs, and
 * giving them back. Each image is mounted once per node and shared by every
 * sandbox stacking it; the in-use registry is its reference count. A run of
 * layers squashed earlier is mounted as its one merged image. What is
 * mounted is read back from the kernel, so a restarted agent carries on.
 */
import { join } from 'node:path';
import { DsecError } from '../errors.js';
import { digestHex } from './digest.js';
import type { LayerRef, MountStats, StorageStats } from '../live.js';
import { loopBytesRead } from './mounts.js';
import type { LayerImage } from '../hooks.js';
import type { AttachedImage } from './images/types.js';
import type { PlannedMount } from './squash-records.js';
import type { LayerStore } from './store.js';
import type { ChosenFormats } from './store-format.js';

/** A lower dir a sandbox resolved: a layer, or a squash standing for a run of them. */
export interface ResolvedLayer {
  /** `name@version`; for a squash, the refs of its run joined with `+`. */
  readonly ref: string;
  readonly digest: string;
  /** The tree to use as a lower dir. */
  readonly path: string;
  /** For a squash: the digests of the layers it stands for, bottom to top. */
  readonly squashed?: readonly string[];
  /** The EROFS image the tree is mounted from (VM backends hand it to a guest as a block device); absent for a plain tree. */
  readonly image?: LayerImage;
}

export class StoreMounts {
  constructor(
    private readonly store: LayerStore,
    private readonly chosen: ChosenFormats,
  ) {}

  /**
   * Check that every ref is published with the digest the sandbox asks for,
   * record that the sandbox uses them, and mount what is not mounted yet.
   * Returns the lower dirs bottom to top. On failure nothing of it stays
   * recorded or mounted.
   */
  async resolve(sandboxId: string, layers: readonly LayerRef[]): Promise<ResolvedLayer[]> {
    return this.store.locked(async () => {
      const checked: Array<{ ref: string; digest: string }> = [];
      for (const layer of layers) {
        const ref = `${layer.name}@${layer.version}`;
        const record = await this.store.readRef(layer.name, layer.version);
        if (!record) throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref });
        if (record.digest !== layer.digest) {
          throw new DsecError('DSEC_LAYER_DIGEST_MISMATCH', { ref, published: record.digest, digest: layer.digest });
        }
        checked.push({ ref, digest: record.digest });
      }
      const planned = await this.store.squashes.plan(checked, async (digest) => (await this.store.holder(digest)) !== undefined);
      await this.store.inUse.write({
        sandbox: sandboxId,
        node: this.store.node,
        layers: checked,
        mounts: planned.map((mount) => mount.digest),
        since: new Date().toISOString(),
      });
      try {
        const resolved: ResolvedLayer[] = [];
        for (const mount of planned) resolved.push(await this.mount(mount));
        return resolved;
      } catch (error) {
        await this.store.inUse.remove(sandboxId);
        await this.unmountUnused();
        throw error;
      }
    });
  }

  private async mount(planned: PlannedMount): Promise<ResolvedLayer> {
    const ref = planned.layers.map((layer) => layer.ref).join('+');
    const attached = await this.attach(planned.digest, ref);
    return {
      ref,
      digest: planned.digest,
      path: attached.path,
      ...(attached.data ? { image: imageOf(attached.data, attached.metadata) } : {}),
      ...(planned.layers.length > 1 ? { squashed: planned.layers.map((layer) => layer.digest) } : {}),
    };
  }

  /** The mounted tree of `digest`, mounting it if this node has not yet. Call holding the store's lock. */
  async attach(digest: string, ref: string): Promise<AttachedImage> {
    const format = await this.store.holder(digest);
    if (!format) {
      throw new DsecError('DSEC_LAYER_STORE_CORRUPT', {
        path: join(this.store.dir, 'layers', digestHex(digest)),
        message: `the content of ${ref} (${digest}) is missing${this.chosen.format === 'tree' ? ' or stored as an EROFS image this node cannot mount' : ''}; unpublish and publish the layer again`,
      });
    }
    const attached = await format.attached(digest);
    if (attached) return attached;
    const fresh = await format.attach(digest, ref);
    if (format.format === 'erofs') this.store.log.debug(`${this.store.name}: mounted ${ref} (${digest}) at ${fresh.path}`);
    return fresh;
  }

  /** Forget a sandbox's use of its layers, and unmount what no sandbox of this node uses any more. */
  async release(sandboxId: string): Promise<void> {
    await this.store.locked(async () => {
      await this.store.inUse.remove(sandboxId);
      await this.unmountUnused();
    });
  }

  /**
   * Unmount every image no in-use record of this node mounts. A mount that
   * stays busy is reported and left; the next release tries again. Call
   * holding the store's lock.
   */
  async unmountUnused(): Promise<void> {
    const users = await this.store.inUse.mountsOf(this.store.node);
    for (const format of this.chosen.readable) {
      for (const digest of await format.attachedDigests()) {
        if (users.has(digest)) continue;
        try {
          await format.detach(digest);
          this.store.log.debug(`${this.store.name}: unmounted ${digest}`);
        } catch (error) {
          this.store.log.warn(`${this.store.name}: unmounting ${digest} failed, will retry at the next release: ${(error as Error).message}`);
        }
      }
    }
  }

  async stats(): Promise<StorageStats> {
    const users = await this.store.inUse.mountsOf(this.store.node);
    const mounts: MountStats[] = [];
    for (const format of this.chosen.readable) {
      for (const digest of await format.attachedDigests()) {
        const attached = await format.attached(digest);
        if (!attached) continue;
        const { readBase = 0, ...mounted } = attached;
        const counter = attached.device ? await loopBytesRead(attached.device) : undefined;
        const bytesRead = counter === undefined ? undefined : counter - readBase;
        mounts.push({ digest, ...mounted, ...(bytesRead !== undefined ? { bytesRead } : {}), users: users.get(digest) ?? 0 });
      }
    }
    const cache = await this.chosen.primary.cacheStats?.();
    return {
      plugin: this.store.name,
      format: this.chosen.format,
      ...(this.chosen.reason !== undefined ? { reason: this.chosen.reason } : {}),
      description: this.chosen.primary.description,
      store: this.store.dir,
      ...(this.store.backing !== undefined ? { backing: this.store.backing } : {}),
      mounts: mounts.sort((a, b) => a.path.localeCompare(b.path)),
      ...(cache ? { cache } : {}),
    };
  }
}

/** Only EROFS formats read their trees from a data file: a whole image, or a split one's metadata image and blob. */
function imageOf(data: string, metadata: string | undefined): LayerImage {
  return metadata ? { format: 'erofs', path: metadata, blob: data } : { format: 'erofs', path: data };
}
