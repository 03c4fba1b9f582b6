/**
 * The content-addressed layer store, on disk:
 *
 *   <dir>/layers/<hex>.*               a layer's content, in the store's format (images/)
 *   <dir>/refs/<name>@<version>.json   the LayerRecord that makes content visible under a name
 *   <dir>/inuse/<sandbox id>.json      the layers a sandbox resolved, and what was mounted for it (inuse.ts)
 *   <dir>/squashes/<key>.json          merged runs of layers (squash-records.ts)
 *   <dir>/staging/                     work in progress (staging.ts)
 *   <local>/mnt/<hex>                  this node's read-only mounts of images
 *   <local>/cache/source-digests.json  digests of unchanged sources
 *
 * `dir` may be shared by nodes (storage-3fs); `local` is this node's disk
 * (the same folder for storage-local).
 *
 * Publication is ordered so a crash never leaves a half-published layer:
 * the content is built in staging, made durable, renamed into layers/
 * (atomic), and only then the ref is created (temp file, fsync, link: atomic
 * and exclusive). Content without a ref is invisible garbage, collected
 * later; a ref always points at complete content.
 *
 * Mutations of one store are serialised within the process (the node agent
 * owns its store); other processes only use staging dirs of their own.
 */
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { DsecError, isDsecError } from '../errors.js';
import type { Logger } from '../hooks.js';
import type { LayerFormat, LayerRecord, LayerRef, StorageStats } from '../live.js';
import type { LayerModel } from '../model.js';
import { DigestCache } from './digest-cache.js';
import type { ErofsCompression, ErofsProbe } from './erofs.js';
import { digestHex, type TreeDigest } from './digest.js';
import { KeyedMutex, createFileExclusive, fsyncDir, isErrno, isTempName, removeTree } from './fsutil.js';
import type { ImageFormat } from './images/types.js';
import { InUseRegistry } from './inuse.js';
import { detachUnmountedLoops } from './mounts.js';
import { SquashRecords } from './squash-records.js';
import { newStagingDir, sweepStaging } from './staging.js';
import { chooseFormats, type BlobCacheSettings, type ChosenFormats, type FormatChoice } from './store-format.js';
import { StoreMounts, type ResolvedLayer } from './store-mounts.js';

export type { ResolvedLayer } from './store-mounts.js';

/** A staging dir: build the layer in `tree`, then publish or remove it. */
export interface Staging {
  readonly tree: string;
  remove(): Promise<void>;
}

export interface LayerStoreOptions {
  /** The store folder; may be on a filesystem shared by nodes. */
  readonly dir: string;
  /** This node's folder for mounts, copies and caches. @default dir */
  readonly localDir?: string;
  readonly log: Logger;
  /** Who owns the store (the plugin's name), for log lines and messages. @default "layer store" */
  readonly name?: string;
  /** This node's name, written in in-use records (a shared store tells its nodes apart by it). @default "local" */
  readonly node?: string;
  /** @default "auto": EROFS where it mounts, else directory trees */
  readonly format?: FormatChoice;
  /** Whole EROFS images' compressor (lz4hc packs tighter, lz4 builds ~30x faster). @default "lz4" */
  readonly compression?: ErofsCompression;
  /** Split EROFS images: metadata copied to local disk, data read from the store's blob. @default false */
  readonly split?: boolean;
  /** A node-local cache of split images' blobs. */
  readonly cache?: BlobCacheSettings;
  /** How to learn whether EROFS mounts here (tests stand in a failing probe). @default probeErofs */
  readonly probe?: () => Promise<ErofsProbe>;
  /**
   * Says what `dir` is on (e.g. "3FS mount ..."), once, before the store is
   * first used: logged, and in the stats. May throw to refuse the store
   * (a shared mount that is not there).
   */
  readonly backing?: () => Promise<string>;
}

/** Names and versions become file names: no separators, no dot-files, bounded. */
const SAFE_PART = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$/;
/** Unreferenced content younger than this is left alone: another process may be about to write its ref. */
const ORPHAN_GRACE_MS = 10 * 60 * 1000;

const storeLocks = new KeyedMutex();

export function isSafeRefPart(part: string): boolean {
  return SAFE_PART.test(part);
}

export class LayerStore {
  readonly dir: string;
  readonly localDir: string;
  readonly log: Logger;
  readonly name: string;
  readonly node: string;
  readonly refsDir: string;
  readonly stagingDir: string;
  readonly localStagingDir: string;
  readonly digests: DigestCache;
  readonly inUse: InUseRegistry;
  readonly squashes: SquashRecords;
  private readonly options: LayerStoreOptions;
  private chosen: Promise<ChosenFormats> | undefined;
  private mountsOf: StoreMounts | undefined;
  /** What `dir` is on, when the plugin said (`backing` option). */
  backing: string | undefined;

  constructor(options: LayerStoreOptions) {
    this.options = options;
    this.dir = options.dir;
    this.localDir = options.localDir ?? options.dir;
    this.log = options.log;
    this.name = options.name ?? 'layer store';
    this.node = options.node ?? 'local';
    this.refsDir = join(this.dir, 'refs');
    this.stagingDir = join(this.dir, 'staging');
    this.localStagingDir = join(this.localDir, 'staging');
    this.digests = new DigestCache(join(this.localDir, 'cache', 'source-digests.json'));
    this.inUse = new InUseRegistry(join(this.dir, 'inuse'), this.log, this.name);
    this.squashes = new SquashRecords(join(this.dir, 'squashes'));
  }

  private refPath(name: string, version: string): string {
    return join(this.refsDir, `${name}@${version}.json`);
  }

  /** Run `fn` holding the store's lock (one mutation at a time in this process). */
  locked<T>(fn: () => Promise<T>): Promise<T> {
    return storeLocks.run(this.dir, fn);
  }

  /**
   * The formats, decided on first use: folders created, the EROFS probe run
   * and its outcome logged once, leftovers of dead processes swept.
   */
  formats(): Promise<ChosenFormats> {
    this.chosen ??= this.open();
    this.chosen.catch(() => (this.chosen = undefined));
    return this.chosen;
  }

  private async open(): Promise<ChosenFormats> {
    if (this.options.backing) {
      this.backing = await this.options.backing();
      this.log.info(`${this.name}: ${this.backing}`);
    }
    const folders = ['layers', 'refs', 'inuse', 'staging'].map((sub) => join(this.dir, sub));
    await Promise.all([...folders, this.localStagingDir].map((dir) => fs.mkdir(dir, { recursive: true })));
    // Layers hold what sandboxes wrote (snapshots, builds), setuid-root programs
    // included: where content lies, trees or mounts, only root may reach it.
    const contentFolders = [join(this.dir, 'layers'), this.stagingDir, this.localStagingDir, join(this.localDir, 'mnt')];
    for (const dir of contentFolders) {
      await fs.mkdir(dir, { recursive: true, mode: 0o700 });
      await fs.chmod(dir, 0o700);
    }
    await sweepStaging(this.stagingDir, this.log, this.name);
    if (this.localStagingDir !== this.stagingDir) await sweepStaging(this.localStagingDir, this.log, this.name);
    const chosen = await chooseFormats(
      { choice: this.options.format ?? 'auto', split: this.options.split ?? false,
        compression: this.options.compression,
        cache: this.options.cache,
        probe: this.options.probe,
      },
      {
        dirs: { shared: this.dir, local: this.localDir },
        newStaging: (where) => newStagingDir(where === 'shared' ? this.stagingDir : this.localStagingDir),
        digests: this.digests,
        log: this.log,
        name: this.name,
      },
    );
    if (chosen.reason === undefined) this.log.info(`${this.name}: format ${chosen.format}: ${chosen.primary.description}, store ${this.dir}`);
    else this.log.warn(`${this.name}: format tree (erofs unavailable: ${chosen.reason}), store ${this.dir}`);
    this.mountsOf = new StoreMounts(this, chosen);
    // A crash between attaching a loop device and mounting it leaves the device behind.
    for (const device of await detachUnmountedLoops(this.loopPrefixes()).catch(() => [] as string[])) {
      this.log.warn(`${this.name}: detached ${device}, left attached but unmounted by a previous run`);
    }
    return chosen;
  }

  /** Folders whose files this store attaches to loop devices. */
  loopPrefixes(): string[] {
    return [join(this.dir, 'layers'), join(this.localDir, 'meta'), ...(this.options.cache ? [this.options.cache.dir] : [])];
  }

  /** The mount side (resolve, release, stats); ready once `formats()` resolved. */
  async mounts(): Promise<StoreMounts> {
    await this.formats();
    return this.mountsOf!;
  }

  /** A fresh staging dir on this node's disk, named after this process. */
  async stage(): Promise<Staging> {
    await this.formats();
    const staging = await newStagingDir(this.localStagingDir);
    const tree = join(staging.dir, 'tree');
    await fs.mkdir(tree);
    return { tree, remove: staging.remove };
  }

  /** The record of `name@version`, or undefined when it is not published. */
  async readRef(name: string, version: string): Promise<LayerRecord | undefined> {
    if (!isSafeRefPart(name) || !isSafeRefPart(version)) return undefined;
    const file = this.refPath(name, version);
    let text: string;
    try {
      text = await fs.readFile(file, 'utf8');
    } catch (error) {
      if (isErrno(error, 'ENOENT')) return undefined;
      throw error;
    }
    try {
      const record = JSON.parse(text) as LayerRecord;
      digestHex(record.digest);
      return { ...record, format: record.format ?? 'tree' };
    } catch (error) {
      throw new DsecError('DSEC_LAYER_STORE_CORRUPT', {
        path: file,
        message: `unreadable ref record (${(error as Error).message}); unpublish and publish the layer again`,
      });
    }
  }

  /** The format holding complete content for `digest`, if any. */
  async holder(digest: string): Promise<ImageFormat | undefined> {
    for (const format of (await this.formats()).readable) if (await format.has(digest)) return format;
    return undefined;
  }

  /**
   * Put the content of the tree `staged` (digest `digest`) in the store
   * unless it is there. Call holding the lock, with `prepared` built outside
   * it when the content was missing. Returns the format holding it, and
   * whether this call created it.
   */
  async installContent(digest: string, prepare: () => Promise<{ install(): Promise<boolean> } | undefined>): Promise<{ format: LayerFormat; created: boolean }> {
    const holder = await this.holder(digest);
    if (holder) return { format: holder.format, created: false };
    const prepared = await prepare();
    if (!prepared) throw new Error(`the content of ${digest} vanished from the store while it was published; publish again`);
    return { format: (await this.formats()).primary.format, created: await prepared.install() };
  }

  /**
   * Make the tree in `staged` the content of `layer`, whose digest is
   * `tree.digest`. Returns the existing record when the same content is
   * already published; throws DSEC_LAYER_IMMUTABLE when other content is.
   * A missing or incomplete stored form is rebuilt (a repair).
   */
  async commit(layer: LayerModel, tree: TreeDigest, staged: string): Promise<LayerRecord> {
    const ref = `${layer.name}@${layer.version}`;
    const { primary } = await this.formats();
    const prepare = () =>
      primary.prepare(staged, tree.digest).catch((error: unknown) => {
        if (isDsecError(error)) throw error;
        throw new DsecError('DSEC_LAYER_SOURCE', { ref, message: `storing it failed: ${(error as Error).message}` }, { cause: error });
      });
    // Built outside the lock: mkfs.erofs can take a while.
    const prepared = (await this.holder(tree.digest)) ? undefined : await prepare();
    try {
      return await this.locked(async () => {
        const existing = await this.readRef(layer.name, layer.version);
        if (existing && existing.digest !== tree.digest) {
          throw new DsecError('DSEC_LAYER_IMMUTABLE', { ref, existing: existing.digest, digest: tree.digest });
        }
        const { format, created } = await this.installContent(tree.digest, async () => prepared ?? (await prepare()));
        if (existing) return existing;
        const record: LayerRecord = {
          name: layer.name,
          version: layer.version,
          kind: layer.kind,
          digest: tree.digest,
          sizeBytes: tree.sizeBytes,
          files: tree.entries,
          publishedAt: new Date().toISOString(),
          format,
        };
        try {
          await createFileExclusive(this.refPath(layer.name, layer.version), JSON.stringify(record, null, 2) + '\n');
          return record;
        } catch (error) {
          // EEXIST: another process published this ref between our read and our write.
          const raced = isErrno(error, 'EEXIST') ? await this.readRef(layer.name, layer.version) : undefined;
          if (raced?.digest === tree.digest) return raced;
          if (created) await this.drop(tree.digest);
          if (raced) throw new DsecError('DSEC_LAYER_IMMUTABLE', { ref, existing: raced.digest, digest: tree.digest });
          throw error;
        }
      });
    } finally {
      await prepared?.discard();
    }
  }

  /** Every published layer, sorted by ref. A damaged ref file is reported in the log and skipped. */
  async list(): Promise<LayerRecord[]> {
    await this.formats();
    const records: LayerRecord[] = [];
    for (const name of (await fs.readdir(this.refsDir)).sort()) {
      if (!name.endsWith('.json') || isTempName(name)) continue;
      const ref = name.slice(0, -'.json'.length);
      const at = ref.lastIndexOf('@');
      try {
        const record = await this.readRef(ref.slice(0, at), ref.slice(at + 1));
        if (record) records.push(record);
      } catch (error) {
        this.log.warn(`${this.name}: skipping ${name}: ${(error as Error).message}`);
      }
    }
    return records;
  }

  /** Remove `name@version`, and its content when nothing else uses it. Refused while a sandbox uses the layer. */
  async remove(name: string, version: string): Promise<void> {
    const ref = `${name}@${version}`;
    await this.formats();
    await this.locked(async () => {
      const record = await this.readRef(name, version);
      if (!record) throw new DsecError('DSEC_LAYER_NOT_FOUND', { ref });
      const user = (await this.inUse.all()).find((inUse) => inUse.layers.some((layer) => layer.ref === ref));
      if (user) throw new DsecError('DSEC_LAYER_IN_USE', { ref, id: user.sandbox });
      await fs.unlink(this.refPath(name, version));
      await fsyncDir(this.refsDir);
      await this.collect(record.digest);
    });
  }

  /** Check the layers and mount them for a sandbox (see StoreMounts.resolve). */
  async resolve(sandboxId: string, layers: readonly LayerRef[]): Promise<ResolvedLayer[]> {
    return (await this.mounts()).resolve(sandboxId, layers);
  }

  /** Forget that a sandbox uses its layers and unmount what no one uses any more. Idempotent. */
  async release(sandboxId: string): Promise<void> {
    if (!InUseRegistry.isValidId(sandboxId)) return;
    await (await this.mounts()).release(sandboxId);
  }

  /** What the store is and what it has mounted on this node. */
  async stats(): Promise<StorageStats> {
    return (await this.mounts()).stats();
  }

  /** Wait for the formats' background work (cache fills). */
  async settled(): Promise<void> {
    await (await this.formats()).primary.settled?.();
  }

  /**
   * Remove content no ref, no sandbox and no live squash uses: `unpublished`
   * (just unreferenced), and orphans a crash left between a rename and its
   * ref (old enough that no publish can still be on its way). Squash records
   * of runs whose layers are no longer all published go too. Nothing is
   * collected if a ref file cannot be read: it might be the one that uses it.
   */
  async collect(unpublished: string): Promise<void> {
    const used = new Set<string>();
    for (const inUse of await this.inUse.all()) {
      for (const digest of [...inUse.layers.map((layer) => layer.digest), ...(inUse.mounts ?? [])]) used.add(digest);
    }
    const published = new Set<string>();
    for (const name of await fs.readdir(this.refsDir)) {
      if (!name.endsWith('.json') || isTempName(name)) continue;
      try {
        published.add((JSON.parse(await fs.readFile(join(this.refsDir, name), 'utf8')) as LayerRecord).digest);
      } catch (error) {
        this.log.warn(`${this.name}: not collecting unused layers: ${name} is unreadable (${(error as Error).message})`);
        return;
      }
    }
    for (const digest of published) used.add(digest);
    // Content this call just made unreferenced goes at once; older orphans only after the grace period.
    const released = new Set([unpublished]);
    for (const squash of await this.squashes.all()) {
      if (squash.layers.every((layer) => published.has(layer.digest))) used.add(squash.digest);
      else if (!used.has(squash.digest)) {
        await this.squashes.remove(squash);
        released.add(squash.digest);
      }
    }
    const dropped = new Set<string>();
    for (const format of (await this.formats()).readable) {
      for (const stored of await format.stored()) {
        if (used.has(stored.digest) || dropped.has(stored.digest)) continue;
        if (!released.has(stored.digest) && Date.now() - stored.changedMs < ORPHAN_GRACE_MS) continue;
        await this.drop(stored.digest);
        dropped.add(stored.digest);
      }
    }
  }

  /** Unmount (if mounted here) and remove the content of `digest`, in every format that has some. */
  async drop(digest: string): Promise<void> {
    for (const format of (await this.formats()).readable) {
      if ((await format.attached(digest)) !== undefined) await format.detach(digest);
      const trash = await newStagingDir(this.stagingDir, 'trash');
      await fs.rmdir(trash.dir);
      await format.drop(digest, trash.dir);
      await removeTree(trash.dir);
    }
  }
}
