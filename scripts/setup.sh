#!/usr/bin/env bash
# Installs everything dsec needs on a fresh Debian 12 machine: the Debian
# packages the container backend and the quickstart use, and the npm packages.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v runc >/dev/null 2>&1 || need+=(runc)
# The static build: a base layer's /bin/sh must run without the host's libc.
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v mkfs.erofs >/dev/null 2>&1 || need+=(erofs-utils)
# getfattr/setfattr: overlay opaque directories are an xattr, which node cannot read or write.
command -v setfattr >/dev/null 2>&1 || need+=(attr)
command -v tar >/dev/null 2>&1 || need+=(tar)
# The native helper (native/dsec-native.c) is compiled by npm run build.
command -v gcc >/dev/null 2>&1 || need+=(gcc)
dpkg -s libc6-dev >/dev/null 2>&1 || need+=(libc6-dev)
# The cluster provider keeps nodes, placements and the remote state in etcd; the tests start
# their own members on loopback (random ports), never the packaged service.
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
# The microVM and full-VM backends: qemu (TCG where KVM cannot boot a guest), qemu-img for
# copy-on-write overlays; the full-VM tests build a disk image that boots with extlinux and
# runs Debian's qemu-ga (sfdisk and mkfs.ext4 partition and format it).
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v qemu-img >/dev/null 2>&1 || need+=(qemu-utils)
command -v qemu-ga >/dev/null 2>&1 || need+=(qemu-guest-agent)
command -v extlinux >/dev/null 2>&1 || need+=(extlinux)
dpkg -s syslinux-common >/dev/null 2>&1 || need+=(syslinux-common)
command -v sfdisk >/dev/null 2>&1 || need+=(fdisk)
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)
# The rollouts benchmark (bench/rollouts.ts) builds its Debian base layer (python3, pytest) once with debootstrap.
dpkg -s debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: need root to install: ${need[*]}" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The guest kernel for microVMs (and the full-VM test image): Debian's cloud kernel, unpacked
# into GUEST_KERNEL_DIR, never installed on the host (no initramfs or bootloader hooks run).
GUEST_KERNEL_DIR=${DSEC_GUEST_KERNEL_DIR:-/var/lib/dsec/guest-kernel}
if [ ! -e "$GUEST_KERNEL_DIR/vmlinuz" ]; then
  pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
  if [ -z "$pkg" ]; then apt-get update -qq; pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ {print $2; exit}'); fi
  echo "setup: unpacking the guest kernel $pkg into $GUEST_KERNEL_DIR"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq "$pkg" 2>/dev/null && dpkg-deb -x ./*.deb root)
  version=${pkg#linux-image-}
  mkdir -p "$GUEST_KERNEL_DIR"
  rm -rf "$GUEST_KERNEL_DIR/modules"
  cp "$tmp/root/boot/vmlinuz-$version" "$GUEST_KERNEL_DIR/vmlinuz.tmp"
  cp "$tmp/root/boot/config-$version" "$GUEST_KERNEL_DIR/config"
  mv "$tmp/root/lib/modules/$version" "$GUEST_KERNEL_DIR/modules"
  echo "$version" > "$GUEST_KERNEL_DIR/version"
  mv "$GUEST_KERNEL_DIR/vmlinuz.tmp" "$GUEST_KERNEL_DIR/vmlinuz"
  rm -rf "$tmp"
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm packages"
  npm ci --no-audit --no-fund --loglevel=error
fi
