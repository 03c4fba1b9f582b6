/**
 * The directory-tree format: `layers/<hex>/` is the layer, used as a lower
 * dir as it is. The fallback where EROFS cannot be mounted, and how stores
 * kept layers before EROFS.
 *
 * Verification: before a tree is first used in a process, it is digested
 * again and compared with its name. The store's digest cache keeps the
 * tree's stat signature once verified, so later checks (an agent restart)
 * cost a walk of lstat calls, not a read of every byte, while nothing
 * changed.
 */
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { DsecError } from '../../errors.js';
import { signTree, type DigestCache } from '../digest-cache.js';
import { digestEntries, digestHex, walkTree } from '../digest.js';
import { changedMs, fsyncDir, removeTree, syncFilesystem } from '../fsutil.js';
import { copyTree } from '../sources/dir.js';
import type { AttachedImage, FormatDirs, ImageFormat, NewStaging, PreparedImage, StoredImage } from './types.js';

export class TreeFormat implements ImageFormat {
  readonly format = 'tree' as const;
  readonly description = 'directory trees';
  private readonly layersDir: string;
  /** Digests verified by this process. */
  private readonly verified = new Set<string>();

  constructor(
    private readonly dirs: FormatDirs,
    private readonly newStaging: NewStaging,
    private readonly digests: DigestCache,
  ) {
    this.layersDir = join(dirs.shared, 'layers');
  }

  treePath(digest: string): string {
    return join(this.layersDir, digestHex(digest));
  }

  async has(digest: string): Promise<boolean> {
    const stat = await fs.stat(this.treePath(digest)).catch(() => undefined);
    return stat?.isDirectory() === true;
  }

  async prepare(tree: string, digest: string): Promise<PreparedImage> {
    let source = tree;
    let shared: { dir: string; remove(): Promise<void> } | undefined;
    // A rename only works within one filesystem: a tree staged on local disk is copied to the store's.
    if (!tree.startsWith(`${this.dirs.shared}/`)) {
      shared = await this.newStaging('shared');
      source = join(shared.dir, 'tree');
      await fs.mkdir(source);
      await copyTree(tree, source, digest);
      await fs.chown(source, 0, 0);
      await fs.chmod(source, 0o755);
    }
    // Durable before visible.
    await syncFilesystem(source);
    return {
      install: async () => {
        if (await this.has(digest)) return false;
        await fs.rename(source, this.treePath(digest));
        await fsyncDir(this.layersDir);
        return true;
      },
      discard: async () => {
        await shared?.remove();
      },
    };
  }

  async attach(digest: string, ref: string): Promise<AttachedImage> {
    const path = this.treePath(digest);
    if (!(await this.has(digest))) {
      throw new DsecError('DSEC_LAYER_STORE_CORRUPT', { path, message: `the tree of ${ref} is missing; unpublish and publish the layer again` });
    }
    if (!this.verified.has(digest)) {
      await this.verify(digest, ref, path);
      this.verified.add(digest);
    }
    return { path };
  }

  private async verify(digest: string, ref: string, path: string): Promise<void> {
    const entries = await walkTree(path, ref);
    const signature = signTree(`verify|${digest}`, await fs.stat(path, { bigint: true }), entries);
    if ((await this.digests.get(signature)) === digest) return;
    const actual = (await digestEntries(path, entries, ref)).digest;
    if (actual !== digest) {
      throw new DsecError('DSEC_LAYER_CONTENT_MISMATCH', { ref, what: 'the tree', path, expected: digest, actual });
    }
    await this.digests.set(signature, digest);
  }

  /** A tree needs no mount: nothing is ever attached. */
  async attached(): Promise<AttachedImage | undefined> {
    return undefined;
  }

  async detach(): Promise<void> {}

  async attachedDigests(): Promise<string[]> {
    return [];
  }

  async drop(digest: string, trash: string): Promise<void> {
    this.verified.delete(digest);
    try {
      await fs.rename(this.treePath(digest), trash);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    await fsyncDir(this.layersDir);
    await removeTree(trash);
  }

  async stored(): Promise<StoredImage[]> {
    const stored: StoredImage[] = [];
    for (const name of await fs.readdir(this.layersDir).catch(() => [] as string[])) {
      if (!/^[0-9a-f]{64}$/.test(name)) continue;
      const changed = await changedMs(join(this.layersDir, name));
      if (changed !== undefined) stored.push({ digest: `sha256:${name}`, changedMs: changed });
    }
    return stored;
  }
}
