#!/usr/bin/env bash
# One make compare row's threads, kbtp against Redis: for every thread that works, its busy share
# (CPU time over wall time, 1.0 = a core), CPU per request and voluntary / involuntary context
# switches per request, taken from /proc/PID/task/TID/{schedstat,status} over a window inside the
# run, and the machine's timer interrupts, IPIs and timer / network softirqs per request. Tells a
# row whose cores are full (GB/s set by the busier thread's CPU per request) from one that waits
# (threads idle, switches per request high): docs/BENCH.md, "Session 8".
#
#   bench/compare/threads.sh [--size 16384] [--op load|store] [--sessions 16] [--seconds 4]
#                            [--rounds 1] [--workers 1]
#
# kbtp: `kbtp bench --spawn --workers W --in-flight 1` as make compare runs it (client = the
# bench's main thread, the target's workers are threads of the same process), window = 2 s from
# about 0.5 s into the measured phase (2.7 s after the start; the phase lasts --seconds, at least
# 4, so that the window ends inside it). Redis: redis-server and redis-latency
# (bench/compare/redis-latency.c) with as many clients, window = 2 s from 0.5 s into its run.
# Rounds interleave the two. Requests per second over the window: kbtp bench's figure for its
# phase, redis-latency's for its run. Needs redis-server (bench/compare/deps.sh), a C compiler and
# a built tree (make bench-build); run it under the benchmark lock on a shared machine. Everything
# listens on 127.0.0.1 and is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

size=16384
op=load
sessions=16
seconds=4
rounds=1
workers=1
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --sessions) sessions=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | cut -c3-; exit 0 ;;
    *) echo "threads.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for value in "$size" "$sessions" "$rounds" "$workers"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || { echo "threads.sh: '$value' is not a positive integer" >&2; exit 2; }
done
[[ "$seconds" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v s="$seconds" 'BEGIN { exit !(s >= 4) }' ||
  { echo "threads.sh: --seconds $seconds: at least 4 (the window of 2 s must end inside the phase)" >&2; exit 2; }
. bench/compare/servers.sh # $work, $pids and their clean-up; start_redis, redis_op_for, require_tools
redis_op=$(redis_op_for "$op") || exit 2
require_tools "run bench/compare/deps.sh" redis-server redis-cli redis-benchmark cc node
[ -f dist/host/cli.js ] || { echo "threads.sh: run make bench-build first" >&2; exit 2; }
latency_binary=$(node --input-type=module -e "import('./dist/bench/compare/redis-latency.js').then((m) => console.log(m.buildRedisLatency()))")

# snapshot PID...: one line per thread, "pid/tid comm runtime_ns voluntary involuntary". Bash
# builtins only (a fork per file would stretch the window on a busy machine), and each file read
# whole in one go: a line-by-line `read` seeks back after each line, and /proc regenerates the file
# at the new offset, so a counter that grew by a digit in between shifts the lines read after it.
snapshot() {
  local pid task comm run status voluntary involuntary _
  for pid in "$@"; do
    for task in /proc/"$pid"/task/*; do
      { read -r comm <"$task/comm" && read -r run _ <"$task/schedstat"; } 2>/dev/null || continue
      IFS= read -r -d '' status <"$task/status" 2>/dev/null || true
      voluntary=${status#*$'\n'voluntary_ctxt_switches:}
      involuntary=${status#*$'\n'nonvoluntary_ctxt_switches:}
      voluntary=${voluntary%%$'\n'*}
      involuntary=${involuntary%%$'\n'*}
      voluntary=${voluntary//[[:space:]]/}
      involuntary=${involuntary//[[:space:]]/}
      [[ "$voluntary" =~ ^[0-9]+$ && "$involuntary" =~ ^[0-9]+$ && "$run" =~ ^[0-9]+$ ]] || continue
      echo "$pid/${task##*/} ${comm// /_} $run $voluntary $involuntary"
    done
  done
}

# kernel_events: the machine's local timer interrupts, rescheduling and function-call IPIs and
# HRTIMER / NET_RX softirqs, each summed over the CPUs, as "NAME count" lines. Machine-wide (not
# per process): meaningful under the benchmark lock. A 256 KiB STORE's client paid for TCP pacing
# (BBR's pacing hrtimer, woken from idle) here: docs/notes/2026-12-01/issue-16-session8.md.
kernel_events() {
  local line name sum count
  for file in /proc/interrupts /proc/softirqs; do
    while read -r line; do
      name=${line%%:*}
      case "$name" in LOC|RES|CAL|HRTIMER|NET_RX) ;; *) continue ;; esac
      sum=0
      for count in ${line#*:}; do [[ "$count" =~ ^[0-9]+$ ]] && sum=$((sum + count)); done
      echo "$name $sum"
    done <"$file"
  done
}

# window LABEL RATE_FILE PID...: snapshots now and 2 s later; prints the threads that worked.
window() {
  local label=$1 rate_file=$2; shift 2
  local start end
  snapshot "$@" >"$work/before"
  kernel_events >"$work/events.before"
  start=$(date +%s%N)
  sleep 2
  snapshot "$@" >"$work/after"
  kernel_events >"$work/events.after"
  end=$(date +%s%N)
  echo "$label $((end - start))" >"$work/$rate_file.window"
}

# report LABEL REQUESTS_PER_SECOND: the threads of the last window, per request.
report() {
  local label=$1 rate=$2 elapsed
  elapsed=$(awk '{ print $2 }' "$work/$label.window")
  awk -v rate="$rate" -v ns="$elapsed" -v label="$label" '
    NR == FNR { run[$1] = $3; vol[$1] = $4; inv[$1] = $5; next }
    ($1 in run) {
      busy = ($3 - run[$1]) / ns; requests = rate * ns / 1e9
      total += busy
      if (busy >= 0.01) printf "  %-8s %-14s %-16s busy %5.3f  CPU %7.2f us/req  switches/req voluntary %6.3f involuntary %6.3f\n",
        label, $1, $2, busy, busy * 1e6 / rate, ($4 - vol[$1]) / requests, ($5 - inv[$1]) / requests
    }
    END { printf "  %-8s all threads busy %5.3f of 2 cores at %.0f requests/s\n", label, total, rate }' "$work/before" "$work/after"
  awk -v rate="$rate" -v ns="$elapsed" -v label="$label" '
    NR == FNR { before[$1] = $2; next }
    ($1 in before) { line = line sprintf(" %s %.2f", $1, ($2 - before[$1]) / (rate * ns / 1e9)) }
    END { printf "  %-8s machine per request (interrupts LOC timer, RES/CAL IPIs; softirqs):%s\n", label, line }' "$work/events.before" "$work/events.after"
}

redis_requests=$(awk -v s="$size" -v t="$seconds" 'BEGIN { r = s <= 16384 ? 100000 : s <= 262144 ? 20000 : 6000; print int(r * (t + 1)) }')
for round in $(seq "$rounds"); do
  echo "round $round, $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg): ${op^^} $size octets, $sessions sessions x 1 in flight"
  node dist/host/cli.js bench --spawn --workers "$workers" --sizes "$size" --mix "$op" --sessions "$sessions" \
    --in-flight 1 --duration "$seconds" --json -q >"$work/kbtp.json" &
  bench=$!; pids+=("$bench")
  # The first phase of a spawned target warms up for 2 s (host/bench/run.ts); the window starts about 0.5 s after (target start-up).
  sleep 2.7
  window kbtp kbtp "$bench"
  wait "$bench"
  rate=$(node -e "const r = JSON.parse(require('fs').readFileSync('$work/kbtp.json', 'utf8')); const row = (Array.isArray(r) ? r : r.rows)[0]; console.log(row.bytesPerSec / row.size)")
  report kbtp "$rate"

  start_redis "$size"
  "$latency_binary" --port "$rport" --tests "$redis_op" --size "$size" --clients "$sessions" --requests "$redis_requests" >"$work/redis.out" &
  client=$!; pids+=("$client")
  sleep 0.5
  window redis redis "$redis" "$client"
  wait "$client"
  rate=$(head -1 "$work/redis.out" | awk '{ printf "%.0f", $4 / $6 * 1e9 }')
  report redis "$rate"
  kill "$redis"; wait "$redis" 2>/dev/null || true
done
