/**
 * How a layer's content is kept in the store and made readable on a node.
 * The store (store.ts) owns names, refs and who uses what; an `ImageFormat`
 * owns the bytes: it turns a staged tree into its stored form, and mounts
 * (attaches) and unmounts it. Three formats exist: directory trees, whole
 * EROFS images, and split EROFS images (metadata + blob) for shared stores.
 */
import type { CacheStats, LayerFormat } from '../../live.js';

/** Where a format keeps things: `shared` holds the published content, `local` this node's mounts and copies. */
export interface FormatDirs {
  /** The store folder (`layers/`, `staging/` under it). May be shared by nodes. */
  readonly shared: string;
  /** This node's folder (`mnt/`, `meta/`, `staging/`). The same as `shared` for a node-local store. */
  readonly local: string;
}

/** A stored form built in staging, not yet visible. */
export interface PreparedImage {
  /** Move it into `layers/` (atomic, durable). Returns false if another publish put it there first. */
  install(): Promise<boolean>;
  /** Remove what is left in staging. */
  discard(): Promise<void>;
}

/** A layer readable on this node. */
export interface AttachedImage {
  /** The tree backends use as a lower dir. */
  readonly path: string;
  /** The loop device its data is read through (counters), when mounted. */
  readonly device?: string;
  /** Where the data comes from: the store itself, or this node's cache copy. */
  readonly source?: 'store' | 'cache';
  /** Bytes of the data the device reads (image or blob). */
  readonly dataBytes?: number;
  /** The file the device reads. */
  readonly data?: string;
  /** A split image's metadata image (node-local), which the mount reads. */
  readonly metadata?: string;
  /** The loop device of the metadata image. */
  readonly metadataDevice?: string;
  /** The device's bytes-read counter when it was attached (loop devices keep counting across users). */
  readonly readBase?: number;
}

export interface ImageFormat {
  readonly format: LayerFormat;
  /** A short description for logs and stats (`erofs (lz4)`, `erofs split (metadata local, blob on the store)`). */
  readonly description: string;
  /** Whether the complete stored form of `digest` is in the store. */
  has(digest: string): Promise<boolean>;
  /**
   * Build the stored form of the tree at `tree` (digest `digest`, built in
   * staging), outside any lock: this may take a while.
   */
  prepare(tree: string, digest: string): Promise<PreparedImage>;
  /**
   * Make the layer readable on this node and return where. Called by the
   * store only when it is not attached yet; verifies the content first
   * (DSEC_LAYER_CONTENT_MISMATCH naming `ref`).
   */
  attach(digest: string, ref: string): Promise<AttachedImage>;
  /** What is attached for `digest` now, if anything (after an agent restart too). */
  attached(digest: string): Promise<AttachedImage | undefined>;
  /** Undo `attach`. Idempotent. */
  detach(digest: string): Promise<void>;
  /** Digests attached on this node now. */
  attachedDigests(): Promise<string[]>;
  /** Remove the stored form; the caller made sure nothing uses it. `trash` is an unused staging path to move it to first. */
  drop(digest: string, trash: string): Promise<void>;
  /** Digests with something of theirs in `layers/` (complete or not) and when it last changed, for collection. */
  stored(): Promise<StoredImage[]>;
  /** This node's cache of the format, if it keeps one (split images). */
  cacheStats?(): Promise<CacheStats | undefined>;
  /** Wait for background work (cache fills) to finish. */
  settled?(): Promise<void>;
}

export interface StoredImage {
  readonly digest: string;
  readonly changedMs: number;
}

/** Where a format can make staging dirs: `local` (node disk) or `shared` (the store's filesystem, for atomic renames into it). */
export type NewStaging = (where: 'local' | 'shared') => Promise<{ readonly dir: string; remove(): Promise<void> }>;

