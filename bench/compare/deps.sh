#!/usr/bin/env bash
# Installs what `make compare` measures kbtp against, from Debian's packages, when missing:
# redis-server, redis-benchmark (redis-tools) and iperf3. Services are not started here: the
# comparison starts its own instances on 127.0.0.1 and stops them.
set -euo pipefail
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-benchmark >/dev/null || missing+=(redis-tools)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v iperf3 >/dev/null || missing+=(iperf3)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "make compare needs ${missing[*]}: run 'sudo apt-get install -y ${missing[*]}' first" >&2
  exit 1
fi
echo "installing ${missing[*]} from Debian" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d or no init system keeps the packaged redis service from starting; either way the
# comparison uses its own instance on a free loopback port.
apt-get install -y -qq "${missing[@]}" >/dev/null
# Where an init system did start the packaged service, stop it: the comparison started nothing
# it leaves running, and a second Redis would share the two cores with the measured one.
if [[ " ${missing[*]} " == *" redis-server "* ]]; then
  if command -v systemctl >/dev/null && systemctl is-active --quiet redis-server 2>/dev/null; then systemctl stop redis-server || true; fi
fi
