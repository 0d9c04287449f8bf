#!/usr/bin/env bash
# bench/compare_rma.sh — remora's one-sided operations against the tools people trust,
# on the same loopback path, interleaved over several rounds (as compare_p2p.sh):
#   bandwidth: iperf3 -l 1M and -l 16M (3.12 refuses > 1M: then iperf3 -l <remora's chunk
#              size> stands in, as in compare_p2p.sh) with -P = remora's data streams,
#              against `remora bench rma --mode put_bw` and `--mode get_bw` at 1M and
#              16M (target: ratio >= 1.0);
#   latency:   sockperf ping-pong with both ends pinned to CPU 0, against `remora bench
#              rma --mode put_lat` at 8 B (one-way = round trip / 2, like sockperf's;
#              target: ratio <= 1.5) and `--mode get_lat` at 8 B. A get is a whole round
#              trip (request out, data back); issue 3's target compares it with sockperf's
#              one-way figure anyway (ratio <= 1.5), and an informational row compares it
#              with sockperf's round trip (2x one-way). remora is not pinned.
# Each round runs, per metric, the reference once and remora's put and get runs beside
# it: reference, put, get in odd rounds; get, put, reference in even ones (ABBA). The
# table holds the medians and the median per-round ratio (what the target is checked
# against), then the per-round ratios. --json writes every number.
#
# usage: bench/compare_rma.sh [--remora PATH] [--streams K] [--repeat N] [--secs S] [--window W]
#                             [--bw-sizes LIST] [--lat-sizes LIST] [--json FILE] [--strict]
#   --remora   the remora binary (default: $REMORA_BIN, else build/release/tools/remora,
#              else build/tools/remora)
#   --streams  data streams for remora and -P for iperf3 (default: $REMORA_STREAMS or
#              what the library is configured with)
#   --repeat   rounds (default 3)
#   --secs     reference seconds per metric, split over the rounds: each iperf3 /
#              sockperf run lasts max(1, round(S/N)) s (default 18: 6 s at N = 3);
#              each remora run times as long (--duration), after its warm-up
#   --window   remora put_bw/get_bw operations in flight per window (default 64)
#   --bw-sizes   sizes of the bandwidth rows, each beside iperf3 -l <size> (default
#                1M,16M: the sizes with the targets)
#   --lat-sizes  sizes of the latency rows, each beside sockperf -m <size> (at least 14,
#                at most 65507; default 8, the size with the targets)
#   --json     write every number here (bench/plot.py draws it)
#   --strict   exit 1 when a target is missed (by the median ratio)
# On a terminal a progress line on stderr says what runs and about how long is left.
# Exit status: 0 when every run worked, 1 with --strict and a missed target, 2 when a
# reference tool failed, 4 when a remora run failed (its row says FAILED).
# shellcheck disable=SC2317  # run_reference and run_remora are called by name, from compare_rounds
set -euo pipefail

prog=compare_rma
remora_runs_per_metric=2  # a put and a get
# shellcheck source-path=SCRIPTDIR source=lib_compare.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib_compare.sh"
compare_parse_args "$@"
compare_setup

# --- one run of each kind; $1 = metric (bw-<size>, lat-<size>), $2 = round ---------
run_reference() {
  if [[ $1 == lat-* ]]; then run_sockperf "${1#lat-}" "$2"; else run_iperf3 "${1#bw-}" "$2"; fi
}

# remora's two runs of a metric, put then get in odd rounds, get then put in even ones.
run_remora() {
  local metric=$1 r=$2 op ops=(put get)
  ((r % 2)) || ops=(get put)
  for op in "${ops[@]}"; do
    case $metric in
      bw-*) run_remora_bench rma "${op}_bw-${metric#bw-}-r$r" "$r" --mode "${op}_bw" --sizes "${metric#bw-}" \
                              --window "$window" --duration "$per" ;;
      lat-*) run_remora_bench rma "${op}_lat-${metric#lat-}-r$r" "$r" --mode "${op}_lat" --sizes "${metric#lat-}" \
                              --duration "$per" --warmup 1000 ;;
    esac
  done
}

compare_rounds "${compare_metrics[@]}"

# --- table and JSON -----------------------------------------------------------------
set +e
PYTHONPATH=$lib_dir python3 - "$tmp" "$streams" "$per" "$repeat" "$json_out" "$window" "$bw_sizes" "$lat_sizes" <<'PY'
import sys
from lib_compare import Comparison, size_bytes, size_label

bw_sizes = [x for x in sys.argv[7].split(",") if x]
lat_sizes = [x for x in sys.argv[8].split(",") if x]
c = Comparison.from_argv([f"{op}_bw-{x}" for x in bw_sizes for op in ("put", "get")] +
                         [f"{op}_lat-{x}" for x in lat_sizes for op in ("put", "get")])
rounds, runs, ref_bw, ref_lat, streams = c.rounds, c.runs, c.ref_bw, c.ref_lat, c.streams

# The issue's targets: bandwidth at 1M and 16M, latency at 8 B; other sizes are shown
# without one.
result = lambda r, m: runs[r][m]["results"][0] if runs[r][m] else None
for len_ in bw_sizes:
    for op in ("put", "get"):
        mines = [result(r, f"{op}_bw-{len_}")["bandwidth_MBps"] if result(r, f"{op}_bw-{len_}") else None
                 for r in rounds]
        c.row(f"bandwidth {op} {len_} (MB/s)", f"iperf3 -l {c.iperf_len(len_)} -P {streams}",
              [ref_bw[r][len_][0] for r in rounds], mines, (">=", 1.0) if len_ in ("1M", "16M") else None,
              quantity="bandwidth_MBps", size=size_bytes(len_), series=op, reference_kind="iperf3")
# put_lat is one-way (round trip / 2), like sockperf's figure. A get is a whole round
# trip; issue 3's target still compares it with sockperf's ONE-WAY figure (<= 1.5), and
# an informational row compares it with sockperf's round trip (2x one-way).
for size in lat_sizes:
    m = max(14, size_bytes(size))
    for op, what, reference, kind, scale, target in (
            ("put", "one-way", f"sockperf pp -m {m}, CPU 0", "sockperf one-way", 1, ("<=", 1.5)),
            ("get", "per get", f"sockperf pp -m {m} one-way, CPU 0", "sockperf one-way", 1, ("<=", 1.5)),
            ("get", "per get", f"sockperf pp -m {m} RTT, CPU 0", "sockperf RTT", 2, None)):
        lat = {r: result(r, f"{op}_lat-{size}")["latency_us"] if result(r, f"{op}_lat-{size}") else {} for r in rounds}
        for stat in ("avg", "p50", "p99"):
            refs = [ref_lat[r][size][stat] * scale if ref_lat[r][size][stat] is not None else None for r in rounds]
            c.row(f"latency {op} {size_label(size)} {what} {stat} (us)", reference, refs,
                  [lat[r].get(stat) for r in rounds],
                  target if stat == "avg" and size_bytes(size) == 8 else None,
                  quantity="latency_us", size=size_bytes(size), series=op, stat=stat, reference_kind=kind)

sys.exit(c.report("bench/compare_rma.sh", "remora RMA vs reference tools", (("rma window", "rma_window"),)))
PY
compare_finish $?
