/**
 * A small bootable disk image for the full-VM backend's tests and
 * benchmarks (tests import it as test/helpers/vm-image.ts; it lives here
 * because bench/ is part of the compiled tree and test/ is not).
 *
 *   const image = await buildTestVmImage(cacheDir);   // { path, format: 'qcow2' }
 *   node dist/bench/lib/vm-image.js [cacheDir]          // builds it, prints its path
 *
 * The disk boots the way a real VM image does: SeaBIOS runs syslinux's MBR
 * code, which chains to extlinux on the one ext4 partition, which loads
 * Debian's cloud kernel (/var/lib/dsec/guest-kernel) and a small initramfs
 * that loads the virtio modules and mounts the partition as root. Busybox
 * init then keeps Debian's own qemu-ga (with the shared libraries it links)
 * running on the virtio-serial port named org.qemu.guest_agent.0.
 *
 * The image is cached in `cacheDir` under a digest of its inputs (kernel,
 * qemu-ga, busybox, this recipe, the TSC rate on the command line): built
 * once (a few seconds), then reused. A build goes to a temporary name and is
 * linked into place: concurrent builders never see half an image, and the
 * first one's image is never replaced under VMs already running on it.
 * Mounts and loop devices are released even when a step fails.
 */
import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmod, copyFile, link, mkdir, mkdtemp, open, readFile, readlink, realpath, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { buildInitramfs, findGuestKernel, hostTscRate, INITRAMFS_MODULES_DIR, resolveKernelModules, type GuestKernel } from '../../core/qemu/index.js';
import { runWhenMain } from './main.js';
import { extlinuxConf, GUEST_MODULES, INITTAB, initramfsInit, RC_S, START_QEMU_GA } from './vm-image-parts.js';

const run = promisify(execFile);

/** Bump when the recipe changes, so cached images built by an older one are not reused. */
const RECIPE_VERSION = 5;
const BUSYBOX = '/bin/busybox';
const QEMU_GA = '/usr/sbin/qemu-ga';
const MBR_CODE = '/usr/lib/syslinux/mbr/mbr.bin';
/** The disk: 1 MiB for the MBR and alignment, the rest one ext4 partition with room for test files. */
const DISK_MIB = 96;
const PARTITION_START_SECTOR = 2048;

export interface TestVmImage {
  readonly path: string;
  readonly format: 'qcow2';
}

/** Where tests and benchmarks keep the image when they do not say. */
export function defaultVmImageCacheDir(): string {
  return path.join(tmpdir(), 'dsec-vm-image-cache');
}

/** The kernel command line the image boots with (the TSC rate only where it is known). */
export function testVmKernelArgs(tscKhz: number | undefined): string {
  // panic=-1: a panicking guest reboots at once, and the backend's -no-reboot turns that into qemu exiting.
  const args = ['root=/dev/vda1', 'rw', 'console=ttyS0', 'panic=-1', 'loglevel=4'];
  if (tscKhz !== undefined) args.push(`tsc_early_khz=${tscKhz}`);
  return args.join(' ');
}

export async function buildTestVmImage(cacheDir: string = defaultVmImageCacheDir()): Promise<TestVmImage> {
  const kernel = await findGuestKernel();
  const append = testVmKernelArgs((await hostTscRate())?.khz);
  const digest = createHash('sha256')
    .update(JSON.stringify({ RECIPE_VERSION, kernel: kernel.version, append, DISK_MIB }))
    .update(await fileDigest(kernel.vmlinuz))
    .update(await fileDigest(QEMU_GA))
    .update(await fileDigest(BUSYBOX))
    .digest('hex')
    .slice(0, 16);
  const image = path.join(cacheDir, `dsec-test-vm-${digest}.qcow2`);
  if (await stat(image).then((found) => found.isFile(), () => false)) return { path: image, format: 'qcow2' };

  await mkdir(cacheDir, { recursive: true });
  // The build's scratch (raw disk, mount point) inside the cache: what a failed build left is found there.
  const work = await mkdtemp(path.join(cacheDir, '.build-'));
  try {
    const raw = path.join(work, 'disk.raw');
    await buildRawDisk(raw, work, kernel, append);
    const partial = `${image}.${randomBytes(4).toString('hex')}.partial`;
    await run('qemu-img', ['convert', '-f', 'raw', '-O', 'qcow2', raw, partial]);
    // Read-only: it is the backing file of every test VM's overlay and must never change under them.
    await chmod(partial, 0o444);
    // link, not rename: a builder that finished first keeps its image (VMs may already run on it); ours is dropped.
    await link(partial, image).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
    await rm(partial, { force: true });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return { path: image, format: 'qcow2' };
}

async function fileDigest(file: string): Promise<string> {
  return createHash('sha256').update(await readFile(file)).digest('hex');
}

/**
 * The raw disk: MBR partition table (sfdisk), syslinux's MBR code, one ext4
 * partition with the root filesystem and extlinux installed in it.
 *
 * The partition is reached through a loop device at its offset rather than
 * `losetup -P`: a host kernel without MSDOS partition support (this one)
 * never shows the partition device. Extlinux then cannot learn the
 * partition's start from the device, so it is written into the boot sector's
 * "hidden sectors" field by hand (what extlinux would have put there).
 */
async function buildRawDisk(raw: string, work: string, kernel: GuestKernel, append: string): Promise<void> {
  const handle = await open(raw, 'w');
  await handle.truncate(DISK_MIB * 1024 * 1024);
  await handle.close();
  await runWithInput('sfdisk', ['--quiet', raw], `label: dos\nstart=${PARTITION_START_SECTOR}, type=83, bootable\n`);

  const offset = PARTITION_START_SECTOR * 512;
  const sizelimit = DISK_MIB * 1024 * 1024 - offset;
  const mountPoint = path.join(work, 'root');
  await mkdir(mountPoint);
  const loop = (await run('losetup', ['--find', '--show', '--offset', String(offset), '--sizelimit', String(sizelimit), raw])).stdout.trim();
  let mounted = false;
  try {
    // No 64bit or metadata_csum: extlinux 6.04 cannot read an ext4 that has them.
    await run('mkfs.ext4', ['-q', '-F', '-L', 'dsec-root', '-O', '^64bit,^metadata_csum', '-b', '4096', loop]);
    await run('mount', ['-t', 'ext4', loop, mountPoint]);
    mounted = true;
    await populateRoot(mountPoint, kernel, append, path.join(work, 'initramfs'));
    await run('extlinux', ['--install', path.join(mountPoint, 'boot/syslinux')]);
    await run('umount', [mountPoint]);
    mounted = false;
  } finally {
    if (mounted) await run('umount', [mountPoint]).catch(() => run('umount', ['-l', mountPoint]).catch(() => undefined));
    await run('losetup', ['--detach', loop]).catch(() => undefined);
  }

  const disk = await open(raw, 'r+');
  try {
    // Syslinux's MBR code (440 bytes, the partition table after it untouched) finds and runs the active partition's boot sector.
    await disk.write(await readFile(MBR_CODE), 0, 440, 0);
    const hidden = Buffer.alloc(4);
    await disk.read(hidden, 0, 4, offset + 0x1c);
    if (hidden.readUInt32LE(0) === 0) {
      hidden.writeUInt32LE(PARTITION_START_SECTOR, 0);
      await disk.write(hidden, 0, 4, offset + 0x1c);
    }
  } finally {
    await disk.close();
  }
}

/** The root filesystem: busybox, qemu-ga and its libraries, init scripts, kernel, initramfs, syslinux config. */
async function populateRoot(root: string, kernel: GuestKernel, append: string, initramfsCache: string): Promise<void> {
  for (const dir of ['bin', 'sbin', 'usr/bin', 'usr/sbin', 'lib64', 'lib/x86_64-linux-gnu', 'dev', 'proc', 'sys', 'run', 'tmp', 'etc/init.d', 'root', 'var', 'boot/syslinux']) {
    await mkdir(path.join(root, dir), { recursive: true });
  }
  await chmod(path.join(root, 'tmp'), 0o1777);
  await symlink('../run', path.join(root, 'var/run'));

  await copyFile(BUSYBOX, path.join(root, 'bin/busybox'));
  const applets = (await run(BUSYBOX, ['--list-full'])).stdout.split('\n').filter(Boolean);
  for (const applet of applets) {
    const at = path.join(root, applet);
    await mkdir(path.dirname(at), { recursive: true });
    await symlink('/bin/busybox', at).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
  }

  await copyFile(QEMU_GA, path.join(root, 'usr/sbin/qemu-ga'));
  for (const library of await sharedLibraries(QEMU_GA)) await copyFile(await realpath(library), path.join(root, library));

  const files: Record<string, [string, number]> = {
    'etc/inittab': [INITTAB, 0o644],
    'etc/init.d/rcS': [RC_S, 0o755],
    'sbin/start-qemu-ga': [START_QEMU_GA, 0o755],
    'etc/passwd': ['root:x:0:0:root:/root:/bin/sh\n', 0o644],
    'etc/group': ['root:x:0:\n', 0o644],
    'etc/hostname': ['dsec-vm\n', 0o644],
    'boot/syslinux/extlinux.conf': [extlinuxConf(append), 0o644],
  };
  for (const [name, [text, mode]] of Object.entries(files)) await writeFile(path.join(root, name), text, { mode });
  // busybox's applet list has /sbin/init -> busybox already; make sure nothing replaced it.
  if ((await readlink(path.join(root, 'sbin/init'))) !== '/bin/busybox') throw new Error('sbin/init is not busybox init');

  await copyFile(kernel.vmlinuz, path.join(root, 'boot/vmlinuz'));
  const initramfs = await buildInitramfs(
    {
      files: [
        { target: '/bin/busybox', source: BUSYBOX },
        { target: '/init', content: initramfsInit(INITRAMFS_MODULES_DIR), mode: 0o755 },
      ],
      modules: await resolveKernelModules(kernel.modulesDir, GUEST_MODULES),
    },
    initramfsCache,
  );
  await copyFile(initramfs.path, path.join(root, 'boot/initrd.img'));
}

/** What `ldd` lists for a binary: absolute paths of its libraries, the dynamic loader included. */
async function sharedLibraries(binary: string): Promise<string[]> {
  const { stdout } = await run('ldd', [binary]);
  const found = new Set<string>();
  for (const line of stdout.split('\n')) {
    const match = /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(line);
    if (match) found.add(match[1]);
  }
  // glibc dlopens libgcc_s when a thread is cancelled; ldd does not list it.
  for (const extra of ['/lib/x86_64-linux-gnu/libgcc_s.so.1']) {
    if (await stat(extra).then(() => true, () => false)) found.add(extra);
  }
  if (found.size === 0) throw new Error(`ldd lists no libraries for ${binary}`);
  return [...found];
}

function runWithInput(command: string, args: readonly string[], input: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = execFile(command, args, (error) => (error ? reject(error) : resolve()));
    child.stdin?.end(input);
  });
}

runWhenMain(import.meta.url, 'vm-image', async (argv) => {
  const image = await buildTestVmImage(argv[0] ? path.resolve(argv[0]) : defaultVmImageCacheDir());
  process.stdout.write(`${image.path}\n`);
  return true;
});
