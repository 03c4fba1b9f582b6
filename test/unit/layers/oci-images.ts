/**
 * Small OCI images for tests, made with node-tar: an OCI image layout
 * directory (index.json + blobs/sha256) or a docker-archive tarball
 * (manifest.json + config + <id>/layer.tar), from layer trees written as
 * plain files (`.wh.` whiteout files included, as image layers hold them).
 */
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import * as tar from 'tar';
import { writeTree } from './helpers.js';

export type LayerFiles = Record<string, string>;

const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

/** A tar (gzip'd if asked) of `files`, entries sorted, owned by root. */
export async function layerTar(work: string, files: LayerFiles, gzip: boolean): Promise<Buffer> {
  const dir = await fs.mkdtemp(join(work, 'layer-'));
  await writeTree(dir, files);
  const out = `${dir}.tar`;
  const entries = (await fs.readdir(dir)).sort();
  await tar.create({ cwd: dir, file: out, gzip, portable: true, noMtime: true }, entries);
  const data = await fs.readFile(out);
  await fs.rm(dir, { recursive: true });
  await fs.rm(out);
  return data;
}

export interface OciImage {
  readonly name?: string;
  readonly layers: readonly LayerFiles[];
}

export interface OciLayout {
  readonly dir: string;
  /** sha256 hex of each image's layer blobs, bottom to top. */
  readonly layerBlobs: string[][];
  readonly manifests: string[];
}

async function writeBlob(dir: string, data: Buffer): Promise<string> {
  const hex = sha256(data);
  await fs.mkdir(join(dir, 'blobs', 'sha256'), { recursive: true });
  await fs.writeFile(join(dir, 'blobs', 'sha256', hex), data);
  return hex;
}

/** An OCI image layout with one manifest per image; layers after the first are gzip'd. */
export async function ociLayout(work: string, dir: string, images: readonly OciImage[]): Promise<OciLayout> {
  await fs.mkdir(dir, { recursive: true });
  await fs.writeFile(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  const layerBlobs: string[][] = [];
  const manifests: string[] = [];
  const descriptors = [];
  for (const image of images) {
    const layers = [];
    const hexes: string[] = [];
    const diffIds: string[] = [];
    for (const [position, files] of image.layers.entries()) {
      const gzip = position > 0;
      const data = await layerTar(work, files, gzip);
      const hex = await writeBlob(dir, data);
      hexes.push(hex);
      diffIds.push(`sha256:${sha256(gzip ? await layerTar(work, files, false) : data)}`);
      layers.push({
        mediaType: gzip ? 'application/vnd.oci.image.layer.v1.tar+gzip' : 'application/vnd.oci.image.layer.v1.tar',
        digest: `sha256:${hex}`,
        size: data.length,
      });
    }
    const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: diffIds } }));
    const configHex = await writeBlob(dir, config);
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: `sha256:${configHex}`, size: config.length },
        layers,
      }),
    );
    const manifestHex = await writeBlob(dir, manifest);
    layerBlobs.push(hexes);
    manifests.push(manifestHex);
    descriptors.push({
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      digest: `sha256:${manifestHex}`,
      size: manifest.length,
      ...(image.name ? { annotations: { 'org.opencontainers.image.ref.name': image.name } } : {}),
    });
  }
  await fs.writeFile(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: descriptors }));
  return { dir, layerBlobs, manifests };
}

/** A docker-archive tarball (the pre-25 `docker save` shape): manifest.json, <config>.json, <id>/layer.tar. */
export async function dockerArchive(work: string, file: string, images: readonly OciImage[]): Promise<string> {
  const dir = await fs.mkdtemp(join(work, 'docker-'));
  const manifest = [];
  for (const image of images) {
    const members: string[] = [];
    const diffIds: string[] = [];
    for (const files of image.layers) {
      const data = await layerTar(work, files, false);
      const id = sha256(Buffer.concat([data, Buffer.from(image.name ?? '')]));
      await fs.mkdir(join(dir, id), { recursive: true });
      await fs.writeFile(join(dir, id, 'layer.tar'), data);
      members.push(`${id}/layer.tar`);
      diffIds.push(`sha256:${sha256(data)}`);
    }
    const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: diffIds } }));
    const configName = `${sha256(config)}.json`;
    await fs.writeFile(join(dir, configName), config);
    manifest.push({ Config: configName, RepoTags: image.name ? [image.name] : null, Layers: members });
  }
  await fs.writeFile(join(dir, 'manifest.json'), JSON.stringify(manifest));
  await tar.create({ cwd: dir, file, portable: true }, (await fs.readdir(dir)).sort());
  await fs.rm(dir, { recursive: true });
  return file;
}

/** The two-layer image the tests flatten: the second layer deletes a file and makes a directory opaque. */
export const TWO_LAYERS: readonly LayerFiles[] = [
  {
    'etc/keep.txt': 'keep\n',
    'etc/gone.txt': 'gone\n',
    'opt/app/old-a.txt': 'a\n',
    'opt/app/old-b.txt': 'b\n',
    'usr/bin/tool': 'v1\n',
  },
  {
    'etc/.wh.gone.txt': '',
    'opt/app/.wh..wh..opq': '',
    'opt/app/new.txt': 'new\n',
    'usr/bin/tool': 'v2\n',
  },
];
