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
# usage: bench/compare_p2p.sh [--remora PATH] [--streams K] [--repeat N] [--secs S] [--window W]
#                             [--bw-sizes LIST] [--lat-sizes LIST] [--json FILE] [--strict]
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
#   --bw-sizes   message sizes of the bandwidth rows, each beside iperf3 -l <size>
#                (default 1M,16M: the sizes with the targets)
#   --lat-sizes  message sizes of the latency rows, each beside sockperf -m <size> (at
#                least 14, at most 65507; default 8, the size with the target)
#   --json     write every number here (bench/plot.py draws it)
#   --strict   exit 1 when a target is missed (by the median ratio)
# On a terminal a progress line on stderr says what runs and about how long is left.
# Exit status: 0 when every run worked, 1 with --strict and a missed target, 2 when a
# reference tool failed, 4 when a remora run failed (its row says FAILED).
# shellcheck disable=SC2317  # run_reference and run_remora are called by name, from compare_rounds
set -euo pipefail

prog=compare_p2p
# shellcheck source-path=SCRIPTDIR source=lib_compare.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib_compare.sh"
compare_parse_args "$@"
compare_setup

# --- one run of each kind; $1 = metric (bw-<size>, lat-<size>), $2 = round ---------
run_reference() {
  if [[ $1 == lat-* ]]; then run_sockperf "${1#lat-}" "$2"; else run_iperf3 "${1#bw-}" "$2"; fi
}

bw_iters() {  # $1 = message size in bytes: ~0.8 GiB per reference second, as 8 GiB per 10 s
  local bytes=$((8 * 1024 * 1024 * 1024 * per / 10))
  echo $(((bytes + $1 * window - 1) / ($1 * window)))
}
run_remora() {
  local metric=$1 r=$2 args
  case $metric in
    bw-*) args=(--mode bw --sizes "${metric#bw-}" --window "$window" --iters "$(bw_iters "$(size_bytes "${metric#bw-}")")") ;;
    lat-*) args=(--mode lat --sizes "${metric#lat-}" --iters $((5000 * per)) --warmup 1000) ;;
  esac
  run_remora_bench p2p "$metric-r$r" "$r" "${args[@]}"
}

compare_rounds "${compare_metrics[@]}"

# --- table and JSON -----------------------------------------------------------------
set +e
PYTHONPATH=$lib_dir python3 - "$tmp" "$streams" "$per" "$repeat" "$json_out" "$window" "$bw_sizes" "$lat_sizes" <<'PY'
import sys
from lib_compare import Comparison, size_bytes, size_label

c = Comparison.from_argv([f"bw-{x}" for x in sys.argv[7].split(",") if x] +
                         [f"lat-{x}" for x in sys.argv[8].split(",") if x])
rounds, runs, ref_bw, ref_lat, streams = c.rounds, c.runs, c.ref_bw, c.ref_lat, c.streams

# The issue's targets: bandwidth at 1M and 16M, latency at 8 B; other sizes are shown
# without one.
for len_ in c.bw_sizes:
    mines = [runs[r][f"bw-{len_}"]["results"][0]["bandwidth_MBps"] if runs[r][f"bw-{len_}"] else None for r in rounds]
    c.row(f"bandwidth {len_} (MB/s)", f"iperf3 -l {c.iperf_len(len_)} -P {streams}",
          [ref_bw[r][len_][0] for r in rounds], mines, (">=", 1.0) if len_ in ("1M", "16M") else None,
          quantity="bandwidth_MBps", size=size_bytes(len_), series="p2p", reference_kind="iperf3")
for size in c.lat_sizes:
    lat = {r: runs[r][f"lat-{size}"]["results"][0]["latency_us"] if runs[r][f"lat-{size}"] else {} for r in rounds}
    for stat in ("avg", "p50", "p99"):
        target = ("<=", 1.0) if stat == "avg" and size_bytes(size) == 8 else None
        c.row(f"latency {size_label(size)} one-way {stat} (us)", f"sockperf pp -m {max(14, size_bytes(size))}, CPU 0",
              [ref_lat[r][size][stat] for r in rounds], [lat[r].get(stat) for r in rounds], target,
              quantity="latency_us", size=size_bytes(size), series="p2p", stat=stat,
              reference_kind="sockperf one-way")

sys.exit(c.report("bench/compare_p2p.sh", "remora vs reference tools"))
PY
compare_finish $?
