#!/usr/bin/env bash
# Installs what `make compare` measures kbtp against, from Debian's packages, when missing:
# redis-server, redis-benchmark and redis-cli (redis-tools), iperf3, and gcc for redis-latency.c
# (bench/compare/redis-latency.ts compiles it), with the one host-package
# installer. Services are not started here: the comparison starts its own instances on 127.0.0.1
# and stops them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fresh_redis=false
command -v redis-server >/dev/null || fresh_redis=true
"$here/../../images/lib/install-host-packages.sh" redis-server redis-tools iperf3 gcc libc6-dev
# Where an init system started the freshly installed service, stop it: the comparison leaves
# nothing running, and a second Redis would share the two cores with the measured one.
if $fresh_redis && command -v systemctl >/dev/null && systemctl is-active --quiet redis-server 2>/dev/null; then
  systemctl stop redis-server || true
fi
