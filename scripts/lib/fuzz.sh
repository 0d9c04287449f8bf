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

remora_fuzz_run() {
  local seconds=${1:-30} build=${2:-build/fuzz} failed=0 t log runs
  local -a lines=()
  for t in $(remora_fuzz_targets); do
    mkdir -p "${build}/corpus/${t}" "${build}/artifacts/${t}"
    log="${build}/artifacts/${t}/fuzz.log"
    echo "---- ${t}: ${seconds} s"
    if "${build}/tests/fuzz/${t}" -max_total_time="${seconds}" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="${build}/artifacts/${t}/" \
        "${build}/corpus/${t}" "tests/fuzz/corpus/${t}" >"${log}" 2>&1; then
      runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "${log}" | tail -n 1)
      lines+=("$(printf '%-18s ok      %10s executions in %s s' "${t}" "${runs:-?}" "${seconds}")")
    else
      failed=1
      tail -n 40 "${log}"
      lines+=("$(printf '%-18s FAILED  input kept in %s/artifacts/%s/' "${t}" "${build}" "${t}")")
    fi
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
