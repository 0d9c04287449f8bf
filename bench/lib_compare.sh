# bench/lib_compare.sh — what bench/compare_*.sh share: their common options, the
# reference servers (iperf3, sockperf pinned to CPU 0), one reference run of each kind,
# one remora run, the interleaved (ABBA) rounds and the exit status. Sourced, not run.
#
# A script sets `prog` (its name in messages), defines run_reference and run_remora
# ($1 = metric, $2 = round), then calls, in order:
#   compare_parse_args "$@"   the options every compare script takes (see compare_p2p.sh)
#   compare_setup             checks tools, makes $tmp, reads remora's configuration,
#                             starts the reference servers
#   compare_rounds M...       per round, per metric: run_reference and run_remora back to
#                             back, the reference first in odd rounds (ABBA); the metrics
#                             are bw-<size> for each of $bw_sizes and lat-<size> for each
#                             of $lat_sizes ($compare_metrics lists them)
#   compare_finish RC         maps the table's exit status (see below) to the script's
# and writes its table with python3, importing bench/lib_compare.py (the parsers and
# the table), from "$lib_dir". A script whose run_remora makes more than one remora run
# per metric sets remora_runs_per_metric (for the progress line, bench/lib_progress.sh).

# shellcheck shell=bash disable=SC2034,SC2154  # sourced: its variables belong to the calling script
lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib_progress.sh
source "$lib_dir/lib_progress.sh"
remora_runs_per_metric=${remora_runs_per_metric:-1}

die() { echo "$prog: $*" >&2; exit 2; }

# Options: --remora --streams --repeat --secs --window --bw-sizes --lat-sizes --json
# --strict, -h/--help (the calling script's leading comment block).
compare_parse_args() {
  remora=${REMORA_BIN:-}
  if [[ -z $remora ]]; then
    remora=$lib_dir/../build/release/tools/remora
    [[ -x $remora ]] || remora=$lib_dir/../build/tools/remora
  fi
  window=64
  streams=${REMORA_STREAMS:-}
  repeat=3
  secs=18
  json_out=""
  strict=0
  bw_sizes=1M,16M
  lat_sizes=8
  while (($#)); do
    case $1 in
      --remora) remora=$2; shift 2 ;;
      --streams) streams=$2; shift 2 ;;
      --repeat) repeat=$2; shift 2 ;;
      --secs) secs=$2; shift 2 ;;
      --window) window=$2; shift 2 ;;
      --bw-sizes) bw_sizes=$2; shift 2 ;;
      --lat-sizes) lat_sizes=$2; shift 2 ;;
      --json) json_out=$2; shift 2 ;;
      --strict) strict=1; shift ;;
      -h|--help) awk 'NR > 1 && (!/^#/ || /^# shellcheck/) { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
      *) die "unknown argument '$1' (try --help)" ;;
    esac
  done
  local v
  for v in repeat secs window; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--$v wants a positive integer, not '${!v}'"
  done
  per=$(((secs + repeat / 2) / repeat))  # seconds per reference run, rounded
  ((per >= 1)) || per=1
  compare_metrics=()
  local size
  IFS=, read -ra bw_list <<<"$bw_sizes"
  IFS=, read -ra lat_list <<<"$lat_sizes"
  ((${#bw_list[@]} + ${#lat_list[@]})) || die "--bw-sizes and --lat-sizes are both empty: nothing to measure"
  for size in "${bw_list[@]}"; do
    [[ $(size_bytes "$size") -ge 1 ]] || die "--bw-sizes: '$size' is not a size of at least 1 byte (4K, 1M, 16M ...)"
    compare_metrics+=("bw-$size")
  done
  for size in "${lat_list[@]}"; do
    local bytes
    bytes=$(size_bytes "$size")
    [[ $bytes -ge 1 ]] || die "--lat-sizes: '$size' is not a size of at least 1 byte (8, 4K ...)"
    # sockperf's messages are 14 B (its own header) to 65507 B.
    ((bytes <= 65507)) || die "--lat-sizes: $size is more than sockperf sends in one message (65507 B)"
    compare_metrics+=("lat-$size")
  done
}

# Bytes of a size as remora and iperf3 write it (8, 4K, 1M: powers of 1024); nothing
# when it is not one.
size_bytes() {
  local n=${1%[KkMmGg]} unit=${1: -1}
  [[ $n =~ ^[0-9]+$ ]] || return 0
  case $unit in
    K | k) echo $((n * 1024)) ;;
    M | m) echo $((n * 1024 * 1024)) ;;
    G | g) echo $((n * 1024 * 1024 * 1024)) ;;
    *) [[ $1 =~ ^[0-9]+$ ]] && echo "$1" ;;
  esac
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until something listens on 127.0.0.1:$1 (checked without connecting, so a
# one-shot server is not consumed), while process $2 is alive; at most ~10 s.
wait_listen() {
  local port=$1 pid=$2 i
  for ((i = 0; i < 500; i++)); do
    if ss -Hltn "sport = :$port" | grep -q .; then return 0; fi
    kill -0 "$pid" 2>/dev/null || die "server (pid $pid) exited before listening on port $port"
    sleep 0.02
  done
  die "nothing listens on port $port after 10 s"
}

compare_cleanup() {
  progress_end
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}

remora_config() {  # $1 = a key of `remora version --json`'s config
  "$remora" version --json | python3 -c "import json, sys; print(json.load(sys.stdin)['config']['$1'])"
}

compare_setup() {
  local tool
  for tool in iperf3 sockperf taskset python3 ss; do
    command -v "$tool" >/dev/null || die "$tool is not installed"
  done
  [[ -x $remora ]] || die "no remora binary at $remora (build it, or pass --remora)"

  tmp=$(mktemp -d)
  pids=()
  trap compare_cleanup EXIT
  trap 'exit 130' INT TERM

  [[ -n $streams ]] || streams=$(remora_config streams)
  export REMORA_STREAMS=$streams
  # iperf3 and sockperf measure loopback TCP: remora is measured on that same path, its
  # same-host pulls off (they read the peer's memory with no socket in between; set
  # REMORA_SAME_HOST=auto to see them instead, docs/protocol.md).
  export REMORA_SAME_HOST=${REMORA_SAME_HOST:-off}
  chunk_bytes=$(remora_config chunk_bytes)
  fallback_len=$((chunk_bytes / 1024))K
  echo "$prog: loopback 127.0.0.1, $streams streams, $repeat rounds, ${per}s per reference run," \
    "REMORA_SAME_HOST=$REMORA_SAME_HOST" >&2

  # Reference servers: started once, idle (0% CPU) while remora runs.
  iperf_port=$(free_port)
  iperf3 -s -p "$iperf_port" >"$tmp/iperf3-server.log" 2>&1 &
  iperf_pid=$!
  pids+=("$iperf_pid")
  wait_listen "$iperf_port" "$iperf_pid"

  sockperf_port=$(free_port)
  taskset -c 0 sockperf sr --tcp -i 127.0.0.1 -p "$sockperf_port" >"$tmp/sockperf-server.log" 2>&1 &
  sockperf_pid=$!
  pids+=("$sockperf_pid")
  wait_listen "$sockperf_port" "$sockperf_pid"
}

# sockperf ping-pong, both ends on CPU 0, of max(14, $1) bytes (14 B is its smallest
# message: its own header); $2 = round. Output: $tmp/sockperf-$1-r$2.log.
run_sockperf() {
  local size=$1 r=$2 bytes
  bytes=$(size_bytes "$size")
  ((bytes >= 14)) || bytes=14
  progress_step "$prog: [round $r] sockperf pp -m $bytes -t $per (both ends on CPU 0)"
  taskset -c 0 sockperf pp --tcp -i 127.0.0.1 -p "$sockperf_port" -m "$bytes" -t "$per" \
    >"$tmp/sockperf-$size-r$r.log" 2>&1 || die "sockperf pp failed: $(tail -5 "$tmp/sockperf-$size-r$r.log")"
}

# iperf3 -l $1 -P streams for $per s; $2 = round. Output: $tmp/iperf3-$1-r$2.json, and
# in $tmp/iperf3-l-$1 the -l it ran with when that is not $1 (below).
run_iperf3() {
  local len=$1 r=$2 out
  out=$tmp/iperf3-$1-r$r.json
  [[ -f $tmp/iperf3-l-$1 ]] && len=$(<"$tmp/iperf3-l-$1")
  progress_step "$prog: [round $r] iperf3 -l $len -P $streams -t $per"
  if ! iperf3 -c 127.0.0.1 -p "$iperf_port" -l "$len" -P "$streams" -t "$per" -J >"$out" 2>"$out.err"; then
    # iperf3 3.12 refuses TCP blocks over 1 MiB. remora writes a 16M message to its
    # sockets in chunk-sized writes, so iperf3 with -l <chunk size> is the like-for-like
    # reference; it runs right here so it pairs with remora's run of that size.
    if grep -q "block size too large" "$out.err" && [[ $len != "$fallback_len" ]]; then
      progress_note "$prog: iperf3 refuses -l $len ($(grep -o 'maximum = [0-9]* bytes' "$out.err")); using -l $fallback_len (remora's chunk size) for that row"
      echo "$fallback_len" >"$tmp/iperf3-l-$1"
      progress_done=$((progress_done - 1))  # the same step, again
      run_iperf3 "$1" "$r"
      return
    fi
    die "iperf3 -l $len failed: $(head -c 500 "$out.err") $(head -c 500 "$out")"
  fi
}

# One remora benchmark run: $1 = `remora bench` subcommand, $2 = run name (its files:
# $tmp/remora-$2.{json,txt,err}), $3 = round, the rest = its options. remora spawns its own follower
# on loopback (not pinned). A failing run costs only itself: its error goes to the .err
# file and the table says FAILED. The tool bounds every wait, so a stuck transfer ends
# as an error, not a hang.
run_remora_bench() {
  local sub=$1 name=$2 r=$3
  shift 3
  progress_step "$prog: [round $r] remora bench $sub $*"
  if ! "$remora" bench "$sub" "$@" --json "$tmp/remora-$name.json" >"$tmp/remora-$name.txt" 2>&1; then
    rm -f "$tmp/remora-$name.json"
    progress_note "$prog: remora bench $sub $* FAILED: $(tail -3 "$tmp/remora-$name.txt")"
    tail -3 "$tmp/remora-$name.txt" >"$tmp/remora-$name.err"
  fi
}

# Per round, per metric the two runs back to back, ABBA across rounds. Records who ran
# first in $tmp/first-r<round>.
compare_rounds() {
  local r metric who order
  progress_start $((repeat * $# * (1 + remora_runs_per_metric)))
  for ((r = 1; r <= repeat; r++)); do
    if ((r % 2)); then order=(reference remora); else order=(remora reference); fi
    echo "${order[0]}" >"$tmp/first-r$r"
    for metric in "$@"; do
      for who in "${order[@]}"; do
        "run_$who" "$metric" "$r"
      done
    done
  done
  progress_end
}

# $1 = the table's exit status: 0 all met, 3 a target missed, 4 a remora run failed,
# else the table failed. A missed target fails the script only with --strict.
compare_finish() {
  local rc=$1
  if ((rc == 3)); then
    ((strict)) && exit 1
    exit 0
  fi
  exit "$rc"
}
