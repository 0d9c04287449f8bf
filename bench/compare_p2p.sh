#!/usr/bin/env bash
# bench/compare_p2p.sh — remora against the tools people trust, on the same loopback
# path, interleaved over several rounds:
#   bandwidth: iperf3 -l 1M and -l 16M (3.12 refuses > 1M: then iperf3 -l <remora's chunk
#              size> stands in — a 16M message is written to the sockets in chunk-sized
#              writes, so that is the like-for-like write size the issue asks for)
#              with -P = remora's data streams, against
#              `remora bench p2p --mode bw` at 1M and 16M (target: ratio >= 1.0);
#   latency:   sockperf ping-pong with both ends pinned to CPU 0 (one-way = RTT/2),
#              against `remora bench p2p --mode lat` at 8 B, not pinned (target:
#              ratio <= 1.0). sockperf's smallest message is 14 B (its own header);
#              remora's 8 B payload travels with a 16 B frame header.
# The host is noisy (the same run varies up to 2x back to back), so one reference run
# and one remora run say little. Each of N rounds runs, per metric, the reference and
# remora back to back, the reference first in odd rounds and remora first in even ones
# (ABBA); a round's ratio compares two runs that saw the same host. The table holds the
# medians (reference, remora, and the median per-round ratio, which is what the target
# is checked against), then the per-round ratios. --json writes every number.
#
# usage: bench/compare_p2p.sh [--remora PATH] [--streams K] [--repeat N] [--secs S] [--window W] [--json FILE] [--strict]
#   --remora   the remora binary (default: $REMORA_BIN, else build/release/tools/remora,
#              else build/tools/remora)
#   --streams  data streams for remora and -P for iperf3 (default: $REMORA_STREAMS or
#              what the library is configured with)
#   --repeat   rounds (default 3)
#   --secs     reference seconds per metric, split over the rounds: each iperf3 /
#              sockperf run lasts max(1, round(S/N)) s (default 18: 6 s at N = 3);
#              remora's runs are sized to match (~0.8 GiB per reference second for
#              bandwidth, 5000 round trips per second for latency)
#   --window   remora bw messages in flight per window (default 64, as osu_bw)
#   --strict   exit 1 when a target is missed (by the median ratio)
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
repeat=3
secs=18
json_out=""
strict=0

die() { echo "compare_p2p: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --remora) remora=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    --strict) strict=1; shift ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (try --help)" ;;
  esac
done
for v in repeat secs window; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--$v wants a positive integer, not '${!v}'"
done
per=$(((secs + repeat / 2) / repeat))  # seconds per reference run, rounded
((per >= 1)) || per=1

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

if [[ -z $streams ]]; then
  streams=$("$remora" version --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["streams"])')
fi
export REMORA_STREAMS=$streams
chunk_bytes=$("$remora" version --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["chunk_bytes"])')
fallback_len=$((chunk_bytes / 1024))K
echo "compare_p2p: loopback 127.0.0.1, $streams streams, $repeat rounds, ${per}s per reference run" >&2

# --- reference servers: started once, idle (0% CPU) while remora runs --------------
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

# --- one run of each kind; $1 = metric (bw-1M, bw-16M, lat), $2 = round -------------
iperf_16m_refused=0
run_reference() {
  local metric=$1 r=$2 len out
  if [[ $metric == lat ]]; then
    echo "compare_p2p: [round $r] sockperf pp -m 14 -t $per (both ends on CPU 0)" >&2
    taskset -c 0 sockperf pp --tcp -i 127.0.0.1 -p "$sockperf_port" -m 14 -t "$per" >"$tmp/sockperf-r$r.log" 2>&1 ||
      die "sockperf pp failed: $(tail -5 "$tmp/sockperf-r$r.log")"
    return
  fi
  len=${metric#bw-}
  out=$tmp/iperf3-$len-r$r.json
  ((iperf_16m_refused)) && [[ $len == 16M ]] && len=$fallback_len
  echo "compare_p2p: [round $r] iperf3 -l $len -P $streams -t $per" >&2
  if ! iperf3 -c 127.0.0.1 -p "$iperf_port" -l "$len" -P "$streams" -t "$per" -J >"$out" 2>"$out.err"; then
    # iperf3 3.12 refuses TCP blocks over 1 MiB. remora writes a 16M message to its
    # sockets in chunk-sized writes, so iperf3 with -l <chunk size> is the like-for-like
    # reference; it runs right here so it pairs with remora's 16M run.
    if grep -q "block size too large" "$out.err" && [[ $len != "$fallback_len" ]]; then
      echo "compare_p2p: iperf3 refuses -l $len ($(grep -o 'maximum = [0-9]* bytes' "$out.err")); using -l $fallback_len (remora's chunk size) for that row" >&2
      iperf_16m_refused=1
      echo "$fallback_len" >"$tmp/iperf3-refused"
      run_reference "$metric" "$r"
      return
    fi
    die "iperf3 -l $len failed: $(head -c 500 "$out.err") $(head -c 500 "$out")"
  fi
}

# remora spawns its own follower on loopback (not pinned). One run per row and round, so
# a failing run costs only itself. The tool bounds every wait (60 s), so a stuck
# transfer ends as an error, not a hang.
bw_iters() {  # $1 = message size in MiB: ~0.8 GiB per reference second, as 8 GiB per 10 s
  local mib=$((8 * 1024 * per / 10))
  echo $(((mib + $1 * window - 1) / ($1 * window)))
}
run_remora() {
  local metric=$1 r=$2 args
  case $metric in
    bw-1M) args=(--mode bw --sizes 1M --window "$window" --iters "$(bw_iters 1)") ;;
    bw-16M) args=(--mode bw --sizes 16M --window "$window" --iters "$(bw_iters 16)") ;;
    lat) args=(--mode lat --sizes 8 --iters $((5000 * per)) --warmup 1000) ;;
  esac
  local name=$metric-r$r
  echo "compare_p2p: [round $r] remora bench p2p ${args[*]}" >&2
  if ! "$remora" bench p2p "${args[@]}" --json "$tmp/remora-$name.json" >"$tmp/remora-$name.txt" 2>&1; then
    rm -f "$tmp/remora-$name.json"
    echo "compare_p2p: remora bench p2p ${args[*]} FAILED: $(tail -3 "$tmp/remora-$name.txt")" >&2
    tail -3 "$tmp/remora-$name.txt" >"$tmp/remora-$name.err"
  fi
}

# --- rounds: per metric the two runs back to back, ABBA across rounds ---------------
for ((r = 1; r <= repeat; r++)); do
  if ((r % 2)); then order=(reference remora); else order=(remora reference); fi
  echo "${order[0]}" >"$tmp/first-r$r"
  for metric in bw-1M bw-16M lat; do
    for who in "${order[@]}"; do
      "run_$who" "$metric" "$r"
    done
  done
done

# --- table and JSON -----------------------------------------------------------------
set +e
python3 - "$tmp" "$streams" "$per" "$repeat" "$json_out" "$window" <<'PY'
import json, os, re, statistics, sys

tmp, streams, per, repeat, json_out, window = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                                int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
rounds = range(1, repeat + 1)
refused = open(f"{tmp}/iperf3-refused").read().strip() if os.path.exists(f"{tmp}/iperf3-refused") else None

def iperf(len_, r):
    """(MB/s (10^6 bytes, as OSU), the whole iperf3 JSON) of round r."""
    j = json.load(open(f"{tmp}/iperf3-{len_}-r{r}.json"))
    if "error" in j:
        raise SystemExit(f"iperf3 -l {len_} (round {r}): {j['error']}")
    return j["end"]["sum_received"]["bits_per_second"] / 8 / 1e6, j

def sockperf(r):
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(f"{tmp}/sockperf-r{r}.log").read())
    avg = re.search(r"avg-latency=([0-9.]+)", text)
    if not avg:
        raise SystemExit(f"could not find avg-latency in sockperf's output (round {r}):\n" + text[-1000:])
    pct = {float(p): float(v) for p, v in re.findall(r"percentile\s+([0-9.]+)\s*=\s*([0-9.]+)", text)}
    return {"avg": float(avg.group(1)), "p50": pct.get(50.0), "p99": pct.get(99.0)}

def remora(name):
    """remora's JSON for one run, or None when it failed (its error is kept)."""
    path = f"{tmp}/remora-{name}.json"
    return json.load(open(path)) if os.path.exists(path) else None

def remora_error(name):
    path = f"{tmp}/remora-{name}.err"
    return open(path).read().strip() if os.path.exists(path) else None

metrics = ("bw-1M", "bw-16M", "lat")
first = {r: open(f"{tmp}/first-r{r}").read().strip() for r in rounds}
runs = {r: {m: remora(f"{m}-r{r}") for m in metrics} for r in rounds}
errors = {f"{m} round {r}": remora_error(f"{m}-r{r}") for r in rounds for m in metrics if runs[r][m] is None}
ref_bw = {r: {len_: iperf(len_, r) for len_ in ("1M", "16M")} for r in rounds}
ref_lat = {r: sockperf(r) for r in rounds}

median = lambda xs: statistics.median(xs) if xs else None
rows = []
def row(metric, reference, refs, mines, target):
    """refs, mines: per round (mine None where remora failed)."""
    per_round = []
    for r, ref, mine in zip(rounds, refs, mines):
        ratio = mine / ref if ref and mine is not None else None
        per_round.append({"round": r, "first": first[r], "reference_value": ref, "remora": mine, "ratio": ratio})
    ratios = [x["ratio"] for x in per_round if x["ratio"] is not None]
    ratio = median(ratios)
    met = None
    if ratio is not None and target:
        met = ratio >= target[1] if target[0] == ">=" else ratio <= target[1]
    failed = sum(m is None for m in mines)
    rows.append({"metric": metric, "reference": reference,
                 "reference_value": median([v for v in refs if v is not None]),
                 "remora": median([v for v in mines if v is not None]),
                 "ratio": ratio, "target": f"{target[0]} {target[1]}" if target else None, "met": met,
                 "failed": failed == len(mines), "failed_rounds": failed, "rounds": per_round})

for len_ in ("1M", "16M"):
    used = refused if len_ == "16M" and refused else len_
    mines = [runs[r][f"bw-{len_}"]["results"][0]["bandwidth_MBps"] if runs[r][f"bw-{len_}"] else None for r in rounds]
    row(f"bandwidth {len_} (MB/s)", f"iperf3 -l {used} -P {streams}", [ref_bw[r][len_][0] for r in rounds], mines,
        (">=", 1.0))
lat = {r: runs[r]["lat"]["results"][0]["latency_us"] if runs[r]["lat"] else {} for r in rounds}
for stat, target in (("avg", ("<=", 1.0)), ("p50", None), ("p99", None)):
    row(f"latency 8 B one-way {stat} (us)", "sockperf pp -m 14, CPU 0", [ref_lat[r][stat] for r in rounds],
        [lat[r].get(stat) for r in rounds], target)

cfg = next((run["config"] for r in rounds for run in runs[r].values() if run), {})
print(f"# remora vs reference tools on loopback: {cfg.get('streams', streams)} data streams, "
      f"chunk {cfg.get('chunk_bytes', '?')} B, eager limit {cfg.get('eager_limit', '?')} B, "
      f"spin {cfg.get('spin_us', '?')} us, bw window {window}")
print(f"# {repeat} round{'s' if repeat != 1 else ''}, reference runs {per} s each; per metric the reference and remora ran back to back, "
      f"reference first in odd rounds, remora first in even ones")
print(f"# ref, remora: medians over the rounds; ratio: median of the per-round ratios (checked against the target)")
print(f"{'metric':<30} {'reference':<28} {'ref':>10} {'remora':>10} {'ratio':>7}  {'target':<7} {'':4}")
fmt = lambda v: f"{v:10.2f}" if v is not None else f"{'-':>10}"
for r in rows:
    ratio = f"{r['ratio']:7.3f}" if r["ratio"] is not None else f"{'-':>7}"
    verdict = "FAILED" if r["failed"] else "" if r["met"] is None else ("met" if r["met"] else "MISS")
    if r["failed_rounds"] and not r["failed"]:
        verdict += f" ({r['failed_rounds']}/{repeat} rounds FAILED)"
    print(f"{r['metric']:<30} {r['reference']:<28} {fmt(r['reference_value'])} {fmt(r['remora'])} {ratio}  "
          f"{r['target'] or '-':<7} {verdict}".rstrip())
print(f"# per-round ratios (round: R = reference ran first, r = remora ran first)")
for r in rows:
    cells = "  ".join(f"{x['round']}{'R' if x['first'] == 'reference' else 'r'} "
                      + (f"{x['ratio']:.3f}" if x["ratio"] is not None else "FAILED") for x in r["rounds"])
    print(f"{r['metric']:<30} {cells}")

if json_out:
    out = {"tool": "bench/compare_p2p.sh", "streams": streams, "repeat": repeat, "reference_seconds": per,
           "window": window, "iperf3_16M_row_l": refused, "sockperf_message_bytes": 14,
           "rows": rows, "remora_errors": errors,
           "rounds": [{"round": r, "first": first[r],
                       "iperf3": {k: {"MBps": v[0], "l": refused if k == "16M" and refused else k, "end": v[1]["end"]}
                                  for k, v in ref_bw[r].items()},
                       "sockperf_one_way_us": ref_lat[r], "remora": runs[r]} for r in rounds]}
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
