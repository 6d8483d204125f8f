#!/usr/bin/env bash
# Installs Debian's libisal2 when missing, so that `make test` checks the CRC32C the durable tier
# and the appliance image actually use (ISA-L, host/tier/checksum.ts) and not only its fallback.
# Run by `make test` before the tests; the one host-package installer does the work.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../../images/lib/install-host-packages.sh" libisal2
