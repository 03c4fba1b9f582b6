/**
 * Initramfs images for VM guests: a gzipped newc cpio (cpio.ts) of host
 * files, generated texts (the /init script) and kernel modules, cached by a
 * digest of its inputs so a node builds each distinct image once: the same
 * busybox, modules, guest agent and /init give the same file, reused by
 * every sandbox.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import { writeCpio, type CpioEntry } from './cpio.js';
import type { KernelModule } from './guest-kernel.js';

const gzipAsync = promisify(gzip);

/** Where the modules go inside the image, with `load-order` listing them (one file name a line, dependencies first). */
export const INITRAMFS_MODULES_DIR = 'lib/modules/dsec';

export interface InitramfsFile {
  /** Path inside the image, absolute (`/bin/busybox`). */
  readonly target: string;
  /** A host file to copy in... */
  readonly source?: string;
  /** ...or the content itself. */
  readonly content?: string | Buffer;
  /** @default 0o755 for `source`, 0o644 for `content` */
  readonly mode?: number;
}

export interface InitramfsSpec {
  readonly files: readonly InitramfsFile[];
  /** Symlinks inside the image: `{ link: '/bin/sh', target: 'busybox' }`. */
  readonly symlinks?: readonly { readonly link: string; readonly target: string }[];
  /** Kernel modules, in load order (resolveKernelModules), put in INITRAMFS_MODULES_DIR. */
  readonly modules?: readonly KernelModule[];
}

export interface BuiltInitramfs {
  /** The .cpio.gz file (in the cache folder: do not remove it). */
  readonly path: string;
  /** sha256 of the inputs: names the file. */
  readonly digest: string;
  readonly sizeBytes: number;
  /** Whether it was built now or found in the cache. */
  readonly cached: boolean;
}

/** Directories every image has: the kernel needs /dev/console at hand before /init runs to give it a stdout. */
const BASE_DIRS = ['bin', 'dev', 'etc', 'lib', 'mnt', 'proc', 'run', 'sys', 'tmp'];

/** Build (or find in `cacheDir`) the initramfs of `spec`. */
export async function buildInitramfs(spec: InitramfsSpec, cacheDir: string): Promise<BuiltInitramfs> {
  const entries = await collectEntries(spec);
  const digest = digestEntries(entries);
  const file = path.join(cacheDir, `${digest.slice(0, 32)}.cpio.gz`);
  const existing = await stat(file).catch(() => undefined);
  if (existing?.isFile()) return { path: file, digest, sizeBytes: existing.size, cached: true };
  await mkdir(cacheDir, { recursive: true });
  const packed = await gzipAsync(writeCpio(entries), { level: 6 });
  // Written beside and renamed: two sandboxes building the same image at once each rename a whole file.
  const partial = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    await writeFile(partial, packed);
    await rename(partial, file);
  } finally {
    await rm(partial, { force: true });
  }
  return { path: file, digest, sizeBytes: packed.length, cached: false };
}

/** The cpio entries of `spec`, parents first, sorted by path (so the order of `files` does not change the digest). */
export async function collectEntries(spec: InitramfsSpec): Promise<CpioEntry[]> {
  const byPath = new Map<string, CpioEntry>();
  const addDir = (dir: string) => {
    const parts = dir.split('/').filter(Boolean);
    for (let depth = 1; depth <= parts.length; depth++) {
      const partial = parts.slice(0, depth).join('/');
      const existing = byPath.get(partial);
      if (existing && existing.type !== 'dir') throw new Error(`initramfs: ${partial} is both a directory and a ${existing.type}`);
      if (!existing) byPath.set(partial, { type: 'dir', path: partial });
    }
  };
  const add = (entry: CpioEntry) => {
    if (byPath.has(entry.path)) throw new Error(`initramfs: /${entry.path} is given twice`);
    addDir(path.posix.dirname(entry.path) === '.' ? '' : path.posix.dirname(entry.path));
    byPath.set(entry.path, entry);
  };
  for (const dir of BASE_DIRS) addDir(dir);
  add({ type: 'char', path: 'dev/console', major: 5, minor: 1, mode: 0o600 });
  add({ type: 'char', path: 'dev/null', major: 1, minor: 3, mode: 0o666 });
  for (const file of spec.files) {
    const target = relative(file.target);
    if (file.source !== undefined) add({ type: 'file', path: target, data: await readFile(file.source), mode: file.mode ?? 0o755 });
    else if (file.content !== undefined) add({ type: 'file', path: target, data: Buffer.from(file.content), mode: file.mode ?? 0o644 });
    else throw new Error(`initramfs: ${file.target} has neither a source nor a content`);
  }
  for (const link of spec.symlinks ?? []) add({ type: 'symlink', path: relative(link.link), target: link.target });
  if (spec.modules && spec.modules.length > 0) {
    for (const module of spec.modules) {
      add({ type: 'file', path: `${INITRAMFS_MODULES_DIR}/${module.name}.ko`, data: await readFile(module.path), mode: 0o644 });
    }
    const order = spec.modules.map((module) => `${module.name}.ko\n`).join('');
    add({ type: 'file', path: `${INITRAMFS_MODULES_DIR}/load-order`, data: Buffer.from(order), mode: 0o644 });
  }
  // Sorted, a parent sorts before its children; '/' is below every name character except a few, so compare by parts.
  return [...byPath.values()].sort((a, b) => comparePaths(a.path, b.path));
}

function comparePaths(a: string, b: string): number {
  const left = a.split('/');
  const right = b.split('/');
  for (let index = 0; index < Math.min(left.length, right.length); index++) {
    if (left[index] !== right[index]) return left[index]! < right[index]! ? -1 : 1;
  }
  return left.length - right.length;
}

function relative(target: string): string {
  if (!target.startsWith('/')) throw new Error(`initramfs: target ${target} must be an absolute path`);
  return path.posix.normalize(target).slice(1);
}

function digestEntries(entries: readonly CpioEntry[]): string {
  const hash = createHash('sha256').update('dsec-initramfs-v1\0');
  for (const entry of entries) {
    const { data, ...rest } = entry as CpioEntry & { data?: Buffer };
    hash.update(JSON.stringify(rest)).update('\0');
    if (data) hash.update(createHash('sha256').update(data).digest()).update('\0');
  }
  return hash.digest('hex');
}
