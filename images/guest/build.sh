#!/usr/bin/env bash
# Builds the soft-iWARP peer guest: Debian's kernel (vmlinux extracted for PVH boot), siw.ko built
# out of tree from Debian's own kernel sources (Debian does not ship siw), and an initramfs holding
# busybox, the RDMA modules, rdma-core's rping and iproute2's rdma. Everything comes from Debian
# packages fetched with `apt-get download` and unpacked with `dpkg-deb -x`; nothing is installed
# into the host except the build tools (host-deps.sh).
#
# The artefacts are cached under $KBTP_IMAGE_CACHE/<key>/ where <key> hashes the exact package
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
jobs="${KBTP_BUILD_JOBS:-2}"

log() { echo "[guest-image] $*" >&2; }
die() { echo "[guest-image] error: $*" >&2; exit 1; }

# User-space packages copied into the guest. Libraries are picked from them by ELF NEEDED closure,
# so a missing one is reported by name instead of failing at guest run time.
userspace_packages=(busybox-static rdmacm-utils libibverbs1 librdmacm1 ibverbs-providers iproute2
  libc6 libgcc-s1 libnl-3-200 libnl-route-3-200 libmnl0 libbsd0 libmd0 libcap2)
# Modules loaded in the guest, in this order after their dependencies. crc32c_generic comes before
# libcrc32c because libcrc32c only soft-depends on a crc32c provider, which modinfo does not list.
guest_modules=(virtio_pci virtio_net crc32c_generic libcrc32c ib_uverbs rdma_ucm iw_cm siw)

"$here/host-deps.sh" build

apt_candidates() {
  # Prints "package version depends" for each package's candidate version (one apt-cache call:
  # this is most of what a cached run costs).
  apt-cache show --no-all-versions "$@" 2>/dev/null \
    | awk '/^Package: /{p=$2; d=""} /^Depends: /{d=$0; gsub(/ /, "", d)} /^Version: /{v=$2} /^$/{if (p) print p, v, d; p=""} END{if (p) print p, v, d}'
}

# The kernel comes from what linux-image-amd64 depends on (its Depends pins the exact version),
# unless KBTP_GUEST_KERNEL names one.
kernel_query="linux-image-amd64"
[[ -n "${KBTP_GUEST_KERNEL:-}" ]] && kernel_query="linux-image-${KBTP_GUEST_KERNEL}"
candidates="$(apt_candidates "$kernel_query" "${userspace_packages[@]}")"
if [[ -z "$candidates" ]]; then
  log "apt lists are empty: apt-get update"
  apt-get update -qq >&2 || die "apt-get update failed"
  candidates="$(apt_candidates "$kernel_query" "${userspace_packages[@]}")"
fi
kernel_line="$(grep "^$kernel_query " <<<"$candidates" || true)"
[[ -n "$kernel_line" ]] || die "no candidate for $kernel_query (apt-get update, or check KBTP_GUEST_KERNEL)"
if [[ -n "${KBTP_GUEST_KERNEL:-}" ]]; then
  kernel_abi="$KBTP_GUEST_KERNEL"
  kernel_version="$(awk '{print $2}' <<<"$kernel_line")"
else
  kernel_abi="$(sed -n 's/.*Depends:linux-image-\([^(,]*-amd64\)(=\([^)]*\)).*/\1/p' <<<"$kernel_line")"
  kernel_version="$(sed -n 's/.*Depends:linux-image-\([^(,]*-amd64\)(=\([^)]*\)).*/\2/p' <<<"$kernel_line")"
  [[ -n "$kernel_abi" && -n "$kernel_version" ]] || die "cannot tell which kernel linux-image-amd64 depends on: $kernel_line"
fi
kernel_common="${kernel_abi%-amd64}-common"
kernel_series="$(echo "$kernel_abi" | cut -d. -f1,2)" # 6.1

# Kernel packages are pinned to the image's exact version: siw must be built from the same source
# and headers as the kernel that loads it.
kernel_packages=("linux-image-$kernel_abi" "linux-headers-$kernel_abi" "linux-headers-$kernel_common"
  "linux-kbuild-$kernel_series" "linux-source-$kernel_series")

pins=()
for p in "${kernel_packages[@]}"; do pins+=("$p $kernel_version"); done
while read -r p v _; do pins+=("$p $v"); done < <(grep -v "^$kernel_query " <<<"$candidates")
[[ ${#pins[@]} -eq $(( ${#kernel_packages[@]} + ${#userspace_packages[@]} )) ]] \
  || die "some packages have no candidate version: ${userspace_packages[*]}"

script_hash="$(cat "$here/build.sh" "$here/init.sh" | sha256sum | cut -c1-12)"
key="$( (printf '%s\n' "${pins[@]}" | sort; echo "scripts $script_hash"; echo "modules ${guest_modules[*]}") | sha256sum | cut -c1-16)"
out="$cache/$key"
if [[ -f "$out/manifest.json" ]]; then
  log "cached: $out"
  echo "$out"
  exit 0
fi

log "building $out (kernel $kernel_abi $kernel_version)"
debs="$cache/debs"
mkdir -p "$debs"
chmod 0777 "$debs" # apt-get download drops privileges to _apt when it can write the folder
work="$(mktemp -d "$cache/.work-XXXXXX")"
trap 'rm -rf "$work"' EXIT

download() {
  local want=() spec
  for spec in "${pins[@]}"; do
    local p="${spec% *}" v="${spec#* }"
    local file="${p}_${v//:/%3a}_"
    compgen -G "$debs/$file*.deb" >/dev/null || want+=("$p=$v")
  done
  [[ ${#want[@]} -eq 0 ]] && return 0
  log "apt-get download ${#want[@]} packages"
  (cd "$debs" && apt-get download -qq "${want[@]}" >&2)
}
if ! download; then
  log "download failed; refreshing apt lists once"
  apt-get update -qq >&2
  download || die "apt-get download failed"
fi
deb_of() { # package version -> .deb path
  local f
  f="$(compgen -G "$debs/${1}_${2//:/%3a}_*.deb" | head -n1)"
  [[ -n "$f" ]] || die "missing .deb for $1 $2"
  echo "$f"
}

# --- kernel: vmlinux for PVH boot ------------------------------------------------------------
kroot="$work/kernel"
dpkg-deb -x "$(deb_of "linux-image-$kernel_abi" "$kernel_version")" "$kroot"
moddir="$kroot/lib/modules/$kernel_abi"

src="$work/src"
mkdir -p "$src"
dpkg-deb --fsys-tarfile "$(deb_of "linux-source-$kernel_series" "$kernel_version")" \
  | tar -xO "./usr/src/linux-source-$kernel_series.tar.xz" \
  | xz -dc -T1 \
  | tar -x -C "$src" "linux-source-$kernel_series/drivers/infiniband/sw/siw" "linux-source-$kernel_series/scripts/extract-vmlinux"
ksrc="$src/linux-source-$kernel_series"

log "extracting vmlinux"
sh "$ksrc/scripts/extract-vmlinux" "$kroot/boot/vmlinuz-$kernel_abi" > "$work/vmlinux"
readelf -n "$work/vmlinux" | grep -q 'Xen' || die "extracted vmlinux has no PVH (Xen ELF) note"

# --- siw.ko ----------------------------------------------------------------------------------
hdr="$work/headers"
for p in "linux-headers-$kernel_abi" "linux-headers-$kernel_common" "linux-kbuild-$kernel_series"; do
  dpkg-deb -x "$(deb_of "$p" "$kernel_version")" "$hdr"
done
# The arch headers' Makefile includes the common one by its absolute /usr/src path.
echo "include $hdr/usr/src/linux-headers-$kernel_common/Makefile" > "$hdr/usr/src/linux-headers-$kernel_abi/Makefile"
log "building siw.ko (-j$jobs)"
make -s -C "$hdr/usr/src/linux-headers-$kernel_abi" M="$ksrc/drivers/infiniband/sw/siw" \
  CONFIG_RDMA_SIW=m -j"$jobs" modules >"$work/siw-build.log" 2>&1 \
  || { cat "$work/siw-build.log" >&2; die "siw build failed"; }
siw_ko="$ksrc/drivers/infiniband/sw/siw/siw.ko"
strip --strip-debug "$siw_ko"

# --- initramfs -------------------------------------------------------------------------------
pkgroot="$work/pkgroot"
for spec in "${pins[@]}"; do
  p="${spec% *}"
  [[ " ${userspace_packages[*]} " == *" $p "* ]] || continue
  dpkg-deb -x "$(deb_of "$p" "${spec#* }")" "$pkgroot"
done

rootfs="$work/rootfs"
mkdir -p "$rootfs"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,proc,sys,dev,tmp,run,modules}
ln -s usr/bin "$rootfs/bin"; ln -s usr/sbin "$rootfs/sbin"; ln -s usr/lib "$rootfs/lib"; ln -s usr/lib64 "$rootfs/lib64"

# Debian splits files between /lib and /usr/lib (pre-usrmerge packaging); the guest is merged.
merged_path() { local p="$1"; case "$p" in /lib/*|/lib64/*|/bin/*|/sbin/*) p="/usr$p";; esac; echo "$p"; }
find_in_pkgroot() { # library soname -> path inside pkgroot
  local d
  for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64; do
    [[ -e "$pkgroot$d/$1" ]] && { echo "$d/$1"; return 0; }
  done
  return 1
}
declare -A copied=()
copy_with_libs() { # path inside pkgroot (absolute)
  local rel="$1"
  [[ -n "${copied[$rel]:-}" ]] && return 0
  copied[$rel]=1
  local dest; dest="$rootfs$(merged_path "$rel")"
  mkdir -p "$(dirname "$dest")"
  cp -L "$pkgroot$rel" "$dest"
  local lib
  for lib in $(readelf -d "$pkgroot$rel" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    local found
    found="$(find_in_pkgroot "$lib")" || die "$rel needs $lib, which none of the packages provides"
    copy_with_libs "$found"
  done
}
copy_with_libs /bin/busybox
copy_with_libs /usr/bin/rping
copy_with_libs /usr/bin/rdma
copy_with_libs /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav34.so
copy_with_libs /lib64/ld-linux-x86-64.so.2
# rping cancels its CQ thread; glibc then dlopens libgcc_s and aborts at exit without it.
copy_with_libs "$(find_in_pkgroot libgcc_s.so.1)"
mkdir -p "$rootfs/etc/libibverbs.d"
cp "$pkgroot/etc/libibverbs.d/siw.driver" "$rootfs/etc/libibverbs.d/"

# Modules with their dependency closure (from each module's .modinfo "depends="), in load order.
module_path() { # name -> path relative to $moddir, or the built siw
  local name="$1" alt="${1//_/-}"
  if [[ "$name" == siw ]]; then echo "$siw_ko"; return 0; fi
  local f
  f="$(find "$moddir/kernel" \( -name "$name.ko" -o -name "$alt.ko" \) -print -quit)"
  [[ -n "$f" ]] || die "module $name is not in linux-image-$kernel_abi"
  echo "$f"
}
module_depends() {
  objcopy -O binary --only-section=.modinfo "$1" /dev/stdout 2>/dev/null | tr '\0' '\n' \
    | sed -n 's/^depends=//p' | tr ',' ' '
}
declare -A module_seen=()
module_order=()
add_module() {
  local name="${1//-/_}"
  [[ -n "${module_seen[$name]:-}" ]] && return 0
  module_seen[$name]=1
  local f dep
  f="$(module_path "$name")"
  for dep in $(module_depends "$f"); do add_module "$dep"; done
  cp "$f" "$rootfs/modules/$name.ko"
  module_order+=("$name")
}
for m in "${guest_modules[@]}"; do add_module "$m"; done
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
# Only the current image and its packages are kept: older keys are dead weight (hundreds of MB).
for old in "$cache"/*/; do
  old="${old%/}"
  [[ "$old" == "$out" || "$old" == "$debs" ]] || rm -rf "$old"
done
keep=()
for spec in "${pins[@]}"; do keep+=("$(deb_of "${spec% *}" "${spec#* }")"); done
for f in "$debs"/*.deb; do
  [[ " ${keep[*]} " == *" $f "* ]] || rm -f "$f"
done
log "built $out ($(du -sh "$out" | cut -f1))"
echo "$out"
