/**
 * What a microVM boots: the initramfs (busybox, the guest agent, the kernel
 * modules the guest needs, and the /init script below), built once per node
 * and input digest by core/qemu's buildInitramfs.
 *
 * /init, in the guest: load the modules; find each layer's block device by
 * its serial (`dsec-layer-<i>`: the order virtio-mmio devices probe in is
 * not the command line's) and mount it read-only (EROFS); mount the upper
 * layer (tmpfs, or the `dsec-upper` ext4 disk); stack them with overlayfs;
 * put the guest agent in a small read-only tmpfs at /.dsec of the new root;
 * and switch_root into it, the agent becoming PID 1. Any step that fails
 * prints `dsec-init: ...` on the console and powers off, so qemu exits at
 * once (-no-reboot) and the host reports the console's last lines rather
 * than waiting out the boot timeout.
 */
import { buildInitramfs, resolveKernelModules, type BuiltInitramfs, type GuestKernel } from '../../core/plugin-api.js';

/** The modules a microVM needs: virtio-mmio transport, block devices, the agent's serial port, EROFS and overlayfs. */
export const GUEST_MODULES = Object.freeze(['virtio_mmio', 'virtio_blk', 'virtio_console', 'erofs', 'overlay']);
export const HOST_BUSYBOX = '/bin/busybox';
/** Where the guest agent is inside the sandbox (a read-only tmpfs, like the container backend's /.dsec). */
export const GUEST_AGENT_PATH = '/.dsec/guest';
/** What the init prints before it hands over; the boot wait looks for it to tell "booted, agent starting" from "still booting". */
export const INIT_DONE_MARKER = 'dsec-init: starting the guest agent';
export const INIT_FAILED_PREFIX = 'dsec-init: ';
/** The PATH every command in a guest starts with (the spec's env may replace it), as in a container sandbox. */
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** The /init script (kernel cmdline: dsec.layers=<n> dsec.upper=tmpfs|disk [dsec.upper_mib=<MiB>] dsec.hostname=<name>). */
export const INIT_SCRIPT = `#!/bin/busybox sh
B=/bin/busybox
fail() { $B echo "${INIT_FAILED_PREFIX}$*"; $B sync; $B poweroff -f; }
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
for module in $($B cat /lib/modules/dsec/load-order); do
  $B insmod /lib/modules/dsec/$module || fail "cannot load the kernel module $module"
done
LAYERS=0 UPPER=tmpfs UPPER_MIB= NAME=dsec
for word in $($B cat /proc/cmdline); do
  case "$word" in
    dsec.layers=*) LAYERS="\${word#*=}" ;;
    dsec.upper=*) UPPER="\${word#*=}" ;;
    dsec.upper_mib=*) UPPER_MIB="\${word#*=}" ;;
    dsec.hostname=*) NAME="\${word#*=}" ;;
  esac
done
$B hostname "$NAME"
# The block device whose virtio serial is $1, waiting up to 10 s for it to probe.
disk() {
  tries=0
  while [ $tries -lt 200 ]; do
    for dev in /sys/block/vd*; do
      [ "$($B cat $dev/serial 2>/dev/null)" = "$1" ] && { $B echo "/dev/\${dev##*/}"; return 0; }
    done
    tries=$((tries + 1))
    $B usleep 50000
  done
  return 1
}
$B mkdir -p /lower/empty /upper /newroot
LOWER=/lower/empty
i=0
while [ $i -lt "$LAYERS" ]; do
  dev=$(disk dsec-layer-$i) || fail "no block device for layer $i"
  $B mkdir -p /lower/$i
  $B mount -t erofs -o ro "$dev" /lower/$i || fail "cannot mount layer $i ($dev) as EROFS"
  if [ $i -eq 0 ]; then LOWER=/lower/0; else LOWER="/lower/$i:$LOWER"; fi
  i=$((i + 1))
done
if [ "$UPPER" = disk ]; then
  dev=$(disk dsec-upper) || fail "no block device for the upper layer"
  $B mount -t ext4 "$dev" /upper || fail "cannot mount the upper disk $dev"
else
  $B mount -t tmpfs -o "mode=0755\${UPPER_MIB:+,size=\${UPPER_MIB}m}" tmpfs /upper || fail "cannot mount the upper tmpfs"
fi
$B mkdir -p /upper/upper /upper/work
$B mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=/upper/upper,workdir=/upper/work" /newroot || fail "cannot mount the overlay of the layers"
$B mkdir -p /newroot/.dsec /newroot/proc /newroot/sys /newroot/dev /newroot/tmp || fail "cannot make the root's mount points"
$B mount -t tmpfs -o mode=0755,size=16m tmpfs /newroot/.dsec || fail "cannot mount /.dsec"
$B cp /dsec/guest /newroot${GUEST_AGENT_PATH} || fail "cannot copy the guest agent"
$B mount -o remount,ro /newroot/.dsec
$B umount /proc /sys
$B echo "${INIT_DONE_MARKER}"
exec $B switch_root /newroot ${GUEST_AGENT_PATH} --serial auto --init-mounts
`;

/** The microVM initramfs for this kernel and guest agent (cached under `cacheDir` by the digest of every input). */
export async function microvmInitramfs(kernel: GuestKernel, guestAgent: string, cacheDir: string): Promise<BuiltInitramfs> {
  const modules = await resolveKernelModules(kernel.modulesDir, GUEST_MODULES);
  return buildInitramfs(
    {
      files: [
        { target: '/bin/busybox', source: HOST_BUSYBOX },
        { target: '/dsec/guest', source: guestAgent },
        { target: '/init', content: INIT_SCRIPT, mode: 0o755 },
      ],
      modules,
    },
    cacheDir,
  );
}
