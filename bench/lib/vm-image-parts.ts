/**
 * The texts of the test VM image (bench/lib/vm-image.ts): the initramfs's
 * /init, the root's inittab, rcS and qemu-ga launcher, syslinux's config.
 */

/** The name qemu gives the guest agent's virtio-serial port; qemu-ga and the host client both look for it. */
export const GUEST_AGENT_PORT = 'org.qemu.guest_agent.0';

/**
 * The modules a q35 guest needs to reach its root disk and the guest agent's
 * port, and the balloon that hands freed memory back (free page reporting):
 * in this kernel everything virtio is a module, the PCI transport included
 * (ext4 and the serial console are built in).
 */
export const GUEST_MODULES: readonly string[] = Object.freeze(['virtio_pci', 'virtio_blk', 'virtio_console', 'virtio_balloon']);

/**
 * The initramfs's /init: load the virtio modules (`modulesDir`, listed in
 * its load-order file, dependencies first), mount the root partition
 * named by `root=` read-write, hand over to its /sbin/init. On failure it
 * says why on the console and powers off, so the host sees qemu exit instead
 * of waiting out its boot timeout.
 */
export function initramfsInit(modulesDir: string): string {
  return `#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
for module in $(cat /${modulesDir}/load-order); do insmod /${modulesDir}/$module || echo "initramfs: insmod $module failed"; done
root=/dev/vda1
for arg in $(cat /proc/cmdline); do case "$arg" in root=*) root="\${arg#root=}";; esac; done
tries=0
while [ ! -b "$root" ] && [ $tries -lt 200 ]; do usleep 50000; tries=$((tries + 1)); done
if ! mount -t ext4 -o rw "$root" /mnt; then
  echo "initramfs: cannot mount the root $root; powering off"
  poweroff -f
fi
umount /proc /sys
mount --move /dev /mnt/dev
exec switch_root /mnt /sbin/init
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
