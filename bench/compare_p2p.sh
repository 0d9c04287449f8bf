#!/usr/bin/env bash
# bench/compare_p2p.sh — remora against the tools people trust, on the same loopback
# path, in one run:
#   bandwidth: iperf3 -l 1M and -l 16M (3.12 refuses > 1M: then the 1M run stands in)
#              with -P = remora's data streams, against
#              `remora bench p2p --mode bw` at 1M and 16M (target: ratio >= 1.0);
#   latency:   sockperf ping-pong with both ends pinned to CPU 0 (one-way = RTT/2),
#              against `remora bench p2p --mode lat` at 8 B, not pinned
#              (target: ratio <= 1.0). sockperf's smallest message is 14 B (its own
#              header); remora's 8 B payload travels with a 16 B frame header.
# Prints a table (metric, reference, remora, ratio, target) and, with --json, writes
# every number and the configuration used.
#
# usage: bench/compare_p2p.sh [--remora PATH] [--streams K] [--secs N] [--json FILE] [--strict]
#   --remora   the remora binary (default: $REMORA_BIN or build/tools/remora)
#   --streams  data streams for remora and -P for iperf3 (default: $REMORA_STREAMS or
#              what the library is configured with)
#   --secs     seconds per iperf3 / sockperf run (default 10)
#   --strict   exit 1 when a target is missed
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
remora=${REMORA_BIN:-$here/../build/tools/remora}
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
    --json) json_out=$2; shift 2 ;;
    --strict) strict=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
echo "compare_p2p: remora bench p2p --mode bw --sizes 1M,16M" >&2
"$remora" bench p2p --mode bw --sizes 1M,16M --json "$tmp/remora-bw.json" >"$tmp/remora-bw.txt" ||
  die "remora bench p2p bw failed: $(cat "$tmp/remora-bw.txt")"
echo "compare_p2p: remora bench p2p --mode lat --sizes 8" >&2
"$remora" bench p2p --mode lat --sizes 8 --json "$tmp/remora-lat.json" >"$tmp/remora-lat.txt" ||
  die "remora bench p2p lat failed: $(cat "$tmp/remora-lat.txt")"

# --- table and JSON -----------------------------------------------------------------
set +e
python3 - "$tmp" "$streams" "$secs" "$json_out" <<'PY'
import json, re, sys

tmp, streams, secs, json_out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

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

bw = json.load(open(f"{tmp}/remora-bw.json"))
lat = json.load(open(f"{tmp}/remora-lat.json"))
remora_bw = {r["size"]: r["bandwidth_MBps"] for r in bw["results"]}
remora_lat = lat["results"][0]["latency_us"]
ref_bw = {"1M": iperf("1M"), "16M": iperf("16M")}
ref_lat = sockperf()

rows = []
def row(metric, reference, ref, mine, target):
    ratio = mine / ref if ref else None
    met = None
    if ratio is not None and target:
        met = ratio >= target[1] if target[0] == ">=" else ratio <= target[1]
    rows.append({"metric": metric, "reference": reference, "reference_value": ref, "remora": mine,
                 "ratio": ratio, "target": f"{target[0]} {target[1]}" if target else None, "met": met})

for len_, size in (("1M", 1 << 20), ("16M", 16 << 20)):
    mbps, used, _ = ref_bw[len_]
    row(f"bandwidth {len_} (MB/s)", f"iperf3 -l {used} -P {streams}", mbps, remora_bw[size], (">=", 1.0))
row("latency 8 B one-way avg (us)", "sockperf pp -m 14, CPU 0", ref_lat["avg"], remora_lat["avg"], ("<=", 1.0))
row("latency 8 B one-way p50 (us)", "sockperf pp -m 14, CPU 0", ref_lat["p50"], remora_lat["p50"], None)
row("latency 8 B one-way p99 (us)", "sockperf pp -m 14, CPU 0", ref_lat["p99"], remora_lat["p99"], None)

cfg = bw["config"]
print(f"# remora vs reference tools on loopback: {cfg['streams']} data streams, chunk {cfg['chunk_bytes']} B, "
      f"eager limit {cfg['eager_limit']} B, spin {cfg['spin_us']} us; references run {secs} s each")
print(f"{'metric':<30} {'reference':<28} {'ref':>10} {'remora':>10} {'ratio':>7}  {'target':<7} {'':4}")
fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'-':>10}"
for r in rows:
    ratio = f"{r['ratio']:7.3f}" if r["ratio"] is not None else f"{'-':>7}"
    verdict = "" if r["met"] is None else ("met" if r["met"] else "MISS")
    print(f"{r['metric']:<30} {r['reference']:<28} {fmt(r['reference_value'])} {fmt(r['remora'])} {ratio}  "
          f"{r['target'] or '-':<7} {verdict}")

if json_out:
    out = {"tool": "bench/compare_p2p.sh", "streams": streams, "reference_seconds": secs, "rows": rows,
           "iperf3": {k: {"MBps": v[0], "l": v[1], "end": v[2]["end"]} for k, v in ref_bw.items()}, "sockperf_one_way_us": ref_lat, "sockperf_message_bytes": 14, "remora_bw": bw, "remora_lat": lat}
    with open(json_out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
missed = any(r["met"] is False for r in rows)
sys.exit(3 if missed else 0)
PY
rc=$?
set -e
if ((rc == 3)); then
  ((strict)) && exit 1
  exit 0
fi
exit "$rc"
