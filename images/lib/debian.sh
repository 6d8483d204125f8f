# Sourced by images/guest/build.sh and images/appliance/build.sh: Debian package versions, the
# shared .deb cache, the Debian kernel with an out-of-tree siw.ko, and copying ELF files with
# their library closure. Nothing is installed into the host: packages are fetched with
# `apt-get download` and unpacked with `dpkg-deb -x`.
#
# The caller sets: cache (cache root), deb_arch (amd64 | arm64), and defines log and die.
# shellcheck shell=bash

debs="$cache/debs"

# The Debian architecture's kernel flavour, library triplet and dynamic loader.
case "$deb_arch" in
  amd64) kernel_flavour=amd64; lib_triplet=x86_64-linux-gnu; dynamic_loader=/lib64/ld-linux-x86-64.so.2 ;;
  arm64) kernel_flavour=arm64; lib_triplet=aarch64-linux-gnu; dynamic_loader=/lib/ld-linux-aarch64.so.1 ;;
  *) die "unsupported architecture $deb_arch (amd64 or arm64)" ;;
esac
host_arch="$(dpkg --print-architecture)"
# apt names a foreign architecture's package pkg:arch.
arch_qualifier=""
[[ "$deb_arch" == "$host_arch" ]] || arch_qualifier=":$deb_arch"

apt_candidates() {
  # Prints "package version depends" for each package's candidate version (one apt-cache call:
  # this is most of what a cached run costs).
  apt-cache show --no-all-versions "$@" 2>/dev/null \
    | awk '/^Package: /{p=$2; d=""} /^Depends: /{d=$0; gsub(/ /, "", d)} /^Version: /{v=$2} /^$/{if (p) print p, v, d; p=""} END{if (p) print p, v, d}'
}

# resolve_packages PACKAGES...: sets kernel_abi, kernel_version, kernel_common, kernel_series and
# pins=("package version" ...) for the kernel packages (pinned to the kernel's exact version: siw is
# built from the same source and headers as the kernel that loads it) and the given packages. The
# kernel is what linux-image-<flavour> depends on, unless KBTP_GUEST_KERNEL names an ABI.
resolve_packages() {
  local kernel_query="linux-image-$kernel_flavour"
  [[ -n "${KBTP_GUEST_KERNEL:-}" ]] && kernel_query="linux-image-${KBTP_GUEST_KERNEL}"
  local queries=("$kernel_query$arch_qualifier") p
  for p in "$@"; do queries+=("$p$arch_qualifier"); done
  local candidates
  candidates="$(apt_candidates "${queries[@]}")"
  if [[ -z "$candidates" ]]; then
    log "apt lists are empty: apt-get update"
    apt-get update -qq >&2 || die "apt-get update failed"
    candidates="$(apt_candidates "${queries[@]}")"
  fi
  local kernel_line
  kernel_line="$(grep "^$kernel_query " <<<"$candidates" || true)"
  [[ -n "$kernel_line" ]] || die "no candidate for $kernel_query$arch_qualifier (apt-get update, dpkg --add-architecture $deb_arch, or check KBTP_GUEST_KERNEL)"
  if [[ -n "${KBTP_GUEST_KERNEL:-}" ]]; then
    kernel_abi="$KBTP_GUEST_KERNEL"
    kernel_version="$(awk '{print $2}' <<<"$kernel_line")"
  else
    kernel_abi="$(sed -n "s/.*Depends:linux-image-\([^(,]*-$kernel_flavour\)(=\([^)]*\)).*/\1/p" <<<"$kernel_line")"
    kernel_version="$(sed -n "s/.*Depends:linux-image-\([^(,]*-$kernel_flavour\)(=\([^)]*\)).*/\2/p" <<<"$kernel_line")"
    [[ -n "$kernel_abi" && -n "$kernel_version" ]] || die "cannot tell which kernel $kernel_query depends on: $kernel_line"
  fi
  kernel_common="${kernel_abi%-"$kernel_flavour"}-common"
  kernel_series="$(echo "$kernel_abi" | cut -d. -f1,2)" # 6.1
  kernel_packages=("linux-image-$kernel_abi" "linux-headers-$kernel_abi" "linux-headers-$kernel_common"
    "linux-kbuild-$kernel_series" "linux-source-$kernel_series")
  pins=()
  for p in "${kernel_packages[@]}"; do pins+=("$p $kernel_version"); done
  local v
  while read -r p v _; do pins+=("$p $v"); done < <(grep -v "^$kernel_query " <<<"$candidates")
  if [[ ${#pins[@]} -ne $(( ${#kernel_packages[@]} + $# )) ]]; then
    local missing=()
    for p in "$@"; do grep -q "^$p " <<<"$candidates" || missing+=("$p"); done
    die "no candidate version for: ${missing[*]} (apt-get update, or check the package names)"
  fi
}

# The architecture a package is fetched for: the kernel build tools (kbuild) run on the host;
# architecture-independent packages resolve to "all" by themselves.
fetch_arch_of() {
  case "$1" in linux-kbuild-*) echo "$host_arch" ;; *) echo "$deb_arch" ;; esac
}

# cached_deb PACKAGE VERSION: the cached .deb of the architecture it is fetched for, or of "all"
# (nothing printed when there is none). The architecture is part of the match: an amd64 and an
# arm64 build share the .deb cache, and the same package and version exist for both.
cached_deb() {
  local stem="$debs/${1}_${2//:/%3a}"
  compgen -G "${stem}_$(fetch_arch_of "$1").deb" || compgen -G "${stem}_all.deb" || true
}

download_pins() {
  mkdir -p "$debs"
  chmod 0777 "$debs" # apt-get download drops privileges to _apt when it can write the folder
  local want=() spec
  for spec in "${pins[@]}"; do
    local p="${spec% *}" v="${spec#* }"
    [[ -n "$(cached_deb "$p" "$v")" ]] || want+=("$p:$(fetch_arch_of "$p")=$v")
  done
  [[ ${#want[@]} -eq 0 ]] && return 0
  log "apt-get download ${#want[@]} packages"
  if ! (cd "$debs" && apt-get download -qq "${want[@]}" >&2); then
    log "download failed; refreshing apt lists once"
    apt-get update -qq >&2
    (cd "$debs" && apt-get download -qq "${want[@]}" >&2) || die "apt-get download failed"
  fi
}

deb_of() { # package version -> .deb path
  local f
  f="$(cached_deb "$1" "$2" | head -n1)"
  [[ -n "$f" ]] || die "missing .deb for $1 $2 ($(fetch_arch_of "$1"))"
  echo "$f"
}

pin_version() { # package -> pinned version
  local spec
  for spec in "${pins[@]}"; do [[ "${spec% *}" == "$1" ]] && { echo "${spec#* }"; return 0; }; done
  die "$1 is not pinned"
}

# Drops cached .debs of other versions of the pinned packages (a new Debian point release leaves
# the old ones behind; hundreds of MB for the kernel sources alone).
prune_debs() {
  local spec f
  for spec in "${pins[@]}"; do
    local p="${spec% *}"
    local keep
    keep="$(deb_of "$p" "${spec#* }")"
    for f in "$debs/${p}"_*_"$(fetch_arch_of "$p")".deb "$debs/${p}"_*_all.deb; do # other architectures stay
      [[ -e "$f" && "$f" != "$keep" ]] && rm -f "$f"
    done
  done
  return 0
}

# extract_kernel DIR: the kernel image package unpacked into DIR.
extract_kernel() {
  dpkg-deb -x "$(deb_of "linux-image-$kernel_abi" "$kernel_version")" "$1"
}

# kernel_source_files DIR PATHS...: files from linux-source's tarball (relative to its top folder)
# into DIR/linux-source-<series>/.
kernel_source_files() {
  local dir="$1"; shift
  local paths=() p
  for p in "$@"; do paths+=("linux-source-$kernel_series/$p"); done
  mkdir -p "$dir"
  dpkg-deb --fsys-tarfile "$(deb_of "linux-source-$kernel_series" "$kernel_version")" \
    | tar -xO "./usr/src/linux-source-$kernel_series.tar.xz" \
    | xz -dc -T1 \
    | tar -x -C "$dir" "${paths[@]}"
}

# siw_module: prints the path of siw.ko for the pinned kernel, built out of tree from Debian's own
# sources (Debian does not enable CONFIG_RDMA_SIW) the first time and cached by kernel version.
siw_module() {
  local built="$cache/siw/$kernel_abi-$kernel_version/siw.ko"
  if [[ -f "$built" ]]; then echo "$built"; return 0; fi
  local work
  work="$(mktemp -d "$cache/.siw-XXXXXX")"
  kernel_source_files "$work/src" drivers/infiniband/sw/siw
  local hdr="$work/headers" p
  for p in "linux-headers-$kernel_abi" "linux-headers-$kernel_common" "linux-kbuild-$kernel_series"; do
    dpkg-deb -x "$(deb_of "$p" "$kernel_version")" "$hdr"
  done
  # The arch headers' Makefile includes the common one by its absolute /usr/src path.
  echo "include $hdr/usr/src/linux-headers-$kernel_common/Makefile" > "$hdr/usr/src/linux-headers-$kernel_abi/Makefile"
  local cross=()
  if [[ "$deb_arch" != "$host_arch" ]]; then
    command -v aarch64-linux-gnu-gcc-12 >/dev/null || die "cross-building siw for $deb_arch needs gcc-12-aarch64-linux-gnu"
    cross=(ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- CC=aarch64-linux-gnu-gcc-12)
  fi
  local siw_dir="$work/src/linux-source-$kernel_series/drivers/infiniband/sw/siw"
  log "building siw.ko for $kernel_abi (-j${KBTP_BUILD_JOBS:-2})"
  make -s -C "$hdr/usr/src/linux-headers-$kernel_abi" M="$siw_dir" "${cross[@]}" \
    CONFIG_RDMA_SIW=m -j"${KBTP_BUILD_JOBS:-2}" modules >"$work/siw-build.log" 2>&1 \
    || { cat "$work/siw-build.log" >&2; rm -rf "$work"; die "siw build failed"; }
  local strip=strip
  [[ "$deb_arch" == "$host_arch" ]] || strip=aarch64-linux-gnu-strip
  "$strip" --strip-debug "$siw_dir/siw.ko"
  mkdir -p "$(dirname "$built")"
  cp "$siw_dir/siw.ko" "$built.tmp" && mv "$built.tmp" "$built"
  rm -rf "$work"
  echo "$built"
}

# ELF copying. The caller sets pkgroot (where packages were unpacked) and rootfs (the tree being
# built). Debian splits files between /lib and /usr/lib (pre-usrmerge packaging); the trees built
# here are merged (/lib -> usr/lib).
merged_path() { local p="$1"; case "$p" in /lib/*|/lib64/*|/bin/*|/sbin/*) p="/usr$p";; esac; echo "$p"; }
find_in_pkgroot() { # library soname -> path inside pkgroot
  local d
  for d in "/lib/$lib_triplet" "/usr/lib/$lib_triplet" /lib64 /usr/lib64 /lib /usr/lib; do
    [[ -e "$pkgroot$d/$1" ]] && { echo "$d/$1"; return 0; }
  done
  return 1
}
declare -A copied=()
copy_with_libs() { # path inside pkgroot (absolute): copied to rootfs with its NEEDED closure
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

make_merged_root() { # DIR: an empty usr-merged tree
  mkdir -p "$1"/{usr/bin,usr/sbin,"usr/lib/$lib_triplet",etc,proc,sys,dev,tmp,run}
  ln -s usr/bin "$1/bin"; ln -s usr/sbin "$1/sbin"; ln -s usr/lib "$1/lib"
  [[ "$deb_arch" == amd64 ]] && { mkdir -p "$1/usr/lib64"; ln -s usr/lib64 "$1/lib64"; }
  return 0
}

# Kernel modules in dependency order (from each module's .modinfo "depends="). The caller sets
# moddir (the extracted kernel's /lib/modules/<abi>) and may set extra_module_NAME paths (siw).
module_path() { # name -> path of its .ko
  local name="$1" alt="${1//_/-}"
  local extra_var="extra_module_$name"
  if [[ -n "${!extra_var:-}" ]]; then echo "${!extra_var}"; return 0; fi
  local f
  f="$(find "$moddir/kernel" \( -name "$name.ko" -o -name "$alt.ko" \) -print -quit)"
  [[ -n "$f" ]] || die "module $name is not in linux-image-$kernel_abi"
  echo "$f"
}
module_depends() {
  local objcopy=objcopy
  [[ "$deb_arch" == "$host_arch" ]] || objcopy=aarch64-linux-gnu-objcopy
  "$objcopy" -O binary --only-section=.modinfo "$1" /dev/stdout 2>/dev/null | tr '\0' '\n' \
    | sed -n 's/^depends=//p' | tr ',' ' '
}
declare -A module_seen=()
module_order=()
add_module() { # name: appends it and its dependencies to module_order
  local name="${1//-/_}"
  [[ -n "${module_seen[$name]:-}" ]] && return 0
  module_seen[$name]=1
  local f dep
  f="$(module_path "$name")"
  for dep in $(module_depends "$f"); do add_module "$dep"; done
  module_order+=("$name")
}
