#!/usr/bin/env bash
# What this machine allows at one request in flight, whatever the program: how often and how long
# a busy vCPU loses its CPU (vcpu-stalls.c, on each CPU), and the latency of the barest loopback
# request/answer exchange at make compare's sizes (tcp-pingpong.c). Run it beside make compare on
# the same quiet machine: where the bare exchange's p99 / p50 is above 2, issue 16's "p99 within 2x
# of p50" is out of reach at 1 in flight for kbtp and Redis alike (docs/BENCH.md, session 7).
#
#   bench/compare/platform.sh [--seconds 2] [--requests 100000]
#
# Needs a C compiler and taskset; builds into dist/bench/compare/.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=2
requests=100000
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "platform.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for tool in cc taskset nproc; do
  command -v "$tool" >/dev/null || { echo "platform.sh: $tool is missing" >&2; exit 2; }
done
out=dist/bench/compare
mkdir -p "$out"
for program in vcpu-stalls tcp-pingpong; do
  cc -O2 -Wall -Wextra -o "$out/$program" "bench/compare/$program.c"
done

echo "== a thread that never sleeps: time it lost (gaps between two clock readings), per CPU; load $(cut -d' ' -f1-3 /proc/loadavg)"
for cpu in $(seq 0 $(($(nproc) - 1))); do
  echo "  CPU $cpu: $(taskset -c "$cpu" "$out/vcpu-stalls" --seconds "$seconds")"
done
echo "== loopback TCP, 64-octet request -> answer, 1 in flight, C client and server in epoll (tcp-pingpong.c)"
for size in 16384 262144 1048576; do
  n=$((size >= 1048576 ? requests / 10 : size >= 262144 ? requests / 3 : requests))
  "$out/tcp-pingpong" --size "$size" --requests "$n" --warmup $((n / 5)) |
    awk -v load="$(cut -d' ' -f1-3 /proc/loadavg)" '{ printf "  %7d octets: p50 %7.1f us, p90 %7.1f, p99 %8.1f, p99.9 %8.1f; p99/p50 %.2f (load %s)\n", $2, $6, $8, $10, $12, $10 / $6, load }'
done
