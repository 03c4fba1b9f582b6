import { promises as fs } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { walkTree } from '../../../core/layers/digest.js';
import { pathExists } from '../../../core/layers/fsutil.js';
import { findOpaqueDirs } from '../../../core/layers/overlay-marks.js';
import { materialiseOci, normaliseImageName } from '../../../core/layers/sources/oci.js';
import { layerModel, makeWorkspace, rejectionOf, tarArchive, type Workspace } from './helpers.js';
import { dockerArchive, ociLayout, TWO_LAYERS } from './oci-images.js';

let ws: Workspace;
let target: string;
beforeEach(async () => {
  ws = await makeWorkspace();
  target = join(ws.root, 'target');
  await fs.mkdir(target);
});
afterEach(async () => {
  await ws.cleanup();
});

/** path -> content (files), `dir/` for directories, `-> x` for symlinks, `whiteout` for whiteouts. */
async function treeOf(dir: string): Promise<Record<string, string>> {
  const tree: Record<string, string> = {};
  for (const entry of await walkTree(dir, 't@1')) {
    if (entry.type === 'file') tree[entry.path] = await fs.readFile(join(dir, entry.path), 'utf8');
    else if (entry.type === 'dir') tree[`${entry.path}/`] = entry.opaque ? 'opaque' : '';
    else if (entry.type === 'symlink') tree[entry.path] = `-> ${entry.target}`;
    else tree[entry.path] = 'whiteout';
  }
  return tree;
}

const FLATTENED = {
  'etc/': '',
  'etc/keep.txt': 'keep\n',
  'opt/': '',
  'opt/app/': '',
  'opt/app/new.txt': 'new\n',
  'usr/': '',
  'usr/bin/': '',
  'usr/bin/tool': 'v2\n',
};

describe('the OCI image reader', () => {
  it('flattens an OCI layout: a .wh. file deletes, .wh..wh..opq hides what was below, later files win', async () => {
    const { dir } = await ociLayout(ws.root, join(ws.root, 'image'), [{ layers: TWO_LAYERS }]);
    await materialiseOci({ path: dir }, target, 'img@1.0.0');
    expect(await treeOf(target)).toEqual(FLATTENED);
    // The bottom of a stack keeps no marks: no whiteout device, no opaque xattr.
    expect((await findOpaqueDirs(target)).size).toBe(0);
  });

  it('flattens a docker-archive tarball to the same tree', async () => {
    const file = await dockerArchive(ws.root, join(ws.root, 'image.tar'), [{ name: 'app:1', layers: TWO_LAYERS }]);
    await materialiseOci({ path: file }, target, 'img@1.0.0');
    expect(await treeOf(target)).toEqual(FLATTENED);
  });

  it('picks the image named by `image` when a layout holds several, and lists them when none is named', async () => {
    const { dir } = await ociLayout(ws.root, join(ws.root, 'image'), [
      { name: 'one:1', layers: [{ 'one.txt': '1' }] },
      { name: 'two:2', layers: [{ 'two.txt': '2' }] },
    ]);
    await materialiseOci({ path: dir, image: 'two:2' }, target, 'img@1.0.0');
    expect(await treeOf(target)).toEqual({ 'two.txt': '2' });
    const error = await rejectionOf(materialiseOci({ path: dir }, join(ws.root, 'other'), 'img@1.0.0'));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain('holds 2 images; pick one with image: (it holds: one:1, two:2)');
    const missing = await rejectionOf(materialiseOci({ path: dir, image: 'three:3' }, target, 'img@1.0.0'));
    expect(missing.message).toContain('has no image three:3');
  });

  it('matches docker names the way people write them', () => {
    expect(normaliseImageName('docker.io/library/busybox')).toBe('busybox:latest');
    expect(normaliseImageName('busybox:1.36')).toBe('busybox:1.36');
    expect(normaliseImageName('registry:5000/team/app')).toBe('registry:5000/team/app:latest');
  });

  it('reports a missing blob by the image layer it belongs to', async () => {
    const { dir, layerBlobs } = await ociLayout(ws.root, join(ws.root, 'image'), [{ layers: TWO_LAYERS }]);
    await fs.rm(join(dir, 'blobs/sha256', layerBlobs[0][1]));
    const error = await rejectionOf(materialiseOci({ path: dir }, target, 'img@1.0.0'));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toBe(`layer img@1.0.0: the blob of image layer 2 of 2 (sha256:${layerBlobs[0][1]}) is missing`);
  });

  it('detects a blob whose content does not match its digest', async () => {
    const { dir, layerBlobs } = await ociLayout(ws.root, join(ws.root, 'image'), [{ layers: TWO_LAYERS }]);
    const blob = join(dir, 'blobs/sha256', layerBlobs[0][0]);
    const data = await fs.readFile(blob);
    data[600] ^= 0xff; // same size, other bytes
    await fs.writeFile(blob, data);
    const error = await rejectionOf(materialiseOci({ path: dir }, target, 'img@1.0.0'));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toMatch(/digest mismatch: the blob of image layer 1 of 2 should be sha256:[0-9a-f]{64} but is sha256:[0-9a-f]{64}; the image is corrupt/);
  });

  it('detects a docker-archive layer that does not match its diff_id', async () => {
    const file = await dockerArchive(ws.root, join(ws.root, 'image.tar'), [{ layers: TWO_LAYERS }]);
    // Rewrite the archive with the first layer's tar swapped for another.
    const unpacked = join(ws.root, 'unpacked');
    await fs.mkdir(unpacked);
    const tar = await import('tar');
    await tar.extract({ file, cwd: unpacked });
    const manifest = JSON.parse(await fs.readFile(join(unpacked, 'manifest.json'), 'utf8'));
    await fs.writeFile(join(unpacked, manifest[0].Layers[0]), tarArchive([{ path: 'other.txt', content: 'x' }]));
    await tar.create({ cwd: unpacked, file, portable: true }, await fs.readdir(unpacked));
    const error = await rejectionOf(materialiseOci({ path: file }, target, 'img@1.0.0'));
    expect(error.message).toContain('digest mismatch: the blob of image layer 1 of 2');
  });

  it('refuses a malformed index and a malformed manifest with a message saying which', async () => {
    const { dir, manifests } = await ociLayout(ws.root, join(ws.root, 'image'), [{ layers: TWO_LAYERS }]);
    await fs.writeFile(join(dir, 'index.json'), '{"manifests": ');
    expect((await rejectionOf(materialiseOci({ path: dir }, target, 'img@1.0.0'))).message).toMatch(/index\.json is malformed: not JSON/);
    await fs.writeFile(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2 }));
    expect((await rejectionOf(materialiseOci({ path: dir }, target, 'img@1.0.0'))).message).toContain(
      'index.json is malformed: expected an object with a "manifests" list',
    );
    // A manifest blob without layers, named by its true digest so only its shape is wrong.
    const { createHash } = await import('node:crypto');
    const bad = Buffer.from(JSON.stringify({ schemaVersion: 2, config: {} }));
    const hex = createHash('sha256').update(bad).digest('hex');
    await fs.writeFile(join(dir, 'blobs/sha256', hex), bad);
    await fs.writeFile(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: `sha256:${hex}`, size: bad.length }] }));
    const error = await rejectionOf(materialiseOci({ path: dir }, target, 'img@1.0.0'));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toBe(`layer img@1.0.0: image manifest sha256:${hex} is malformed: it has no "layers" list`);
    expect(manifests).toHaveLength(1);
  });

  it('refuses a digest that would name a path outside the blobs folder', async () => {
    const { dir } = await ociLayout(ws.root, join(ws.root, 'image'), [{ layers: TWO_LAYERS }]);
    await fs.writeFile(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ digest: 'sha256:../../../etc/passwd' }] }));
    const error = await rejectionOf(materialiseOci({ path: dir }, target, 'img@1.0.0'));
    expect(error.message).toContain('has a malformed digest');
  });

  it('refuses an image tarball whose index.json or manifest.json is a symlink leading out of it, without reading what it leads to', async () => {
    const secret = join(ws.root, 'host-secret.txt');
    await fs.writeFile(secret, 'TOPSECRET: not JSON at all\n');
    for (const name of ['index.json', 'manifest.json']) {
      const archive = join(ws.root, `symlinked-${name}.tar`);
      await fs.writeFile(archive, tarArchive([{ path: 'oci-layout', content: '{"imageLayoutVersion":"1.0.0"}' }, { path: name, type: '2', linkpath: secret }]));
      const error = await rejectionOf(materialiseOci({ path: archive }, target, 'img@1.0.0'));
      expect(error.code, name).toBe('DSEC_LAYER_SOURCE');
      expect(error.message, name).toContain(`${name} leads outside the image`);
      expect(error.message, name).not.toContain('TOPSECRET');
    }
  });

  it('refuses blobs that an image tarball reaches through a symlink leading out of it', async () => {
    // A complete layout elsewhere on the host; the tarball holds its index and a symlink to its blobs.
    const elsewhere = await ociLayout(ws.root, join(ws.root, 'elsewhere'), [{ layers: TWO_LAYERS }]);
    const index = await fs.readFile(join(elsewhere.dir, 'index.json'), 'utf8');
    const archive = join(ws.root, 'symlinked-blobs.tar');
    await fs.writeFile(
      archive,
      tarArchive([
        { path: 'oci-layout', content: '{"imageLayoutVersion":"1.0.0"}' },
        { path: 'index.json', content: index },
        { path: 'blobs', type: '2', linkpath: join(elsewhere.dir, 'blobs') },
      ]),
    );
    const error = await rejectionOf(materialiseOci({ path: archive }, target, 'img@1.0.0'));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain(`image manifest leads outside the image`);
    expect(await fs.readdir(target)).toEqual([]);
  });

  it('refuses a directory that is neither layout nor archive, and a path that does not exist', async () => {
    const empty = join(ws.root, 'empty');
    await fs.mkdir(empty);
    expect((await rejectionOf(materialiseOci({ path: empty }, target, 'img@1.0.0'))).message).toContain(
      'is neither an OCI image layout (no index.json) nor a docker-archive (no manifest.json)',
    );
    expect((await rejectionOf(materialiseOci({ path: join(ws.root, 'nope') }, target, 'img@1.0.0'))).message).toContain('does not exist');
  });

  it('rejects an image layer with an unsafe entry, naming the layer, and writes nothing outside', async () => {
    const image = await ociLayout(ws.root, join(ws.root, 'hostile'), [{ layers: [{ 'x.txt': 'x' }] }]);
    // Swap the layer blob for a hostile tar, with the manifest and index rewritten to match.
    const { createHash } = await import('node:crypto');
    const put = async (data: Buffer) => {
      const hex = createHash('sha256').update(data).digest('hex');
      await fs.writeFile(join(image.dir, 'blobs/sha256', hex), data);
      return hex;
    };
    const hostile = tarArchive([{ path: 'ok.txt', content: 'ok' }, { path: '../../escaped', content: 'pwned' }]);
    const layerHex = await put(hostile);
    const manifest = JSON.parse(await fs.readFile(join(image.dir, 'blobs/sha256', image.manifests[0]), 'utf8'));
    manifest.layers[0] = { ...manifest.layers[0], digest: `sha256:${layerHex}`, size: hostile.length };
    const manifestData = Buffer.from(JSON.stringify(manifest));
    const manifestHex = await put(manifestData);
    await fs.writeFile(join(image.dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ digest: `sha256:${manifestHex}`, size: manifestData.length }] }));
    const error = await rejectionOf(materialiseOci({ path: image.dir }, target, 'img@1.0.0'));
    expect(error.code).toBe('DSEC_LAYER_UNSAFE_ARCHIVE');
    expect(error.params).toMatchObject({ ref: 'img@1.0.0', entry: '../../escaped' });
    expect(error.message).toContain(`(in image layer 1 of 1, ${layerHex.slice(0, 12)})`);
    expect(await pathExists(join(ws.root, '..', 'escaped'))).toBe(false);
  });
});

describe('oci layers in the store', () => {
  it('publishes the flattened image with the digest the plan computed, and a bad image publishes nothing', async () => {
    const { dir, layerBlobs } = await ociLayout(ws.root, join(ws.root, 'image'), [{ layers: TWO_LAYERS }]);
    const layer = layerModel('img@1.0.0', { type: 'oci', path: dir });
    const planned = await ws.digest(layer);
    expect(await ws.digest(layer)).toBe(planned);
    const record = await ws.publish(layer);
    expect(record.digest).toBe(planned);

    await fs.truncate(join(dir, 'blobs/sha256', layerBlobs[0][1]), 10);
    const broken = layerModel('img@2.0.0', { type: 'oci', path: dir });
    const error = await rejectionOf(ws.publish(broken));
    expect(error.code).toBe('DSEC_LAYER_SOURCE');
    expect(error.message).toContain('truncated or corrupt');
    expect((await ws.list()).map((published) => `${published.name}@${published.version}`)).toEqual(['img@1.0.0']);
    expect(await ws.storeEntries('staging')).toEqual([]);
  });
});
