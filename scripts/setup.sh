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

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm packages"
  npm ci --no-audit --no-fund --loglevel=error
fi
