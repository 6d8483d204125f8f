#!/usr/bin/env bash
# Builds the RDMA peer guest: Debian's kernel (vmlinux extracted for PVH boot), siw.ko built out of
# tree from Debian's own kernel sources (Debian does not ship siw), Debian's own rdma_rxe
# (Soft-RoCE), and an initramfs holding busybox, the RDMA modules, rdma-core's rping,
# ibv_rc_pingpong and ibv_devinfo, perftest's ib_*_bw, and iproute2's rdma. Everything comes from Debian
# packages fetched with `apt-get download` and unpacked with `dpkg-deb -x`; nothing is installed
# into the host except the build tools (host-deps.sh).
#
# The artefacts are cached under $KBTP_IMAGE_CACHE/guest/<key>/ where <key> hashes the exact package
# versions and this folder's scripts, so a second run only resolves versions and prints the folder.
#
# Usage: images/guest/build.sh            prints the artefact folder (vmlinux, initramfs.cpio, manifest.json)
# Env:   KBTP_IMAGE_CACHE   cache root (default <repo>/.cache/images)
#        KBTP_GUEST_KERNEL  kernel ABI to use, e.g. 6.1.0-57-amd64 (default: what linux-image-amd64 points at)
#        KBTP_BUILD_JOBS    make -j for siw (default 2: the machine is shared)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${KBTP_IMAGE_CACHE:-$repo/.cache/images}"

log() { echo "[guest-image] $*" >&2; }
die() { echo "[guest-image] error: $*" >&2; exit 1; }

# User-space packages copied into the guest. Libraries are picked from them by ELF NEEDED closure,
# so a missing one is reported by name instead of failing at guest run time.
userspace_packages=(busybox-static rdmacm-utils ibverbs-utils perftest libibverbs1 librdmacm1 ibverbs-providers
  iproute2 libc6 libgcc-s1 libnl-3-200 libnl-route-3-200 libmnl0 libbsd0 libmd0 libcap2 libibumad3 libpci3 libudev1 zlib1g)
# Modules loaded in the guest, in this order after their dependencies. crc32c_generic comes before
# libcrc32c because libcrc32c only soft-depends on a crc32c provider, which modinfo does not list;
# likewise crc32_generic before rdma_rxe (its ICRC asks the crypto API for "crc32" at run time).
guest_modules=(virtio_pci virtio_net crc32c_generic libcrc32c crc32_generic ib_uverbs rdma_ucm iw_cm siw rdma_rxe)

"$here/host-deps.sh" build
deb_arch=amd64
# shellcheck source=../lib/debian.sh
source "$here/../lib/debian.sh"
resolve_packages "${userspace_packages[@]}"

script_hash="$(cat "$here/build.sh" "$here/init.sh" "$here/../lib/debian.sh" | sha256sum | cut -c1-12)"
key="$( (printf '%s\n' "${pins[@]}" | sort; echo "scripts $script_hash"; echo "modules ${guest_modules[*]}") | sha256sum | cut -c1-16)"
out="$cache/guest/$key"
if [[ -f "$out/manifest.json" ]]; then
  log "cached: $out"
  echo "$out"
  exit 0
fi

log "building $out (kernel $kernel_abi $kernel_version)"
mkdir -p "$cache/guest"
work="$(mktemp -d "$cache/.work-XXXXXX")"
trap 'rm -rf "$work"' EXIT
download_pins

# --- kernel: vmlinux for PVH boot ------------------------------------------------------------
kroot="$work/kernel"
extract_kernel "$kroot"
moddir="$kroot/lib/modules/$kernel_abi"
kernel_source_files "$work/src" scripts/extract-vmlinux
log "extracting vmlinux"
sh "$work/src/linux-source-$kernel_series/scripts/extract-vmlinux" "$kroot/boot/vmlinuz-$kernel_abi" > "$work/vmlinux"
readelf -n "$work/vmlinux" | grep -q 'Xen' || die "extracted vmlinux has no PVH (Xen ELF) note"

# --- siw.ko ----------------------------------------------------------------------------------
extra_module_siw="$(siw_module)"

# --- initramfs -------------------------------------------------------------------------------
pkgroot="$work/pkgroot"
for spec in "${pins[@]}"; do
  p="${spec% *}"
  [[ " ${userspace_packages[*]} " == *" $p "* ]] || continue
  dpkg-deb -x "$(deb_of "$p" "${spec#* }")" "$pkgroot"
done

rootfs="$work/rootfs"
make_merged_root "$rootfs"
mkdir -p "$rootfs/modules"

copy_with_libs /bin/busybox
copy_with_libs /usr/bin/rping
copy_with_libs /usr/bin/rdma
copy_with_libs /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav34.so
copy_with_libs /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
for tool in ibv_rc_pingpong ibv_devinfo ib_write_bw ib_read_bw ib_atomic_bw ib_send_bw; do
  copy_with_libs "/usr/bin/$tool"
done
copy_with_libs /lib64/ld-linux-x86-64.so.2
# rping cancels its CQ thread; glibc then dlopens libgcc_s and aborts at exit without it.
copy_with_libs "$(find_in_pkgroot libgcc_s.so.1)"
mkdir -p "$rootfs/etc/libibverbs.d"
cp "$pkgroot/etc/libibverbs.d/siw.driver" "$pkgroot/etc/libibverbs.d/rxe.driver" "$rootfs/etc/libibverbs.d/"

for m in "${guest_modules[@]}"; do add_module "$m"; done
for m in "${module_order[@]}"; do cp "$(module_path "$m")" "$rootfs/modules/$m.ko"; done
printf '%s\n' "${module_order[@]}" > "$rootfs/modules/order"

install -m 0755 "$here/init.sh" "$rootfs/init"

log "packing initramfs"
(cd "$rootfs" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) > "$work/initramfs.cpio"

mkdir -p "$out.tmp"
mv "$work/vmlinux" "$work/initramfs.cpio" "$out.tmp/"
{
  echo "{"
  echo "  \"key\": \"$key\","
  echo "  \"kernel\": \"$kernel_abi\","
  echo "  \"kernelVersion\": \"$kernel_version\","
  echo "  \"modules\": [$(printf '"%s",' "${module_order[@]}" | sed 's/,$//')],"
  echo "  \"packages\": {"
  printf '%s\n' "${pins[@]}" | sort | awk '{printf "%s    \"%s\": \"%s\"", (NR>1?",\n":""), $1, $2} END{print ""}'
  echo "  }"
  echo "}"
} > "$out.tmp/manifest.json"
rm -rf "$out"
mv "$out.tmp" "$out"
# Only the current guest and its packages' versions are kept: older ones are dead weight (hundreds of MB).
for old in "$cache"/guest/*/; do
  old="${old%/}"
  [[ "$old" == "$out" ]] || rm -rf "$old"
done
prune_debs
log "built $out ($(du -sh "$out" | cut -f1))"
echo "$out"
