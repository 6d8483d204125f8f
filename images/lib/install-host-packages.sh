#!/usr/bin/env bash
# Installs the given Debian packages into the host when any is missing, and nothing otherwise (so a
# cached run costs one dpkg-query). Used by the image builders' host-deps.sh and by the test and
# benchmark dependency scripts (test/firmware/deps.sh, bench/compare/deps.sh).
set -euo pipefail

missing=()
for p in "$@"; do
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
