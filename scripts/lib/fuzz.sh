# shellcheck shell=bash
# Sourced by scripts/test.sh (the fuzz step), or run: bash scripts/lib/fuzz.sh [seconds]
#
#   remora_fuzz_run <seconds per target> [build dir]
#
# Runs every libFuzzer target of the fuzz preset (tests/fuzz) for a bounded time, each
# from its checked-in seeds (tests/fuzz/corpus/<target>) with new inputs kept in
# <build dir>/corpus/<target>, prints the executions per target and fails when any
# target finds a crash, a leak, a timeout or a broken invariant. The input that did it
# is left in <build dir>/artifacts/<target>/: fix the library, then keep the input as
# tests/fuzz/corpus/<target>/crash-<what> so that `ctest --preset fuzz` replays it.

remora_fuzz_targets() {
  sed -n 's/^remora_fuzz_target(\([a-z_]*\) .*/\1/p' tests/fuzz/CMakeLists.txt
}

# remora_fuzz_one <target> <seconds> <build dir>: one target's bounded run, its output in
# <build dir>/artifacts/<target>/fuzz.log; exits with the fuzzer's status.
remora_fuzz_one() {
  local t=$1 seconds=$2 build=$3
  mkdir -p "${build}/corpus/${t}" "${build}/artifacts/${t}"
  "${build}/tests/fuzz/${t}" -max_total_time="${seconds}" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="${build}/artifacts/${t}/" \
    "${build}/corpus/${t}" "tests/fuzz/corpus/${t}" >"${build}/artifacts/${t}/fuzz.log" 2>&1
}

# Targets run as many at a time as there are cores (REMORA_FUZZ_PARALLEL overrides): each
# is one process on one core, so this keeps every target's time and halves the step on
# two cores.
remora_fuzz_run() {
  local seconds=${1:-30} build=${2:-build/fuzz} failed=0 t log runs
  local parallel=${REMORA_FUZZ_PARALLEL:-$(nproc)}
  local -a lines=() targets=() pids=()
  mapfile -t targets < <(remora_fuzz_targets)
  local i j
  for ((i = 0; i < ${#targets[@]}; i += parallel)); do
    pids=()
    for ((j = i; j < i + parallel && j < ${#targets[@]}; j++)); do
      echo "---- ${targets[j]}: ${seconds} s"
      remora_fuzz_one "${targets[j]}" "${seconds}" "${build}" &
      pids+=($!)
    done
    for ((j = i; j < i + parallel && j < ${#targets[@]}; j++)); do
      t=${targets[j]}
      log="${build}/artifacts/${t}/fuzz.log"
      if wait "${pids[j - i]}"; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "${log}" | tail -n 1)
        lines+=("$(printf '%-18s ok      %10s executions in %s s' "${t}" "${runs:-?}" "${seconds}")")
      else
        failed=1
        echo "---- ${t} failed:"
        tail -n 40 "${log}"
        lines+=("$(printf '%-18s FAILED  input kept in %s/artifacts/%s/' "${t}" "${build}" "${t}")")
      fi
    done
  done
  echo "---- fuzz summary"
  printf '%s\n' "${lines[@]}"
  return "${failed}"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  cd "$(dirname "${BASH_SOURCE[0]}")/../.."
  remora_fuzz_run "$@"
fi
