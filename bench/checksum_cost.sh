#!/usr/bin/env bash
# bench/checksum_cost.sh — what REMORA_CHECKSUM=crc32c costs (issue 21): `remora bench p2p
# --mode bw` and `remora bench rma --mode put_bw`, each run without and with checksums in
# back-to-back pairs whose order alternates (off/on, on/off, ...), so that load that comes
# and goes on a shared host falls on both alike; prints per size the median bandwidth of
# each and the median of the per-pair ratios (on / off).
#
#   bench/checksum_cost.sh [--remora build/release/tools/remora] [--pairs 4] [--sizes 64K,1M,16M]
#
# On a terminal a progress line on stderr says which run is going and about how long is
# left (bench/lib_progress.sh); a run that fails prints its output and ends the script.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib_progress.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib_progress.sh"

remora=build/release/tools/remora
pairs=4
sizes=64K,1M,16M
while [[ $# -gt 0 ]]; do
  case $1 in
    --remora) remora=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    *) echo "usage: $0 [--remora PATH] [--pairs N] [--sizes LIST]" >&2; exit 2 ;;
  esac
done

out=$(mktemp -d)
trap 'progress_end; rm -rf "${out}"' EXIT

run() {  # bench-name checksum pair-index -> JSON file
  local name=$1 mode=$2 i=$3
  local args=(bench p2p --mode bw)
  [[ ${name} == rma ]] && args=(bench rma --mode put_bw)
  progress_step "checksum_cost: pair $((i + 1)) of ${pairs}: REMORA_CHECKSUM=${mode} remora ${args[*]} --sizes ${sizes}"
  # remora's own progress line would fight this one: its output goes to a file, shown if it fails.
  if ! REMORA_CHECKSUM=${mode} "${remora}" "${args[@]}" --sizes "${sizes}" --json "${out}/${name}-${mode}-${i}.json" \
    >"${out}/run.log" 2>&1; then
    progress_note "checksum_cost: REMORA_CHECKSUM=${mode} remora ${args[*]} failed:"
    cat "${out}/run.log" >&2
    exit 1
  fi
}

progress_start $((2 * 2 * pairs))
for name in p2p rma; do
  for ((i = 0; i < pairs; i++)); do
    if ((i % 2 == 0)); then run "${name}" none "${i}"; run "${name}" crc32c "${i}"
    else run "${name}" crc32c "${i}"; run "${name}" none "${i}"; fi
  done
done
progress_end

python3 - "${out}" "${pairs}" <<'PY'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
def rows(name, mode, i):
    with open(f"{out}/{name}-{mode}-{i}.json") as f:
        return {r["size"]: r["bandwidth_MBps"] for r in json.load(f)["results"]}
for name, title in (("p2p", "bench p2p --mode bw"), ("rma", "bench rma --mode put_bw")):
    print(f"# {title}: median of {pairs} pairs, MB/s")
    print(f"{'size':>10} {'none':>10} {'crc32c':>10} {'ratio':>8}  per-pair ratios")
    off = [rows(name, "none", i) for i in range(pairs)]
    on = [rows(name, "crc32c", i) for i in range(pairs)]
    for size in sorted(off[0]):
        ratios = [on[i][size] / off[i][size] for i in range(pairs)]
        print(f"{size:>10} {statistics.median(o[size] for o in off):>10.1f} "
              f"{statistics.median(o[size] for o in on):>10.1f} {statistics.median(ratios):>8.3f}  "
              + " ".join(f"{r:.2f}" for r in ratios))
PY
