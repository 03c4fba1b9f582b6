/**
 * The pieces of the test VM image (bench/lib/vm-image.ts) that are plain
 * data work: which kernel modules a guest needs and in what order, a cpio
 * "newc" archive for the initramfs, the host's TSC rate, and the guest's
 * scripts (initramfs /init, the root's inittab and qemu-ga launcher).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

/** Where scripts/setup.sh unpacks Debian's cloud kernel for guests. */
export const GUEST_KERNEL_DIR = '/var/lib/dsec/guest-kernel';

/** The name qemu gives the guest agent's virtio-serial port; qemu-ga and the host client both look for it. */
export const GUEST_AGENT_PORT = 'org.qemu.guest_agent.0';

/**
 * The modules a q35 guest needs to reach its root disk and the guest agent's
 * port: in this kernel everything virtio is a module, the PCI transport
 * included (ext4 and the serial console are built in).
 */
export const GUEST_MODULES: readonly string[] = Object.freeze(['virtio_pci', 'virtio_blk', 'virtio_console']);

const normal = (name: string) => name.replace(/-/g, '_');

/** Every module file under `<modules>/kernel`, by module name (`-` and `_` are the same to the kernel). */
function moduleIndex(modulesDir: string): Map<string, string> {
  const index = new Map<string, string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith('.ko')) index.set(normal(entry.name.slice(0, -3)), full);
    }
  };
  walk(path.join(modulesDir, 'kernel'));
  return index;
}

/**
 * A module's dependencies, read from its own `.modinfo` section
 * (`depends=a,b`): the unpacked kernel has no modules.dep (no depmod ran) and
 * the host has no kmod, but every .ko names what it needs.
 */
export function moduleDepends(file: string): string[] {
  const bytes = readFileSync(file);
  const marker = Buffer.from('\0depends=');
  const at = bytes.indexOf(marker);
  if (at < 0) return [];
  const start = at + marker.length;
  const value = bytes.subarray(start, bytes.indexOf(0, start)).toString('latin1');
  return value.split(',').filter(Boolean).map(normal);
}

/** The files of `wanted` and their dependencies, each after what it depends on (the order insmod needs). */
export function moduleLoadOrder(modulesDir: string, wanted: readonly string[]): string[] {
  const index = moduleIndex(modulesDir);
  const ordered: string[] = [];
  const seen = new Set<string>();
  const visit = (name: string, chain: readonly string[]) => {
    if (seen.has(name)) return;
    const file = index.get(name);
    if (!file) throw new Error(`kernel module ${name} (needed by ${chain.join(' <- ') || 'the guest'}) is not under ${modulesDir}`);
    seen.add(name);
    for (const dependency of moduleDepends(file)) visit(dependency, [name, ...chain]);
    ordered.push(file);
  };
  for (const name of wanted) visit(normal(name), []);
  return ordered;
}

/** One entry of a cpio archive. Directories and device nodes carry no data. */
export interface CpioEntry {
  /** Relative, no leading slash (`init`, `lib/modules/virtio.ko`). */
  readonly name: string;
  /** Type and permission bits (`0o100755`, `0o040755`, `0o020600` for a char device). */
  readonly mode: number;
  readonly data?: Buffer;
  /** Symlink target (the entry's data in cpio). */
  readonly target?: string;
  readonly rdev?: { readonly major: number; readonly minor: number };
}

/** A cpio archive in the "newc" format the kernel unpacks as an initramfs. */
export function cpioNewc(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  const pad = (length: number) => Buffer.alloc((4 - (length % 4)) % 4);
  const push = (entry: CpioEntry, ino: number) => {
    const data = entry.target !== undefined ? Buffer.from(entry.target) : (entry.data ?? Buffer.alloc(0));
    const mode = entry.target !== undefined ? 0o120777 : entry.mode;
    const name = Buffer.from(`${entry.name}\0`);
    const fields = [ino, mode, 0, 0, 1, 0, data.length, 0, 0, entry.rdev?.major ?? 0, entry.rdev?.minor ?? 0, name.length, 0];
    const header = Buffer.from(`070701${fields.map((value) => value.toString(16).padStart(8, '0')).join('')}`, 'latin1');
    parts.push(header, name, pad(header.length + name.length), data, pad(data.length));
  };
  entries.forEach((entry, i) => push(entry, i + 1));
  push({ name: 'TRAILER!!!', mode: 0 }, 0);
  return Buffer.concat(parts);
}

/**
 * The host's TSC rate in kHz, for `tsc_early_khz=` under TCG (where the
 * guest's TSC ticks at the host's rate and a guest that calibrates it
 * against the emulated PIT hangs now and then). Read from /proc/cpuinfo's
 * "cpu MHz", which is the TSC rate where the CPU reports `tsc_known_freq`
 * (any VM host); undefined when it cannot tell.
 */
export function hostTscKhz(): number | undefined {
  const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
  const flags = /^flags\s*:(.*)$/m.exec(cpuinfo)?.[1]?.split(/\s+/) ?? [];
  const mhz = Number(/^cpu MHz\s*:\s*([\d.]+)/m.exec(cpuinfo)?.[1]);
  if (!flags.includes('constant_tsc') || !Number.isFinite(mhz) || mhz <= 0) return undefined;
  return Math.round(mhz * 1000);
}

/**
 * The initramfs's /init: load the virtio modules, mount the root partition
 * named by `root=` read-write, hand over to its /sbin/init. On failure it
 * says why on the console and powers off, so the host sees qemu exit instead
 * of waiting out its boot timeout.
 */
export function initramfsInit(modules: readonly string[]): string {
  return `#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
for module in ${modules.join(' ')}; do insmod /lib/modules/$module || echo "initramfs: insmod $module failed"; done
root=/dev/vda1
for arg in $(cat /proc/cmdline); do case "$arg" in root=*) root="\${arg#root=}";; esac; done
tries=0
while [ ! -b "$root" ] && [ $tries -lt 200 ]; do usleep 50000; tries=$((tries + 1)); done
if ! mount -t ext4 -o rw "$root" /newroot; then
  echo "initramfs: cannot mount the root $root; powering off"
  poweroff -f
fi
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/init
`;
}

/** Busybox init's table on the root: set-up once, then qemu-ga kept running. */
export const INITTAB = `::sysinit:/etc/init.d/rcS
::respawn:/sbin/start-qemu-ga
::ctrlaltdel:/sbin/reboot -f
::shutdown:/bin/umount -a -r
`;

export const RC_S = `#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs -o mode=0755,size=16m tmpfs /run
hostname dsec-vm
echo "dsec-test-vm: root mounted, starting qemu-ga"
`;

/**
 * Finds the guest agent's port by name (/sys/class/virtio-ports/vportNpM/name)
 * and runs qemu-ga on it in the foreground; init respawns it (and so retries
 * while the port is not there yet).
 */
export const START_QEMU_GA = `#!/bin/sh
for port in /sys/class/virtio-ports/*; do
  if [ "$(cat "$port/name" 2>/dev/null)" = "${GUEST_AGENT_PORT}" ]; then
    echo "dsec-test-vm: qemu-ga on /dev/\${port##*/}"
    exec /usr/sbin/qemu-ga --method=virtio-serial --path="/dev/\${port##*/}" --pidfile=/run/qemu-ga.pid --statedir=/run
  fi
done
sleep 1
`;

/** Syslinux's configuration: boot the kernel with the initramfs straight away, console on the serial port. */
export function extlinuxConf(append: string): string {
  return `SERIAL 0 115200
DEFAULT linux
PROMPT 0
TIMEOUT 0
LABEL linux
  KERNEL /boot/vmlinuz
  INITRD /boot/initrd.img
  APPEND ${append}
`;
}
