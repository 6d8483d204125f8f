#!/usr/bin/env bash
# kbtp's bounded busy poll (KBTP_BUSY_POLL_US, host/rnic/busy-poll.ts) against no poll and against
# Redis, at 1 connection x 1 request in flight, with the server and the client pinned to CPUs of
# their own (server on --server-cpu, client on --client-cpu): the only setting in which a polling
# thread pays off (docs/BENCH.md, "Session 7"). Rounds interleave kbtp without the poll, kbtp with
# it and Redis (redis-server and bench/compare/redis-latency.c, pinned the same way).
#
#   bench/compare/busy-poll.sh [--size 16384] [--op load|store] [--budget 200] [--rounds 2]
#                              [--seconds 3] [--server-cpu 0] [--client-cpu 1]
#
# Per row: p50/p99 of each request to its answer's last octet, and each side's CPU time and system
# calls per request, counted by `perf stat` (task-clock, raw_syscalls:sys_enter) over 2 s inside
# kbtp bench's measured window and over the whole redis-latency run (its set-up is a few calls).
# Needs perf, taskset, redis-server (bench/compare/deps.sh), a C compiler and a built tree (make
# bench-build). Everything listens on 127.0.0.1 only and is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

size=16384
op=load
budget=200
rounds=2
seconds=3
server_cpu=0
client_cpu=1
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --server-cpu) server_cpu=$2; shift 2 ;;
    --client-cpu) client_cpu=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "busy-poll.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
. bench/compare/servers.sh # $work, $pids and their clean-up; start_kbtp_target, start_redis, redis_op_for, require_tools
redis_op=$(redis_op_for "$op") || exit 2
require_tools "run bench/compare/deps.sh (perf: apt-get install linux-perf)" perf taskset redis-server redis-cli redis-benchmark cc node
[ -f dist/host/cli.js ] || { echo "busy-poll.sh: run make bench-build first" >&2; exit 2; }

latency_binary=$(node --input-type=module -e "import('./dist/bench/compare/redis-latency.js').then((m) => console.log(m.buildRedisLatency()))")

# perf stat output -> "calls_per_second_sum task_clock_ms_sum" of the given perf file.
perf_totals() { awk '/raw_syscalls:sys_enter/ { gsub(",", "", $1); c += $1 } /task-clock/ { gsub(",", "", $1); t += $1 } END { printf "%.0f %.3f\n", c, t }' "$1"; }

load_now() { cut -d' ' -f1-3 /proc/loadavg; }

# kbtp_row BUDGET: one kbtp bench run against a pinned kbtp target, both with KBTP_BUSY_POLL_US=BUDGET.
kbtp_row() {
  local poll=$1 blocks=64
  echo "{ \"pool\": { \"blockSize\": $size, \"blockCount\": $blocks, \"maxInline\": $((size < 1048576 ? size : 1048576)) } }" >"$work/target.json"
  local load_before
  load_before=$(load_now)
  KBTP_BUSY_POLL_US=$poll taskset -c "$server_cpu" node dist/host/cli.js target --config "$work/target.json" --listen 127.0.0.1:0 --workers 1 --credits 8 >"$work/target.out" 2>&1 &
  local server=$!
  pids+=("$server")
  local _
  for _ in $(seq 100); do [ -n "$(kbtp_port_of "$work/target.out")" ] && break; sleep 0.1; done
  local port
  port=$(kbtp_port_of "$work/target.out")
  [ -n "$port" ] || { cat "$work/target.out" >&2; echo "busy-poll.sh: the target did not start" >&2; exit 1; }
  KBTP_BUSY_POLL_US=$poll taskset -c "$client_cpu" node dist/host/cli.js bench --target "127.0.0.1:$port" --sizes "$size" --mix "$op" \
    --sessions 1 --in-flight 1 --duration "$((seconds + 2))" --warmup 2 --json --quiet >"$work/bench.json" &
  local client=$!
  # 2 s of warm-up, 1 s into the window, then 2 s counted.
  sleep 3
  perf stat -e raw_syscalls:sys_enter,task-clock -p "$server" -o "$work/server.perf" -- sleep 2 2>/dev/null &
  perf stat -e raw_syscalls:sys_enter,task-clock -p "$client" -o "$work/client.perf" -- sleep 2 2>/dev/null
  wait "$client"
  kill "$server"
  wait "$server" 2>/dev/null || true
  local s c
  s=$(perf_totals "$work/server.perf")
  c=$(perf_totals "$work/client.perf")
  node -e '
    const [file, label, server, client, load] = process.argv.slice(1);
    const row = JSON.parse(require("fs").readFileSync(file, "utf8")).rows[0];
    const per = (text) => { const [calls, ms] = text.split(" ").map(Number); return [calls / 2 / row.opsPerSec, (ms * 1000) / 2 / row.opsPerSec]; };
    const [sc, su] = per(server), [cc, cu] = per(client);
    console.log(`${label.padEnd(22)} ${(row.gbPerSec * 8).toFixed(2).padStart(7)} Gbit/s  p50 ${row.p50Us.toFixed(1).padStart(7)}  p99 ${row.p99Us.toFixed(1).padStart(8)} us  server ${su.toFixed(1).padStart(6)} us ${sc.toFixed(2).padStart(6)} calls  client ${cu.toFixed(1).padStart(6)} us ${cc.toFixed(2).padStart(6)} calls  load ${load}`);
  ' "$work/bench.json" "kbtp poll ${poll} us" "$s" "$c" "$load_before"
}

# redis_row: redis-latency against a pinned redis-server, the whole run counted.
redis_row() {
  local load_before requests
  load_before=$(load_now)
  # About as long as kbtp's window at this size: ~25,000 16 KiB requests per second pinned apart.
  requests=$(( seconds * 400000000 / (size + 16000) ))
  start_redis "$size"
  taskset -p -c "$server_cpu" "$redis" >/dev/null
  perf stat -e raw_syscalls:sys_enter,task-clock -p "$redis" -o "$work/server.perf" &
  local tracer=$!
  sleep 0.2
  perf stat -e raw_syscalls:sys_enter,task-clock -o "$work/client.perf" -- \
    taskset -c "$client_cpu" "$latency_binary" --port "$rport" --tests "$redis_op" --size "$size" --requests "$requests" >"$work/redis.out"
  kill -INT "$tracer"
  wait "$tracer" 2>/dev/null || true
  kill "$redis"
  wait "$redis" 2>/dev/null || true
  local s c
  s=$(perf_totals "$work/server.perf")
  c=$(perf_totals "$work/client.perf")
  tail -n +2 "$work/redis.out" | awk '{ print $1 }' | sort -n | awk -v label="Redis ${redis_op^^}" -v s="$s" -v c="$c" -v n="$requests" -v size="$size" \
    -v elapsed="$(head -1 "$work/redis.out" | awk '{ print $6 }')" -v load="$load_before" '
    { v[NR] = $1 }
    END {
      split(s, sv, " "); split(c, cv, " ")
      printf "%-22s %7.2f Gbit/s  p50 %7.1f  p99 %8.1f us  server %6.1f us %6.2f calls  client %6.1f us %6.2f calls  load %s\n",
        label, n * size * 8 / elapsed, v[int(NR * 0.5) + 1] / 1e3, v[int(NR * 0.99) + 1] / 1e3,
        sv[2] * 1000 / n, sv[1] / n, cv[2] * 1000 / n, cv[1] / n, load
    }'
}

echo "== $op of $size octets, 1 connection x 1 in flight; server on CPU $server_cpu, client on CPU $client_cpu; per request: CPU time and system calls"
for round in $(seq "$rounds"); do
  kbtp_row 0
  kbtp_row "$budget"
  redis_row
done
