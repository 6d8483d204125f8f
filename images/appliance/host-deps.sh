#!/usr/bin/env bash
# Installs, from Debian's packages, the host tools the appliance image build ("build") or its
# boot tests ("run") need, and nothing when they are already there. ARCH=arm64 adds the arm64
# cross tools (siw is built with gcc-12-aarch64-linux-gnu) and qemu-system-arm with AAVMF.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
arch="${ARCH:-x86_64}"

build=(gcc-12 make binutils cpio xz-utils libelf1 libssl3 kmod mtools dosfstools fdisk squashfs-tools e2fsprogs
  qemu-utils zstd tar openssl)
run=(qemu-system-x86 qemu-utils ovmf)
if [[ "$arch" == arm64 || "$arch" == aarch64 ]]; then
  build+=(gcc-12-aarch64-linux-gnu binutils-aarch64-linux-gnu)
  run=(qemu-system-arm qemu-utils qemu-efi-aarch64)
fi
case "${1:-}" in
  build)
    if [[ "$arch" == arm64 || "$arch" == aarch64 ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
      # Debian's arm64 packages are fetched with apt-get download: apt must know the architecture.
      echo "[host-deps] dpkg --add-architecture arm64; apt-get update" >&2
      dpkg --add-architecture arm64
      apt-get update -qq >&2
    fi
    exec "$here/../lib/install-host-packages.sh" "${build[@]}" ;;
  run) exec "$here/../lib/install-host-packages.sh" "${run[@]}" ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
