/**
 * An `oci` source: an OCI image flattened into one layer tree.
 *
 * Two inputs, told apart by looking at them:
 * - an OCI image layout directory (`oci-layout`, `index.json`,
 *   `blobs/sha256/<hex>`), as skopeo, buildah or `docker save` (25+) write it;
 * - a docker-archive tarball (`docker save`): `manifest.json` naming a
 *   config and layer tars. A tarball is unpacked first (through the same
 *   guarded extraction as a `tar` source); if it holds an OCI layout too,
 *   the layout is read, since it names every blob by digest.
 *
 * Every blob is checked before it is used: present, inside the image (never
 * reached through a symlink leading out), and its sha256 equal to the digest
 * that names it (OCI: the descriptor's digest; docker-archive:
 * the config's `rootfs.diff_ids`, over the uncompressed tar). Each image
 * layer (tar or tar+gzip) is extracted with the archive guard (no absolute
 * paths, `..`, devices, escaping links; `.wh.` entries become overlay marks)
 * and applied over the layers below it with overlayfs semantics, so a
 * whiteout deletes and an opaque directory hides what earlier layers put
 * there. The result is the bottom of a stack: no whiteout or opaque mark is
 * left in it. Any problem is a DsecError naming the layer; the caller's
 * staging dir is then discarded and nothing is published.
 */
import { createHash } from 'node:crypto';
import { createReadStream, promises as fs } from 'node:fs';
import { dirname, join, posix, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { DsecError, isDsecError } from '../../errors.js';
import { applyLayerTree } from '../apply-layer.js';
import { extractArchive } from '../archive.js';
import { walkTree } from '../digest.js';
import { isErrno, removeTree } from '../fsutil.js';
import { clearOpaque } from '../overlay-marks.js';

/** Bumped when what an image flattens to changes, so digests cached before are not reused. */
export const OCI_READER_VERSION = 'oci-reader 1';

export interface OciSource {
  readonly path: string;
  readonly image?: string;
}

/** One image layer to apply: where its blob is and what digest it must have. */
interface LayerBlob {
  readonly file: string;
  /** `sha256:<hex>` the file's bytes must hash to (OCI), or undefined. */
  readonly digest?: string;
  /** `sha256:<hex>` the uncompressed tar must hash to (docker-archive diff_id), or undefined. */
  readonly diffId?: string;
  readonly size?: number;
  readonly name: string;
}

const OCI_INDEX_TYPES = new Set(['application/vnd.oci.image.index.v1+json', 'application/vnd.docker.distribution.manifest.list.v2+json']);
const OCI_MANIFEST_TYPES = new Set(['application/vnd.oci.image.manifest.v1+json', 'application/vnd.docker.distribution.manifest.v2+json']);
const LAYER_TYPES = new Set([
  'application/vnd.oci.image.layer.v1.tar',
  'application/vnd.oci.image.layer.v1.tar+gzip',
  'application/vnd.oci.image.layer.nondistributable.v1.tar',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip',
  'application/vnd.docker.image.rootfs.diff.tar',
  'application/vnd.docker.image.rootfs.diff.tar.gzip',
  'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip',
]);
/** Manifests and indexes are small; anything bigger is not one. */
const MAX_JSON_BYTES = 4 * 1024 * 1024;
const REF_NAME = 'org.opencontainers.image.ref.name';
const CONTAINERD_NAME = 'io.containerd.image.name';

type Json = Record<string, unknown>;

function sourceError(ref: string, message: string, cause?: unknown): DsecError {
  return new DsecError('DSEC_LAYER_SOURCE', { ref, message }, cause === undefined ? {} : { cause });
}

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const short = (digest: string): string => digest.replace(/^sha256:/, '').slice(0, 12);

/** Fill the existing, empty directory `target` with the flattened image. */
export async function materialiseOci(source: OciSource, target: string, ref: string): Promise<void> {
  const stat = await fs.stat(source.path).catch((error: unknown) => {
    const message = isErrno(error, 'ENOENT', 'ENOTDIR')
      ? `OCI image ${source.path} does not exist`
      : `cannot read OCI image ${source.path}: ${(error as Error).message}`;
    throw sourceError(ref, message, error);
  });
  // Scratch space beside the target: same filesystem, removed with it at worst.
  const scratch = await fs.mkdtemp(join(dirname(target), '.oci-'));
  try {
    let root = source.path;
    if (!stat.isDirectory()) {
      root = join(scratch, 'archive');
      await fs.mkdir(root);
      await extractArchive(source.path, root, ref);
    }
    const blobs = await imageLayers(root, source, ref);
    await flatten(blobs, target, scratch, ref);
  } finally {
    await removeTree(scratch);
  }
}

/** The layers of the chosen image, bottom to top, from whichever format `root` holds. */
async function imageLayers(root: string, source: OciSource, ref: string): Promise<LayerBlob[]> {
  if (await isFile(join(root, 'index.json'))) return ociLayoutLayers(root, source, ref);
  if (await isFile(join(root, 'manifest.json'))) return dockerArchiveLayers(root, source, ref);
  throw sourceError(
    ref,
    `${source.path} is neither an OCI image layout (no index.json) nor a docker-archive (no manifest.json)`,
  );
}

async function isFile(path: string): Promise<boolean> {
  return (await fs.stat(path).catch(() => undefined))?.isFile() === true;
}

/**
 * `file` (under `root`) with its symlinks resolved, refused when that leads
 * out of the image: an image tarball may hold absolute symlinks, and reading
 * index.json or a blob through one would read (and echo in errors) the
 * host's files. A missing file is returned as is, for the caller to report.
 */
async function insideImage(root: string, file: string, what: string, ref: string): Promise<string> {
  let real: string;
  try {
    real = await fs.realpath(file);
  } catch (error) {
    if (isErrno(error, 'ENOENT', 'ENOTDIR')) return file;
    throw sourceError(ref, `cannot read ${what}: ${(error as Error).message}`, error);
  }
  const realRoot = await fs.realpath(root);
  if (!real.startsWith(realRoot + sep)) throw sourceError(ref, `${what} leads outside the image (through a symlink)`);
  return real;
}

async function readJson(file: string, what: string, ref: string): Promise<unknown> {
  let text: string;
  try {
    const stat = await fs.stat(file);
    if (stat.size > MAX_JSON_BYTES) throw sourceError(ref, `${what} is ${stat.size} bytes, too big for a manifest`);
    text = await fs.readFile(file, 'utf8');
  } catch (error) {
    if (isDsecError(error)) throw error;
    throw sourceError(ref, `cannot read ${what}: ${(error as Error).message}`, error);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw sourceError(ref, `${what} is malformed: not JSON (${(error as Error).message})`, error);
  }
}

// ------------------------------------------------------------ OCI layout

/** `blobs/<algorithm>/<hex>` under the layout, for a sha256 digest only (the hex is checked, so it cannot climb out). */
function blobPath(root: string, digest: unknown, what: string, ref: string): string {
  if (typeof digest !== 'string') throw sourceError(ref, `${what} has no digest`);
  const match = /^([a-z0-9]+(?:[+._-][a-z0-9]+)*):([a-zA-Z0-9=_-]+)$/.exec(digest);
  if (!match) throw sourceError(ref, `${what} has a malformed digest ${JSON.stringify(digest)}`);
  if (match[1] !== 'sha256') throw sourceError(ref, `${what} uses digest algorithm ${match[1]}; only sha256 is supported`);
  if (!/^[0-9a-f]{64}$/.test(match[2])) throw sourceError(ref, `${what} has a malformed sha256 digest ${JSON.stringify(digest)}`);
  return join(root, 'blobs', 'sha256', match[2]);
}

/** A JSON blob (manifest, index) read after its digest was checked. */
async function readBlobJson(root: string, descriptor: Json, what: string, ref: string): Promise<Json> {
  const file = await insideImage(root, blobPath(root, descriptor.digest, what, ref), what, ref);
  await verifyBlob({ file, digest: descriptor.digest as string, size: sizeOf(descriptor), name: what }, ref);
  const parsed = await readJson(file, `${what} ${descriptor.digest as string}`, ref);
  if (!isObject(parsed)) throw sourceError(ref, `${what} ${descriptor.digest as string} is malformed: not a JSON object`);
  return parsed;
}

function sizeOf(descriptor: Json): number | undefined {
  return typeof descriptor.size === 'number' && Number.isInteger(descriptor.size) ? descriptor.size : undefined;
}

/** The names an index entry goes by (a tag, a full reference). */
function descriptorNames(descriptor: Json): string[] {
  const annotations = isObject(descriptor.annotations) ? descriptor.annotations : {};
  return [annotations[REF_NAME], annotations[CONTAINERD_NAME]].filter((name): name is string => typeof name === 'string');
}

/** `docker.io/library/busybox` -> `busybox:latest`: how people write the same image. */
export function normaliseImageName(name: string): string {
  let short = name.replace(/^docker\.io\/(library\/)?/, '');
  if (!/:[^/]+$/.test(short) && !short.includes('@')) short = `${short}:latest`;
  return short;
}

function matchesImage(names: readonly string[], wanted: string): boolean {
  return names.some((name) => name === wanted || normaliseImageName(name) === normaliseImageName(wanted));
}

function chooseImage<T>(candidates: readonly T[], namesOf: (candidate: T) => string[], source: OciSource, ref: string): T {
  const listed = candidates.flatMap(namesOf);
  const known = listed.length > 0 ? `it holds: ${[...new Set(listed)].join(', ')}` : 'its images carry no names';
  if (source.image !== undefined) {
    const found = candidates.filter((candidate) => matchesImage(namesOf(candidate), source.image!));
    if (found.length === 1) return found[0];
    const problem = found.length === 0 ? `has no image ${source.image}` : `has ${found.length} images named ${source.image}`;
    throw sourceError(ref, `${source.path} ${problem} (${known})`);
  }
  if (candidates.length === 1) return candidates[0];
  if (candidates.length === 0) throw sourceError(ref, `${source.path} holds no image`);
  throw sourceError(ref, `${source.path} holds ${candidates.length} images; pick one with image: (${known})`);
}

const NODE_ARCH: Readonly<Record<string, string>> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ppc64: 'ppc64le', s390x: 's390x' };

/** In a multi-platform index, the manifest for this machine (linux, its architecture). */
function choosePlatform(manifests: readonly Json[], ref: string, what: string): Json {
  if (manifests.length === 1) return manifests[0];
  const arch = NODE_ARCH[process.arch] ?? process.arch;
  const fits = manifests.filter((manifest) => {
    const platform = isObject(manifest.platform) ? manifest.platform : {};
    return platform.os === 'linux' && platform.architecture === arch;
  });
  if (fits.length >= 1) return fits[0];
  throw sourceError(ref, `${what} has no manifest for linux/${arch}`);
}

/** The descriptors listed by an index (`index.json`, or a nested one). */
function indexManifests(index: unknown, what: string, ref: string): Json[] {
  if (!isObject(index) || !Array.isArray(index.manifests)) {
    throw sourceError(ref, `${what} is malformed: expected an object with a "manifests" list`);
  }
  index.manifests.forEach((entry, position) => {
    if (!isObject(entry) || typeof entry.digest !== 'string') {
      throw sourceError(ref, `${what} is malformed: manifests[${position}] is not a descriptor with a digest`);
    }
  });
  return index.manifests as Json[];
}

async function ociLayoutLayers(root: string, source: OciSource, ref: string): Promise<LayerBlob[]> {
  const index = await readJson(await insideImage(root, join(root, 'index.json'), 'index.json', ref), 'index.json', ref);
  let descriptor = chooseImage(indexManifests(index, 'index.json', ref), descriptorNames, source, ref);
  // A multi-platform image: an index inside the index (one level is what tools write; two are allowed).
  for (let depth = 0; depth < 2 && OCI_INDEX_TYPES.has(String(descriptor.mediaType)); depth++) {
    const nested = await readBlobJson(root, descriptor, 'image index', ref);
    descriptor = choosePlatform(indexManifests(nested, `image index ${descriptor.digest as string}`, ref), ref, `image index ${descriptor.digest as string}`);
  }
  if (descriptor.mediaType !== undefined && !OCI_MANIFEST_TYPES.has(String(descriptor.mediaType))) {
    throw sourceError(ref, `index.json names ${descriptor.digest as string} with media type ${String(descriptor.mediaType)}, not an image manifest`);
  }
  const manifest = await readBlobJson(root, descriptor, 'image manifest', ref);
  const what = `image manifest ${descriptor.digest as string}`;
  if (manifest.schemaVersion !== 2) throw sourceError(ref, `${what} is malformed: schemaVersion is ${JSON.stringify(manifest.schemaVersion)}, not 2`);
  if (!Array.isArray(manifest.layers)) throw sourceError(ref, `${what} is malformed: it has no "layers" list`);
  const layers = manifest.layers.map((layer, position) => {
    const name = `image layer ${position + 1} of ${(manifest.layers as unknown[]).length}`;
    if (!isObject(layer)) throw sourceError(ref, `${what} is malformed: layers[${position}] is not a descriptor`);
    const mediaType = String(layer.mediaType);
    if (!LAYER_TYPES.has(mediaType)) {
      const hint = /zstd/.test(mediaType) ? ' (zstd-compressed layers are not supported: only tar and tar+gzip)' : '';
      throw sourceError(ref, `${name} has media type ${mediaType}${hint}`);
    }
    return { file: blobPath(root, layer.digest, name, ref), digest: layer.digest as string, size: sizeOf(layer), name };
  });
  return Promise.all(layers.map(async (layer): Promise<LayerBlob> => ({ ...layer, file: await insideImage(root, layer.file, layer.name, ref) })));
}

// ------------------------------------------------------- docker-archive

/** A member path of the archive, inside `root` even after following symlinks. */
async function memberPath(root: string, member: unknown, what: string, ref: string): Promise<string> {
  if (typeof member !== 'string' || member === '') throw sourceError(ref, `manifest.json is malformed: ${what} is not a path`);
  const normal = posix.normalize(member);
  if (member.startsWith('/') || normal === '..' || normal.startsWith('../')) {
    throw sourceError(ref, `manifest.json names ${what} ${member}, outside the archive`);
  }
  const file = join(root, normal);
  let real: string;
  try {
    real = await fs.realpath(file);
  } catch (error) {
    throw sourceError(ref, `${what} ${member} named by manifest.json is missing from the archive`, error);
  }
  const realRoot = await fs.realpath(root);
  if (!real.startsWith(realRoot + sep)) throw sourceError(ref, `${what} ${member} leads outside the archive`);
  return real;
}

async function dockerArchiveLayers(root: string, source: OciSource, ref: string): Promise<LayerBlob[]> {
  const manifest = await readJson(await insideImage(root, join(root, 'manifest.json'), 'manifest.json', ref), 'manifest.json', ref);
  if (!Array.isArray(manifest) || manifest.some((entry) => !isObject(entry))) {
    throw sourceError(ref, 'manifest.json is malformed: expected a list of {Config, RepoTags, Layers}');
  }
  const tagsOf = (entry: Json): string[] => (Array.isArray(entry.RepoTags) ? entry.RepoTags.filter((tag): tag is string => typeof tag === 'string') : []);
  const image = chooseImage(manifest as Json[], tagsOf, source, ref);
  if (!Array.isArray(image.Layers) || image.Layers.length === 0) {
    throw sourceError(ref, 'manifest.json is malformed: the image has no "Layers" list');
  }
  const configFile = await memberPath(root, image.Config, 'the image config', ref);
  const config = await readJson(configFile, `image config ${String(image.Config)}`, ref);
  const configHex = /^(?:blobs\/sha256\/)?([0-9a-f]{64})(?:\.json)?$/.exec(String(image.Config))?.[1];
  if (configHex) await verifyBlob({ file: configFile, digest: `sha256:${configHex}`, name: 'the image config' }, ref);
  const diffIds = isObject(config) && isObject(config.rootfs) && Array.isArray(config.rootfs.diff_ids) ? config.rootfs.diff_ids : undefined;
  if (!diffIds || diffIds.length !== image.Layers.length) {
    throw sourceError(ref, `image config ${String(image.Config)} is malformed: rootfs.diff_ids does not list one digest per layer`);
  }
  const layers = image.Layers as unknown[];
  return Promise.all(
    layers.map(async (member, position): Promise<LayerBlob> => {
      const name = `image layer ${position + 1} of ${layers.length}`;
      const diffId = diffIds[position];
      if (typeof diffId !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(diffId)) {
        throw sourceError(ref, `image config ${String(image.Config)} is malformed: diff_ids[${position}] is not a sha256 digest`);
      }
      return { file: await memberPath(root, member, name, ref), diffId, name };
    }),
  );
}

// ------------------------------------------------------ checks and apply

async function isGzip(file: string): Promise<boolean> {
  const handle = await fs.open(file, 'r');
  try {
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(2), 0, 2, 0);
    return bytesRead === 2 && buffer[0] === 0x1f && buffer[1] === 0x8b;
  } finally {
    await handle.close();
  }
}

async function sha256Of(file: string, gunzip: boolean): Promise<string> {
  const hash = createHash('sha256');
  const input = createReadStream(file);
  if (gunzip) await pipeline(input, createGunzip(), hash);
  else await pipeline(input, hash);
  return `sha256:${hash.digest('hex')}`;
}

/** The blob is there, has its declared size, and hashes to its digest (or diff_id). */
async function verifyBlob(blob: LayerBlob, ref: string): Promise<void> {
  const named = blob.digest ?? blob.diffId ?? '';
  const stat = await fs.stat(blob.file).catch((error: unknown) => {
    const why = isErrno(error, 'ENOENT', 'ENOTDIR') ? 'is missing' : `cannot be read (${(error as Error).message})`;
    throw sourceError(ref, `the blob of ${blob.name} (${named}) ${why}`, error);
  });
  if (!stat.isFile()) throw sourceError(ref, `the blob of ${blob.name} (${named}) is not a file`);
  if (blob.size !== undefined && stat.size !== blob.size) {
    throw sourceError(ref, `the blob of ${blob.name} (${named}) is ${stat.size} bytes, but the manifest says ${blob.size}: it is truncated or corrupt`);
  }
  let found: string;
  let expected: string;
  try {
    if (blob.digest !== undefined) {
      expected = blob.digest;
      found = await sha256Of(blob.file, false);
    } else {
      expected = blob.diffId!;
      found = await sha256Of(blob.file, await isGzip(blob.file));
    }
  } catch (error) {
    throw sourceError(ref, `the blob of ${blob.name} (${named}) cannot be read: ${(error as Error).message}`, error);
  }
  if (found !== expected) {
    throw sourceError(ref, `digest mismatch: the blob of ${blob.name} should be ${expected} but is ${found}; the image is corrupt`);
  }
}

/** Say which image layer an extraction error came from. */
function inLayer(error: unknown, blob: LayerBlob, ref: string): unknown {
  if (!isDsecError(error)) return error;
  const named = blob.digest ?? blob.diffId;
  error.message = `${error.message} (in ${blob.name}${named ? `, ${short(named)}` : ''})`;
  return error;
}

/** Apply the layers bottom to top into `target`; each blob is verified right before it is used. */
async function flatten(blobs: readonly LayerBlob[], target: string, scratch: string, ref: string): Promise<void> {
  for (const [position, blob] of blobs.entries()) {
    await verifyBlob(blob, ref);
    try {
      if (position === 0) {
        // The bottom layer goes straight into the target: no copy of what is usually the biggest layer.
        await extractArchive(blob.file, target, ref);
        await dropMarks(target, ref);
        continue;
      }
      const layerDir = join(scratch, `layer-${position}`);
      await fs.mkdir(layerDir);
      await extractArchive(blob.file, layerDir, ref);
      await applyLayerTree(target, layerDir, { ref });
      await removeTree(layerDir);
    } catch (error) {
      throw inLayer(error, blob, ref);
    }
  }
}

/** The bottom of a stack hides nothing: its whiteouts and opaque marks mean nothing and are removed. */
async function dropMarks(target: string, ref: string): Promise<void> {
  const entries = await walkTree(target, ref);
  for (const entry of entries) if (entry.type === 'whiteout') await fs.rm(join(target, entry.path));
  await clearOpaque(entries.filter((entry) => entry.opaque).map((entry) => join(target, entry.path)));
}
