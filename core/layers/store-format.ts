/**
 * Which format a store keeps new layers in, decided once per store: EROFS
 * when this machine can mount it (probed once per process, see erofs.ts),
 * else directory trees, with the reason. Layers stored earlier in another
 * format stay readable where possible: an EROFS store still reads the trees
 * it kept before EROFS existed.
 */
import type { Logger } from '../hooks.js';
import type { LayerFormat } from '../live.js';
import type { DigestCache } from './digest-cache.js';
import { probeErofs, type ErofsCompression, type ErofsProbe } from './erofs.js';
import { BlobCache } from './images/blob-cache.js';
import { ErofsFormat } from './images/erofs.js';
import { SplitErofsFormat } from './images/split-erofs.js';
import { TreeFormat } from './images/tree.js';
import type { FormatDirs, ImageFormat, NewStaging } from './images/types.js';

/** What a plugin asks for: `auto` (EROFS if it mounts here, else trees), or one of them outright. */
export type FormatChoice = 'auto' | 'erofs' | 'tree';

export interface BlobCacheSettings {
  readonly dir: string;
  readonly maxBytes: number;
}

export interface FormatSettings {
  readonly choice: FormatChoice;
  /** Split EROFS images (metadata local, data blob read from the store) instead of whole ones. */
  readonly split: boolean;
  readonly cache?: BlobCacheSettings;
  /** Whole images' compressor. @default "lz4" */
  readonly compression?: ErofsCompression;
  /** How to learn whether EROFS mounts here. @default probeErofs (once per process) */
  readonly probe?: () => Promise<ErofsProbe>;
}

export interface ChosenFormats {
  readonly format: LayerFormat;
  /** Why not EROFS, when trees were chosen. */
  readonly reason?: string;
  /** The format new layers are stored in. */
  readonly primary: ImageFormat;
  /** Every format layers may be found in, the primary first. */
  readonly readable: readonly ImageFormat[];
}

export interface FormatContext {
  readonly dirs: FormatDirs;
  readonly newStaging: NewStaging;
  readonly digests: DigestCache;
  readonly log: Logger;
  readonly name: string;
}

/** Decide the format (throws when `erofs` is demanded and cannot be mounted) and build the formats. */
export async function chooseFormats(settings: FormatSettings, context: FormatContext): Promise<ChosenFormats> {
  const tree = new TreeFormat(context.dirs, context.newStaging, context.digests);
  let reason: string | undefined = settings.choice === 'tree' ? 'the tree format was chosen in the options' : undefined;
  if (settings.choice !== 'tree') {
    const probe = await (settings.probe ?? probeErofs)();
    reason = settings.split ? probe.split : probe.whole;
    if (reason !== undefined && settings.choice === 'erofs') {
      throw new Error(`${context.name}: format erofs was asked for, but EROFS cannot be mounted here: ${reason}`);
    }
  }
  if (reason !== undefined) return { format: 'tree', reason, primary: tree, readable: [tree] };
  const primary = settings.split ? splitFormat(settings, context) : new ErofsFormat(context.dirs, context.newStaging, settings.compression);
  return { format: 'erofs', primary, readable: [primary, tree] };
}

function splitFormat(settings: FormatSettings, context: FormatContext): SplitErofsFormat {
  let format: SplitErofsFormat | undefined = undefined;
  const cache = settings.cache
    ? new BlobCache({
        dir: settings.cache.dir,
        maxBytes: settings.cache.maxBytes,
        log: context.log,
        name: context.name,
        // A cached blob is in use while a mount reads it.
        inUse: async (digest) => (await format!.attached(digest))?.source === 'cache',
      })
    : undefined;
  format = new SplitErofsFormat(context.dirs, context.newStaging, cache);
  return format;
}
