#!/usr/bin/env bash
# Installs what the firmware tests need from Debian when missing, so a clean machine (CI) runs
# them instead of skipping them: chromium (the status page in a real browser, driven by
# playwright-core) and systemd (systemd-analyze verifies the unit file and scores its exposure).
# Run by `make test` before the tests; the one host-package installer does the work.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../../images/lib/install-host-packages.sh" chromium systemd
