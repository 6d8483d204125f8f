#!/usr/bin/env bash
# Installs, from Debian's packages, the host tools the guest image build ("build") or the guest
# boot ("run") needs, and nothing when they are already there (so a cached run costs one dpkg-query).
set -euo pipefail

case "${1:-}" in
  build) need=(gcc-12 make binutils cpio xz-utils libelf1 libssl3) ;;
  run) need=(qemu-system-x86) ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac

missing=()
for p in "${need[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
  [[ "$status" == installed ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ "$(id -u)" != 0 ]]; then
  echo "[host-deps] missing Debian packages: ${missing[*]} (run as root, or apt-get install them)" >&2
  exit 1
fi
echo "[host-deps] apt-get install ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
