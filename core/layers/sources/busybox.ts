/**
 * A minimal root filesystem made from a static busybox binary: enough for a
 * base layer that runs `sh`, coreutils-like applets and a shell script,
 * without shipping a distribution. Deterministic: everything is owned by
 * root with fixed modes and fixed file contents, so the same binary always
 * gives the same digest. The hostname, hosts and resolv.conf are left to the
 * runtime, which writes them per sandbox.
 */
import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { DsecError } from '../../errors.js';
import { isErrno } from '../fsutil.js';

const execFileAsync = promisify(execFile);

/** Top-level directories and their modes; every other directory (applet parents) is 0755. */
const BASE_DIRS: ReadonlyArray<[string, number]> = [
  ['bin', 0o755],
  ['dev', 0o755],
  ['etc', 0o755],
  ['home', 0o755],
  ['proc', 0o755],
  ['root', 0o700],
  ['run', 0o755],
  ['sbin', 0o755],
  ['sys', 0o755],
  ['tmp', 0o1777],
  ['usr', 0o755],
  ['usr/bin', 0o755],
  ['usr/sbin', 0o755],
  ['var', 0o755],
];

const FILES: ReadonlyArray<[string, string]> = [
  ['etc/passwd', 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n'],
  ['etc/group', 'root:x:0:\nnogroup:x:65534:\n'],
];

const BUSYBOX_IN_LAYER = 'bin/busybox';

/** Bumped when the layout below changes, so cached digests of busybox layers are recomputed. */
export const BUSYBOX_ROOTFS_VERSION = 'busybox-rootfs 1';

function sourceError(ref: string, message: string, cause?: unknown): DsecError {
  return new DsecError('DSEC_LAYER_SOURCE', { ref, message }, { cause });
}

/**
 * Whether an ELF executable is statically linked (has no PT_INTERP program
 * header). A dynamically linked busybox (Debian's `busybox` package) would
 * give a base layer whose /bin/sh cannot start: it has no libc.
 */
async function elfLinkage(binary: string): Promise<'static' | 'dynamic' | 'not-elf'> {
  const data = await fs.readFile(binary);
  if (data.length < 64 || data.readUInt32BE(0) !== 0x7f454c46) return 'not-elf';
  const is64 = data[4] === 2;
  const little = data[5] === 1;
  const u16 = (offset: number) => (little ? data.readUInt16LE(offset) : data.readUInt16BE(offset));
  const u32 = (offset: number) => (little ? data.readUInt32LE(offset) : data.readUInt32BE(offset));
  const phoff = is64 ? Number(little ? data.readBigUInt64LE(0x20) : data.readBigUInt64BE(0x20)) : u32(0x1c);
  const phentsize = u16(is64 ? 0x36 : 0x2a);
  const phnum = u16(is64 ? 0x38 : 0x2c);
  const PT_INTERP = 3;
  for (let index = 0; index < phnum; index++) {
    const offset = phoff + index * phentsize;
    if (offset + 4 > data.length) return 'not-elf';
    if (u32(offset) === PT_INTERP) return 'dynamic';
  }
  return 'static';
}

/** The applet paths (`bin/sh`, `usr/bin/awk`...) the binary says it provides. */
async function appletPaths(binary: string, ref: string): Promise<string[]> {
  let stdout: string;
  try {
    ({ stdout } = await execFileAsync(binary, ['--list-full'], { timeout: 10_000, maxBuffer: 1 << 20 }));
  } catch (error) {
    throw sourceError(ref, `${binary} --list-full failed: ${(error as Error).message}`, error);
  }
  const paths = stdout.split('\n').filter((line) => line.trim() !== '');
  for (const path of paths) {
    const parts = path.split('/');
    if (path.startsWith('/') || parts.some((part) => part === '' || part === '.' || part === '..')) {
      throw sourceError(ref, `${binary} --list-full printed an unusable applet path: ${JSON.stringify(path)}`);
    }
  }
  return [...new Set(paths)].filter((path) => path !== BUSYBOX_IN_LAYER).sort();
}

async function makeDir(target: string, path: string, mode: number): Promise<void> {
  const absolute = join(target, path);
  await fs.mkdir(absolute, { recursive: true });
  await fs.chown(absolute, 0, 0);
  await fs.chmod(absolute, mode);
}

/** Build the root filesystem into the existing, empty directory `target`. */
export async function buildBusyboxRootfs(binary: string, target: string, ref: string): Promise<void> {
  let stat;
  try {
    stat = await fs.stat(binary);
  } catch (error) {
    if (isErrno(error, 'ENOENT', 'ENOTDIR')) {
      throw sourceError(ref, `busybox binary ${binary} not found; install busybox-static (scripts/setup.sh does)`, error);
    }
    throw sourceError(ref, `cannot read busybox binary ${binary}: ${(error as Error).message}`, error);
  }
  if (!stat.isFile()) throw sourceError(ref, `busybox binary ${binary} is not a regular file`);
  const linkage = await elfLinkage(binary);
  if (linkage === 'not-elf') throw sourceError(ref, `${binary} is not an ELF executable`);
  if (linkage === 'dynamic') {
    throw sourceError(ref, `${binary} is dynamically linked; a base layer needs the static build: install busybox-static`);
  }
  const applets = await appletPaths(binary, ref);

  const dirs = new Map<string, number>(BASE_DIRS);
  for (const applet of applets) {
    for (let dir = dirname(applet); dir !== '.'; dir = dirname(dir)) if (!dirs.has(dir)) dirs.set(dir, 0o755);
  }
  // Parents sort before their children, so each mkdir finds its parent there.
  for (const [path, mode] of [...dirs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    await makeDir(target, path, mode);
  }

  const busybox = join(target, BUSYBOX_IN_LAYER);
  await fs.copyFile(binary, busybox);
  await fs.chown(busybox, 0, 0);
  await fs.chmod(busybox, 0o755);
  for (const applet of applets) {
    const link = join(target, applet);
    await fs.symlink(`/${BUSYBOX_IN_LAYER}`, link);
    await fs.lchown(link, 0, 0);
  }
  for (const [path, content] of FILES) {
    const file = join(target, path);
    await fs.writeFile(file, content);
    await fs.chown(file, 0, 0);
    await fs.chmod(file, 0o644);
  }
}
