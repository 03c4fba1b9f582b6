/**
 * The layer store machinery every storage plugin builds on, exported through
 * the public plugin API: canonical digests, layer sources, safe archive
 * extraction, the content-addressed store and its in-use registry.
 */
export { applyLayerTree, flattenLayers, type ApplyLayerOptions } from './apply-layer.js';
export { extractArchive } from './archive.js';
export { DigestCache, signFile, signTree, type DigestCacheOptions, type SourceSignature } from './digest-cache.js';
export {
  LISTING_VERSION,
  comparePaths,
  digestEntries,
  digestHex,
  digestOfListing,
  digestTree,
  listingOf,
  walkTree,
  type EntryType,
  type TreeDigest,
  type TreeEntry,
} from './digest.js';
export {
  KeyedMutex,
  createFileExclusive,
  fsyncDir,
  isErrno,
  isTempName,
  mapLimit,
  pathExists,
  removeTree,
  syncFilesystem,
  writeFileAtomic,
} from './fsutil.js';
export {
  OPAQUE_MARKER,
  OPAQUE_XATTR,
  WHITEOUT_PREFIX,
  clearOpaque,
  findOpaqueDirs,
  isWhiteout,
  makeWhiteouts,
  markOpaque,
} from './overlay-marks.js';
export { checkStorable, digestLayer, publishLayer } from './publish.js';
export { BUSYBOX_ROOTFS_VERSION, buildBusyboxRootfs } from './sources/busybox.js';
export { copyTree, setMetadata, writeNonDirectories } from './sources/dir.js';
export { materialise } from './sources/index.js';
export { probeErofs, buildErofsImage, checkErofsImage, SPLIT_CHUNK_BYTES, type ErofsCompression, type ErofsProbe } from './erofs.js';
export type { AttachedImage, ImageFormat } from './images/types.js';
export { InUseRegistry, type InUseRecord } from './inuse.js';
export {
  attachLoop,
  detachLoop,
  detachUnmountedLoops,
  isFilesystemRoot,
  isMountPoint,
  loopBytesRead,
  loopsBackedBy,
  mountErofs,
  mountsUnder,
  readMounts,
  unmount,
  type LoopDevice,
  type MountEntry,
} from './mounts.js';
export { squashLayers } from './squash.js';
export { LayerStore, isSafeRefPart, type LayerStoreOptions, type ResolvedLayer, type Staging } from './store.js';
export type { BlobCacheSettings, FormatChoice } from './store-format.js';
export { tapLayerStore, type LayerStoreRecord } from './taps.js';
