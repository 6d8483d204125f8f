#!/usr/bin/env bash
# Installs what the firmware tests need from Debian when missing, so a clean machine (CI) runs
# them instead of skipping them: chromium (the status page in a real browser, driven by
# playwright-core) and systemd's systemd-analyze (the unit file is verified and its exposure
# scored). Run by `make test` before the tests.
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v systemd-analyze >/dev/null || missing+=(systemd)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "the firmware tests need ${missing[*]}: run 'sudo apt-get install -y ${missing[*]}' first" >&2
  exit 1
fi
echo "installing ${missing[*]} from Debian for the firmware tests" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
