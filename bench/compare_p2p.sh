#!/usr/bin/env bash
# bench/compare_p2p.sh — remora against the tools people trust, on the same loopback
# path, in one run:
#   bandwidth: iperf3 -l 1M and -l 16M (3.12 refuses > 1M: then the 1M run stands in)
#              with -P = remora's data streams, against
#              `remora bench p2p --mode bw` at 1M and 16M, ~8 GiB each (target: ratio >= 1.0);
#   latency:   sockperf ping-pong with both ends pinned to CPU 0 (one-way = RTT/2),
#              against `remora bench p2p --mode lat` at 8 B, 50000 round trips, not pinned
#              (target: ratio <= 1.0). sockperf's smallest message is 14 B (its own
#              header); remora's 8 B payload travels with a 16 B frame header.
# Prints a table (metric, reference, remora, ratio, target) and, with --json, writes
# every number and the configuration used.
#
# usage: bench/compare_p2p.sh [--remora PATH] [--streams K] [--secs N] [--window W] [--json FILE] [--strict]
#   --remora   the remora binary (default: $REMORA_BIN, else build/release/tools/remora,
#              else build/tools/remora)
#   --streams  data streams for remora and -P for iperf3 (default: $REMORA_STREAMS or
#              what the library is configured with)
#   --secs     seconds per iperf3 / sockperf run (default 10)
#   --window   remora bw messages in flight per window (default 64, as osu_bw)
#   --strict   exit 1 when a target is missed
# Exit status: 0 when every run worked, 1 with --strict and a missed target, 2 when a
# reference tool failed, 4 when a remora run failed (its row says FAILED).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
remora=${REMORA_BIN:-}
if [[ -z $remora ]]; then
  remora=$here/../build/release/tools/remora
  [[ -x $remora ]] || remora=$here/../build/tools/remora
fi
window=64
streams=${REMORA_STREAMS:-}
secs=10
json_out=""
strict=0

die() { echo "compare_p2p: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --remora) remora=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    --strict) strict=1; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done

for tool in iperf3 sockperf taskset python3 ss; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done
[[ -x $remora ]] || die "no remora binary at $remora (build it, or pass --remora)"

tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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

stop() {  # stop one background server we started
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

if [[ -z $streams ]]; then
  streams=$("$remora" version --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["streams"])')
fi
export REMORA_STREAMS=$streams
echo "compare_p2p: loopback 127.0.0.1, $streams streams, ${secs}s per reference run" >&2

# --- iperf3 -----------------------------------------------------------------------
port=$(free_port)
iperf3 -s -p "$port" >"$tmp/iperf3-server.log" 2>&1 &
iperf_pid=$!
pids+=("$iperf_pid")
wait_listen "$port" "$iperf_pid"
for len in 1M 16M; do
  echo "compare_p2p: iperf3 -l $len -P $streams -t $secs" >&2
  if ! iperf3 -c 127.0.0.1 -p "$port" -l "$len" -P "$streams" -t "$secs" -J >"$tmp/iperf3-$len.json" 2>"$tmp/iperf3-$len.err"; then
    # iperf3 3.12 refuses TCP blocks over 1 MiB; its rate no longer depends on -l by then,
    # so the 1M run stands in (and the table says so).
    if grep -q "block size too large" "$tmp/iperf3-$len.err" && [[ $len != 1M ]]; then
      echo "compare_p2p: iperf3 refuses -l $len ($(grep -o 'maximum = [0-9]* bytes' "$tmp/iperf3-$len.err")); using -l 1M for that row" >&2
      echo '{"refused": true}' >"$tmp/iperf3-$len.json"
    else
      die "iperf3 -l $len failed: $(head -c 500 "$tmp/iperf3-$len.err") $(head -c 500 "$tmp/iperf3-$len.json")"
    fi
  fi
done
stop "$iperf_pid"

# --- sockperf ---------------------------------------------------------------------
port=$(free_port)
taskset -c 0 sockperf sr --tcp -i 127.0.0.1 -p "$port" >"$tmp/sockperf-server.log" 2>&1 &
sockperf_pid=$!
pids+=("$sockperf_pid")
wait_listen "$port" "$sockperf_pid"
echo "compare_p2p: sockperf pp -m 14 -t $secs (both ends on CPU 0)" >&2
taskset -c 0 sockperf pp --tcp -i 127.0.0.1 -p "$port" -m 14 -t "$secs" >"$tmp/sockperf.log" 2>&1 ||
  die "sockperf pp failed: $(tail -5 "$tmp/sockperf.log")"
stop "$sockperf_pid"

# --- remora (spawns its own follower on loopback; not pinned) ---------------------
# One run per row, so a failing size costs only its own row. The tool bounds every
# wait (60 s), so a stuck transfer ends as an error, not a hang.
run_remora() {
  local name=$1
  shift
  echo "compare_p2p: remora bench p2p $*" >&2
  if ! "$remora" bench p2p "$@" --json "$tmp/remora-$name.json" >"$tmp/remora-$name.txt" 2>&1; then
    rm -f "$tmp/remora-$name.json"
    echo "compare_p2p: remora bench p2p $* FAILED: $(tail -3 "$tmp/remora-$name.txt")" >&2
    tail -3 "$tmp/remora-$name.txt" >"$tmp/remora-$name.err"
  fi
}
# Longer than the tool's defaults, so remora's rows average over seconds like the
# references do: ~8 GiB per bandwidth row, 50000 round trips for latency.
bw_iters() { echo $(((8 * 1024 + $1 * window - 1) / ($1 * window))); }  # $1 = size in MiB
run_remora bw-1M --mode bw --sizes 1M --window "$window" --iters "$(bw_iters 1)"
run_remora bw-16M --mode bw --sizes 16M --window "$window" --iters "$(bw_iters 16)"
run_remora lat --mode lat --sizes 8 --iters 50000 --warmup 1000

# --- table and JSON -----------------------------------------------------------------
set +e
python3 - "$tmp" "$streams" "$secs" "$json_out" "$window" <<'PY'
import json, os, re, sys

tmp, streams, secs, json_out, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])

def iperf(len_):
    """(MB/s (10^6 bytes, as OSU), the -l actually used, the whole iperf3 JSON)."""
    j = json.load(open(f"{tmp}/iperf3-{len_}.json"))
    if j.get("refused"):
        return iperf("1M")
    if "error" in j:
        raise SystemExit(f"iperf3 -l {len_}: {j['error']}")
    return j["end"]["sum_received"]["bits_per_second"] / 8 / 1e6, len_, j

def sockperf():
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(f"{tmp}/sockperf.log").read())
    avg = re.search(r"avg-latency=([0-9.]+)", text)
    if not avg:
        raise SystemExit("could not find avg-latency in sockperf's output:\n" + text[-1000:])
    pct = {float(p): float(v) for p, v in re.findall(r"percentile\s+([0-9.]+)\s*=\s*([0-9.]+)", text)}
    return {"avg": float(avg.group(1)), "p50": pct.get(50.0), "p99": pct.get(99.0)}

def remora(name):
    """remora's JSON for one run, or None when it failed (its error is kept)."""
    path = f"{tmp}/remora-{name}.json"
    return json.load(open(path)) if os.path.exists(path) else None

def remora_error(name):
    path = f"{tmp}/remora-{name}.err"
    return open(path).read().strip() if os.path.exists(path) else None

runs = {name: remora(name) for name in ("bw-1M", "bw-16M", "lat")}
errors = {name: remora_error(name) for name in runs if runs[name] is None}
ref_bw = {"1M": iperf("1M"), "16M": iperf("16M")}
ref_lat = sockperf()

rows = []
def row(metric, reference, ref, mine, target):
    ratio = mine / ref if ref and mine is not None else None
    met = None
    if ratio is not None and target:
        met = ratio >= target[1] if target[0] == ">=" else ratio <= target[1]
    rows.append({"metric": metric, "reference": reference, "reference_value": ref, "remora": mine,
                 "ratio": ratio, "target": f"{target[0]} {target[1]}" if target else None, "met": met,
                 "failed": mine is None})

for len_ in ("1M", "16M"):
    mbps, used, _ = ref_bw[len_]
    run = runs[f"bw-{len_}"]
    mine = run["results"][0]["bandwidth_MBps"] if run else None
    row(f"bandwidth {len_} (MB/s)", f"iperf3 -l {used} -P {streams}", mbps, mine, (">=", 1.0))
lat = runs["lat"]["results"][0]["latency_us"] if runs["lat"] else {}
for stat, target in (("avg", ("<=", 1.0)), ("p50", None), ("p99", None)):
    row(f"latency 8 B one-way {stat} (us)", "sockperf pp -m 14, CPU 0", ref_lat[stat], lat.get(stat), target)

cfg = next((r["config"] for r in runs.values() if r), {})
print(f"# remora vs reference tools on loopback: {cfg.get('streams', streams)} data streams, "
      f"chunk {cfg.get('chunk_bytes', '?')} B, eager limit {cfg.get('eager_limit', '?')} B, "
      f"spin {cfg.get('spin_us', '?')} us, bw window {window}; references run {secs} s each")
print(f"{'metric':<30} {'reference':<28} {'ref':>10} {'remora':>10} {'ratio':>7}  {'target':<7} {'':4}")
fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'-':>10}"
for r in rows:
    ratio = f"{r['ratio']:7.3f}" if r["ratio"] is not None else f"{'-':>7}"
    verdict = "FAILED" if r["failed"] else "" if r["met"] is None else ("met" if r["met"] else "MISS")
    print(f"{r['metric']:<30} {r['reference']:<28} {fmt(r['reference_value'])} {fmt(r['remora'])} {ratio}  "
          f"{r['target'] or '-':<7} {verdict}")

if json_out:
    out = {"tool": "bench/compare_p2p.sh", "streams": streams, "reference_seconds": secs, "window": window,
           "rows": rows, "remora_errors": errors,
           "iperf3": {k: {"MBps": v[0], "l": v[1], "end": v[2]["end"]} for k, v in ref_bw.items()}, "sockperf_one_way_us": ref_lat, "sockperf_message_bytes": 14, "remora": runs}
    with open(json_out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
for name, err in errors.items():
    print(f"# remora {name} FAILED: {err}")
if errors:
    sys.exit(4)
sys.exit(3 if any(r["met"] is False for r in rows) else 0)
PY
rc=$?
set -e
if ((rc == 3)); then
  ((strict)) && exit 1
  exit 0
fi
exit "$rc"
