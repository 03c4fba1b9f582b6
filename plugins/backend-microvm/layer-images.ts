/**
 * The layers of a microVM as read-only block devices: one whole EROFS image
 * per lower dir. The storage plugin's own image where it keeps the layer as
 * one (`sandbox.lowerImages`); else one built here from the lower dir with
 * the layer store's buildErofsImage, once per node, cached under
 * `<root>/backend-microvm/images/` by the layer's digest (or, where the
 * lower dirs do not match the spec's layers one to one, a squash, by the
 * path of the content-addressed tree). A split image (metadata + blob) needs
 * two devices per layer, so it is rebuilt whole here too.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { buildErofsImage, digestHex, KeyedMutex, type SandboxContext } from '../../core/plugin-api.js';

const building = new KeyedMutex();

/** The EROFS image files of the sandbox's layers, bottom to top. */
export async function layerImages(sandbox: SandboxContext, imagesDir: string): Promise<string[]> {
  const images: string[] = [];
  for (const [index, dir] of sandbox.lowerDirs.entries()) {
    const given = sandbox.lowerImages?.[index];
    if (given && given.format === 'erofs' && !given.blob && (await stat(given.path).catch(() => undefined))?.isFile()) {
      images.push(given.path);
      continue;
    }
    images.push(await builtImage(dir, imageKey(sandbox, index, dir), imagesDir));
  }
  return images;
}

function imageKey(sandbox: SandboxContext, index: number, dir: string): string {
  const oneToOne = sandbox.lowerDirs.length === sandbox.spec.layers.length;
  const digest = oneToOne ? sandbox.spec.layers[index]?.digest : undefined;
  if (digest && /^sha256:[0-9a-f]{64}$/.test(digest)) return digestHex(digest);
  return `tree-${createHash('sha256').update(path.resolve(dir)).digest('hex')}`;
}

async function builtImage(tree: string, key: string, imagesDir: string): Promise<string> {
  const image = path.join(imagesDir, `${key}.erofs`);
  return building.run(key, async () => {
    if ((await stat(image).catch(() => undefined))?.isFile()) return image;
    await mkdir(imagesDir, { recursive: true });
    const partial = `${image}.${randomBytes(4).toString('hex')}.tmp`;
    try {
      await buildErofsImage(tree, partial);
      await rename(partial, image);
    } finally {
      await rm(partial, { force: true });
    }
    return image;
  });
}
