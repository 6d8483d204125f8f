#!/usr/bin/env bash
# System calls and CPU time per request, on both sides, for kbtp LOAD and Redis GET of the same
# size over loopback (docs/BENCH.md, "System calls per request"). Each side is counted with
# `strace -f -c` over two runs of N and 3N requests; the difference divided by 2N is the cost of
# one request, with the start-up, connection setup and block preparation of both runs cancelling
# out. CPU time comes the same way from /proc (utime + stime of the server process, and of the
# client as a waited-for child), in runs without strace.
#
#   bench/compare/syscalls.sh [--requests N] [--size 16384] [--sessions 1] [--in-flight 1]
#                             [--op load|store] [--no-strace]
#
# --in-flight N > 1 pipelines: kbtp bench --batch (loadMany/storeMany of N per session), as make
# compare's 8-in-flight rows do, against redis-benchmark -P N. --op store measures kbtp STORE
# against Redis SET.
#
# Needs strace, redis-server and redis-benchmark (bench/compare/deps.sh) and a built tree
# (make build). Everything listens on 127.0.0.1 only and is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

requests=5000
size=16384
sessions=1
in_flight=1
op=load
use_strace=1
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) requests=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --in-flight) in_flight=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --no-strace) use_strace=0; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "syscalls.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
. bench/compare/servers.sh # $work, $pids and their clean-up; start_kbtp_target, start_redis, redis_op_for, require_tools
redis_op=$(redis_op_for "$op") || exit 2
kbtp_batch=()
[ "$in_flight" = 1 ] || kbtp_batch=(--batch)
require_tools "run bench/compare/deps.sh" redis-server redis-benchmark node
[ "$use_strace" = 0 ] || command -v strace >/dev/null || { echo "syscalls.sh: strace is missing (apt-get install strace)" >&2; exit 2; }
[ -f dist/host/cli.js ] || { echo "syscalls.sh: run make build first" >&2; exit 2; }

# CPU time of a process so far, in nanoseconds: its threads' run time (the servers keep theirs).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }

# `strace -c` summary -> "name calls" lines.
summary() { awk '/^[ ]*[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+/ && $NF != "total" { print $NF, $4 }' "$1"; }

# Runs the client command ($@ followed by a request count) for N and 3N requests: under strace
# (the server attached with strace -p), then, after a warm-up run, plainly for the CPU figures.
# Writes $work/<tag>1.{server,client} and <tag>3.* (strace summaries) and <tag>{1,3}.cpu.
measure() {
  local tag=$1 server=$2; shift 2
  local n
  if [ "$use_strace" = 1 ]; then
    for n in 1 3; do
      strace -f -c -o "$work/$tag$n.server" -p "$server" 2>/dev/null &
      local tracer=$!
      sleep 1
      strace -f -c -o "$work/$tag$n.client" "$@" "$((n * requests))" >/dev/null 2>"$work/$tag.err"
      kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
    done
  fi
  # Warm-up: the server's JIT settles before CPU is counted (a fresh kbtp target's compiler threads
  # run for its first few thousand requests).
  "$@" "$requests" >/dev/null 2>"$work/$tag.err"
  "$@" "$requests" >/dev/null 2>"$work/$tag.err"
  local before_s TIMEFORMAT='%3U %3S'
  for n in 1 3; do
    before_s=$(cpu_ns "$server")
    { time "$@" "$((n * requests))" >/dev/null 2>"$work/$tag.err"; } 2>"$work/$tag$n.time"
    echo "$(( $(cpu_ns "$server") - before_s )) $(awk '{ printf "%.0f", ($1 + $2) * 1e9 }' "$work/$tag$n.time")" > "$work/$tag$n.cpu"
  done
}

# Per-request difference of two runs: prints "side syscall calls/request" for every call that moved.
difference() {
  local small=$1 large=$2 side=$3
  join -a1 -a2 -e 0 -o 0,1.2,2.2 <(summary "$work/$small.$side" | sort) <(summary "$work/$large.$side" | sort) |
    awk -v n="$((2 * requests))" -v side="$side" '{ d = ($3 - $2) / n; if (d >= 0.005) printf "%s %s %.2f\n", side, $1, d }'
}

report() {
  local name=$1 small=$2 large=$3
  echo "== $name: $size-octet values, $sessions connection(s) x $in_flight in flight, difference of $requests and $((3 * requests)) requests"
  if [ "$use_strace" = 1 ]; then
    { difference "$small" "$large" server; difference "$small" "$large" client; } |
      awk '{ total[$1] += $3; print "  " $0 } END { printf "  total: server %.2f, client %.2f system calls per request\n", total["server"], total["client"] }'
  fi
  read -r s1 c1 < "$work/$small.cpu"; read -r s3 c3 < "$work/$large.cpu"
  awk -v s="$((s3 - s1))" -v c="$((c3 - c1))" -v n="$((2 * requests))" \
    'BEGIN { printf "  CPU per request: server %.1f us, client %.1f us\n", s / 1e3 / n, c / 1e3 / n }'
}

# --- kbtp -------------------------------------------------------------------------------------
# Max Inline as make compare's spawned target has it (host/bench/spawn.ts SPAWNED_MAX_INLINE):
# whole blocks up to 1 MiB go inline, larger ones by RDMA Read.
blocks=$((sessions * in_flight + 16))
echo "{ \"pool\": { \"blockSize\": $size, \"blockCount\": $blocks, \"maxInline\": $((size < 1048576 ? size : 1048576)) } }" >"$work/target.json"
start_kbtp_target syscalls.sh --config "$work/target.json" --listen 127.0.0.1:0 --workers 1 --block-size "$size" --blocks "$blocks" --credits 8
kbtp_client=(node dist/host/cli.js bench --target "127.0.0.1:$port" --sizes "$size" --mix "$op" --sessions "$sessions" --in-flight "$in_flight" "${kbtp_batch[@]}" --quiet --count)
measure kbtp "$target" "${kbtp_client[@]}"
report "kbtp ${op^^} (server: kbtp target, 1 worker; client: kbtp bench)" kbtp1 kbtp3
echo "  load: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- Redis ------------------------------------------------------------------------------------
start_redis "$size"
redis_client=(redis-benchmark -h 127.0.0.1 -p "$rport" -t "$redis_op" -d "$size" -c "$sessions" -P "$in_flight" -q -n)
measure redis "$redis" "${redis_client[@]}"
report "Redis ${redis_op^^} (server: redis-server; client: redis-benchmark)" redis1 redis3
echo "  load: $(cut -d' ' -f1-3 /proc/loadavg)"
