#!/usr/bin/env bash
# One request at a time (1 connection x 1 in flight): where kbtp's latency goes against Redis's
# (docs/BENCH.md, "Session 4: latency at 1 in flight"). For kbtp LOAD/STORE and Redis GET/SET of
# the same size, on both sides: CPU time per request from `perf stat -e task-clock` (precise,
# unlike /proc's tick sampling at one wake-up per request), context switches per request, each by
# the difference of a run of N and one of 3N requests (start-up and warm-up cancel out); the p50
# of the 3N run; and how often the server's and the client's threads were last seen on the same
# CPU (sampled), which decides whether the two sides' work adds up or overlaps.
#
#   bench/critical-path.sh [--requests N] [--size 16384] [--op load|store] [--max-inline BYTES]
#
# --max-inline is the kbtp target's Max Inline (default: the block size, as `kbtp bench --spawn`
# uses up to 256 KiB; `kbtp target`'s own default is 8 KiB, under which a STORE above it is pulled
# by RDMA Read). Needs perf (Debian: linux-perf), redis-server and redis-benchmark
# (bench/compare/deps.sh) and a built tree (make build). Loopback only; everything it starts is
# stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

requests=10000
size=16384
op=load
max_inline=""
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) requests=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --max-inline) max_inline=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "critical-path.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$op" in load) redis_op=get ;; store) redis_op=set ;; *) echo "critical-path.sh: --op is load or store, not $op" >&2; exit 2 ;; esac
max_inline=${max_inline:-$size}
for tool in perf redis-server redis-benchmark node; do
  command -v "$tool" >/dev/null || { echo "critical-path.sh: $tool is missing (perf: apt-get install linux-perf; Redis: bench/compare/deps.sh)" >&2; exit 2; }
done
[ -f dist/host/cli.js ] || { echo "critical-path.sh: run make build first" >&2; exit 2; }

. bench/compare/servers.sh # $work, $pids and their clean-up; start_kbtp_target, start_redis

# The thread of process $1 that used the most CPU so far (the target's worker, Redis's main thread).
busiest_thread() {
  local pid=$1 tid best=0 best_tid=$1 ticks
  for tid in $(ls "/proc/$pid/task" 2>/dev/null); do
    ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/task/$tid/stat" 2>/dev/null || echo 0)
    if [ "$ticks" -gt "$best" ]; then best=$ticks; best_tid=$tid; fi
  done
  echo "$best_tid"
}

# Prints "same total" of 400 samples of the CPU that threads $1 and $2 last ran on.
same_cpu() {
  local same=0 total=0 a b
  for _ in $(seq 400); do
    a=$(awk '{ print $39 }' "/proc/$1/stat" 2>/dev/null) || break
    b=$(awk '{ print $39 }' "/proc/$2/stat" 2>/dev/null) || break
    total=$((total + 1))
    [ "$a" = "$b" ] && same=$((same + 1))
  done
  echo "$same $total"
}

# perf stat -x output -> "task_clock_ms context_switches".
stat_of() { awk -F, '$3 == "task-clock" { t = $1 } $3 == "context-switches" { c = $1 } END { print t, c }' "$1"; }

# measure TAG SERVER_PID CLIENT_COMMAND...: the client gets the request count appended.
measure() {
  local tag=$1 server=$2; shift 2
  "$@" "$requests" >/dev/null 2>"$work/$tag.err" # warm-up: the JIT settles before anything is counted
  local n
  for n in 1 3; do
    perf stat -x, -e task-clock,context-switches -p "$server" -o "$work/$tag$n.server" 2>/dev/null &
    local watcher=$!
    sleep 0.3
    perf stat -x, -e task-clock,context-switches -o "$work/$tag$n.client" "$@" "$((n * requests))" >"$work/$tag$n.out" 2>"$work/$tag.err" &
    local client=$!
    if [ "$n" = 3 ]; then
      sleep 1
      local client_thread
      client_thread=$(pgrep -P "$client" | head -1 || true)
      [ -n "$client_thread" ] && same_cpu "$(busiest_thread "$server")" "$(busiest_thread "$client_thread")" >"$work/$tag.same"
    fi
    wait "$client"
    kill -INT "$watcher"; wait "$watcher" 2>/dev/null || true
  done
}

report() {
  local name=$1 tag=$2 p50=$3
  read -r s1 w1 < <(stat_of "$work/${tag}1.server"); read -r s3 w3 < <(stat_of "$work/${tag}3.server")
  read -r c1 v1 < <(stat_of "$work/${tag}1.client"); read -r c3 v3 < <(stat_of "$work/${tag}3.client")
  local same="? ?"
  [ -f "$work/$tag.same" ] && same=$(cat "$work/$tag.same")
  awk -v name="$name" -v n="$((2 * requests))" -v s1="$s1" -v s3="$s3" -v c1="$c1" -v c3="$c3" \
    -v ws="$((w3 - w1))" -v wc="$((v3 - v1))" -v p50="$p50" -v same="$same" 'BEGIN {
      split(same, x, " "); s = s3 - s1; c = c3 - c1
      printf "== %s\n  CPU per request (task-clock): server %.1f us, client %.1f us, both %.1f us\n", name, s * 1000 / n, c * 1000 / n, (s + c) * 1000 / n
      printf "  context switches per request: server %.2f, client %.2f\n", ws / n, wc / n
      printf "  p50 %s us; server and client threads on the same CPU in %s of %s samples\n", p50, x[1], x[2]
    }'
}

# --- kbtp -------------------------------------------------------------------------------------
cat >"$work/target.json" <<EOF
{"listen": "127.0.0.1:0", "workers": 1, "pool": {"blockSize": $size, "blockCount": 32, "maxInline": $max_inline}, "session": {"credits": 8, "maxSessions": 8}}
EOF
start_kbtp_target critical-path.sh --config "$work/target.json"
measure kbtp "$target" node dist/host/cli.js bench --target "127.0.0.1:$port" --sizes "$size" --mix "$op" --sessions 1 --in-flight 1 --json --quiet --count
kbtp_p50=$(tr -d ' \n' <"$work/kbtp3.out" | sed 's/.*"p50Us":\([0-9.]*\).*/\1/')
report "kbtp ${op^^} of $size octets (kbtp target, 1 worker, Max Inline $max_inline; kbtp bench), 1 x 1 in flight, difference of $requests and $((3 * requests)) requests" kbtp "$kbtp_p50"
echo "  load: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- Redis ------------------------------------------------------------------------------------
start_redis "$size"
measure redis "$redis" redis-benchmark -h 127.0.0.1 -p "$rport" -t "$redis_op" -d "$size" -c 1 --csv -n
redis_p50=$(awk -F, 'NR == 2 { gsub(/"/, "", $5); print $5 * 1000 }' "$work/redis3.out")
report "Redis ${redis_op^^} of $size octets (redis-server; redis-benchmark), 1 x 1 in flight, difference of $requests and $((3 * requests)) requests" redis "$redis_p50"
echo "  load: $(cut -d' ' -f1-3 /proc/loadavg)"
