# The scratch folder and the servers of the shell benchmarks, sourced by bench/compare/syscalls.sh
# and bench/critical-path.sh from the repository root: sets $work (a scratch folder) and $pids (the
# processes to stop), both cleaned up on exit, and defines start_kbtp_target, start_redis,
# redis_op_for and require_tools.
work=$(mktemp -d "/tmp/kbtp-$(basename "$0" .sh).XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# start_kbtp_target NAME ARGS...: `kbtp target ARGS...` on a free loopback port; sets $target (its
# pid) and $port. NAME prefixes the error when it does not start.
start_kbtp_target() {
  local name=$1; shift
  node dist/host/cli.js target "$@" >"$work/target.out" 2>&1 &
  target=$!; pids+=("$target")
  local _
  for _ in $(seq 100); do [ -n "$(kbtp_port_of "$work/target.out")" ] && break; sleep 0.1; done
  port=$(kbtp_port_of "$work/target.out")
  [ -n "$port" ] || { cat "$work/target.out" >&2; echo "$name: the target did not start" >&2; exit 1; }
}

kbtp_port_of() { grep -ao 'listening on [0-9.]*:[0-9]*' "$1" | sed 's/.*://'; }

# start_redis SIZE: redis-server on a free loopback port, persistence off, holding one SIZE-octet
# value for GET (redis-benchmark's key); sets $redis (its pid) and $rport.
start_redis() {
  rport=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
  mkdir -p "$work/redis"
  redis-server --bind 127.0.0.1 --port "$rport" --save '' --appendonly no --daemonize no --dir "$work/redis" --logfile '' >/dev/null &
  redis=$!; pids+=("$redis")
  local _
  for _ in $(seq 100); do redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  redis-benchmark -p "$rport" -t set -d "$1" -n 100 -c 1 -q >/dev/null # GET needs the value there
}

# redis_op_for OP: Redis's operation for a kbtp one (load -> get, store -> set); a usage error else.
redis_op_for() {
  case "$1" in
    load) echo get ;;
    store) echo set ;;
    *) echo "$(basename "$0"): --op $1: write load or store" >&2; return 2 ;;
  esac
}

# require_tools HINT TOOL...: a usage error naming the first TOOL not installed, and HINT.
require_tools() {
  local hint=$1 tool; shift
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "$(basename "$0"): $tool is missing; $hint" >&2; exit 2; }
  done
}
