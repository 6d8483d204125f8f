#!/usr/bin/env bash
# Installs, from Debian's packages, the host tools the guest image build ("build") or the guest
# boot ("run") needs, and nothing when they are already there.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

case "${1:-}" in
  build) exec "$here/../lib/install-host-packages.sh" gcc-12 make binutils cpio xz-utils libelf1 libssl3 ;;
  run) exec "$here/../lib/install-host-packages.sh" qemu-system-x86 ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
