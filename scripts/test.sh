#!/usr/bin/env bash
# scripts/test.sh — build remora and run its tests, on a fresh Debian 12 machine or an
# existing checkout.
#
# For each preset (default: release asan tsan fuzz) it configures, builds and runs ctest,
# then prints a summary. tsan builds and runs only the threaded suites (engine,
# datapath, transport, coll, integration) under ThreadSanitizer; fuzz builds the libFuzzer targets
# with clang, replays their corpus, then runs each for a bounded time
# (scripts/lib/fuzz.sh). Exits non-zero if any step of any preset failed. Each suite
# runs three tests at a time on a 2-core machine (each makes its own network namespaces,
# named after its pid).
#
# Environment:
#   REMORA_PRESETS="release asan tsan fuzz"  presets to run, in order (see CMakePresets.json)
#   REMORA_FUZZ_SECONDS=<s>        how long each fuzz target runs (default: 25; targets run
#                                  as many at a time as there are cores)
#   REMORA_JOBS=<n>                compile jobs (default: nproc)
#   REMORA_TEST_JOBS=<n>           tests run at a time (default: nproc + 1, at most 4)
#   REMORA_TEST_TIMEOUT=<s>        default per-test timeout in seconds (default: 300)
#   REMORA_SKIP_APT=1              do not install packages (see scripts/lib/deps.sh)
#   REMORA_BUILD_ONLY=1            configure and build each preset, run nothing (no ctest,
#                                  fuzzing, Python, PyTorch or NIXL step)
#   REMORA_PYTHON_STEP=0           skip the Python package step (see scripts/lib/python.sh)
#   REMORA_SKIP_TORCH=1            skip the PyTorch backend's step (scripts/lib/torch_env.sh)
#   REMORA_NIXL_STEP=0             skip the NIXL backend plugin's step (scripts/lib/nixl.sh)
#   REMORA_LAB_STEP=0              skip the kernel lab (scripts/kernel_lab.sh: the release
#                                  preset's lab tests inside a Debian kernel under QEMU, about
#                                  a minute of both cores; skipped, with the reason, where QEMU
#                                  or the kernel packages cannot be had)
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${repo_root}"
# shellcheck source=scripts/lib/deps.sh
source scripts/lib/deps.sh
# shellcheck source=scripts/lib/python.sh
source scripts/lib/python.sh
# shellcheck source=scripts/lib/fuzz.sh
source scripts/lib/fuzz.sh
# shellcheck source=scripts/lib/nixl.sh
source scripts/lib/nixl.sh

presets=${REMORA_PRESETS:-release asan tsan fuzz}
jobs=${REMORA_JOBS:-$(nproc)}
# Tests at a time, in every suite: one more than the machine has cores, at most 4 (the
# multi-GiB tests hold several GiB each). On the 2-core CI machine two at a time took
# the release suite from 433 s to 284 s, asan from 549 s to 397 s and tsan from 737 s
# to 414 s; since many tests wait (for a peer's timeout, a rail to come back) more than
# they compute, three took release from 346 s to 274 s (the CPUs idle 31% of the time
# at two, 14% at three) and tsan from 739 s to 651 s.
test_jobs_for() {
  if [[ -n ${REMORA_TEST_JOBS:-} ]]; then
    echo "${REMORA_TEST_JOBS}"
  else
    echo $(( $(nproc) < 3 ? $(nproc) + 1 : 4 ))
  fi
}
test_timeout=${REMORA_TEST_TIMEOUT:-300}
fuzz_seconds=${REMORA_FUZZ_SECONDS:-25}

remora_install_deps
remora_sodium_setup

# ccache where installed, exactly as scripts/demo.sh (scripts/lib/deps.sh says why).
remora_use_ccache "${repo_root}"

known_presets=$(cmake --list-presets=test 2>/dev/null | sed -n 's/^ *"\([^"]*\)".*/\1/p')
for preset in ${presets}; do
  if ! grep -qx "${preset}" <<<"${known_presets}"; then
    remora_log "unknown preset '${preset}'; known: $(tr '\n' ' ' <<<"${known_presets}")"
    exit 2
  fi
done

summary=()
failed=0
start_all=${SECONDS}

# step <preset> <name> <command...>: runs one step, records its outcome and time.
step() {
  local preset=$1 name=$2 start=${SECONDS} rc=0
  shift 2
  echo
  echo "==== [${preset}] ${name}: $*"
  "$@" || rc=$?
  local took=$((SECONDS - start))
  if [[ ${rc} -eq 0 ]]; then
    summary+=("$(printf '%-8s %-10s ok      %5ss' "${preset}" "${name}" "${took}")")
  else
    summary+=("$(printf '%-8s %-10s FAILED  %5ss  (exit %s)' "${preset}" "${name}" "${took}" "${rc}")")
    failed=1
  fi
  return "${rc}"
}

# run_ctest <preset> <log>: ctest's output is also kept so that its summary line can be
# repeated at the end; pipefail makes this return ctest's exit status.
# The variables above are this script's, not the library's: a test's peer process that
# inherited one would warn "unknown environment variable" on its first line, where the
# test reads the peer's port.
run_ctest() {
  env -u REMORA_PRESETS -u REMORA_JOBS -u REMORA_TEST_JOBS -u REMORA_TEST_TIMEOUT -u REMORA_SKIP_APT -u REMORA_PYTHON_STEP \
    -u REMORA_SKIP_TORCH -u REMORA_FUZZ_SECONDS -u REMORA_FUZZ_PARALLEL -u REMORA_BUILD_ONLY -u REMORA_NIXL_STEP -u REMORA_LAB_STEP \
    ctest --preset "$1" --output-on-failure --timeout "${test_timeout}" -j"$(test_jobs_for "$1")" 2>&1 | tee "$2"
}

# no_tsan_reports <dir>: fails, printing them, when any process of the tsan preset's
# tests wrote a ThreadSanitizer report (TSAN_OPTIONS log_path, CMakePresets.json): a
# helper process whose exit status no test checks still fails the step.
no_tsan_reports() {
  local reports
  reports=$(find "$1" -type f 2>/dev/null)
  [[ -z ${reports} ]] && return 0
  for r in ${reports}; do cat "${r}"; done
  echo "ThreadSanitizer reports: $(wc -w <<<"${reports}") file(s) in $1"
  return 1
}

for preset in ${presets}; do
  log_dir=build/${preset}
  rm -f "${log_dir}/ctest.log"  # never report a previous run's result
  step "${preset}" configure cmake --preset "${preset}" || continue
  step "${preset}" build cmake --build --preset "${preset}" -j "${jobs}" || continue
  [[ ${REMORA_BUILD_ONLY:-0} == 1 ]] && continue
  if [[ ${preset} == tsan ]]; then rm -rf "${log_dir}/tsan-reports" && mkdir -p "${log_dir}/tsan-reports"; fi
  step "${preset}" test run_ctest "${preset}" "${log_dir}/ctest.log" || true
  if [[ ${preset} == tsan ]]; then
    step "${preset}" races no_tsan_reports "${log_dir}/tsan-reports" || true
  fi
  if [[ ${preset} == fuzz ]]; then
    step "${preset}" fuzzing remora_fuzz_run "${fuzz_seconds}" "${log_dir}" || true
  fi
done

# The Python steps link the release preset's library instead of compiling it again
# (exported only now: the C++ tests run without it).
if [[ -f build/release/libremora.a ]]; then export REMORA_PYTHON_LIBRARY=build/release/libremora.a; fi

# The PyTorch backend's environment first (python/torch, scripts/lib/torch_env.sh): PyTorch
# in build/venv, so that the Python package's tests of tensors run too.
torch_ready=0
if [[ ${REMORA_BUILD_ONLY:-0} == 1 ]]; then
  export REMORA_PYTHON_STEP=0 REMORA_SKIP_TORCH=1
fi
if [[ ${REMORA_SKIP_TORCH:-0} != 1 ]]; then
  # shellcheck source=scripts/lib/torch_env.sh
  source scripts/lib/torch_env.sh
  if step torch env remora_torch_env; then torch_ready=1; fi
fi

# The Python package, once, after the presets: pip install . into the same venv, then
# pytest against the installed package (scripts/lib/python.sh).
python_installed=0
if [[ ${REMORA_PYTHON_STEP:-1} != 0 ]]; then
  if step python install remora_python_setup; then
    python_installed=1
    step python pytest remora_python_test || true
  fi
fi

# The NIXL backend plugin through NVIDIA's NIXL agent (scripts/lib/nixl.sh): the nixl-cu12
# wheel installed into the same venv; skipped, with the reason, where it cannot be installed.
if [[ ${python_installed} == 1 && ${REMORA_NIXL_STEP:-1} != 0 ]]; then
  nixl_rc=0
  nixl_out=$(remora_nixl_setup 2>&1) || nixl_rc=$?
  echo "${nixl_out}"
  if [[ ${nixl_rc} == 0 ]]; then
    step nixl pytest remora_nixl_test || true
  elif [[ ${nixl_rc} == 2 ]]; then
    summary+=("$(printf '%-8s %-10s skipped (%s could not be installed)' nixl pytest "${REMORA_NIXL_WHEEL}")")
  else
    summary+=("$(printf '%-8s %-10s FAILED  (setup exit %s)' nixl setup "${nixl_rc}")")
    failed=1
  fi
fi

# The PyTorch backend's tests (tests/torch) under torchrun.
if [[ ${torch_ready} == 1 ]]; then
  step torch test remora_torch_tests || true
fi

# The kernel lab, last (scripts/kernel_lab.sh): the release preset's remora and
# remora_kernel_lab_tests inside the newest Debian kernel under QEMU, where udmabuf, the
# DMA-BUF heaps and the devmem binds are real. Exit 2 is a skip, with its reason.
if [[ ${REMORA_BUILD_ONLY:-0} != 1 && ${REMORA_LAB_STEP:-1} != 0 ]]; then
  if [[ ! -x build/release/tests/kernel_lab/remora_kernel_lab_tests ]]; then
    summary+=("$(printf '%-8s %-10s skipped (the release preset was not built)' lab qemu)")
  else
    echo
    echo "==== [lab] qemu: scripts/kernel_lab.sh --preset release"
    lab_start=${SECONDS}
    lab_rc=0
    REMORA_LAB_BUILD=0 scripts/kernel_lab.sh --preset release 2>&1 | tee build/kernel-lab.log || lab_rc=$?
    lab_took=$((SECONDS - lab_start))
    if [[ ${lab_rc} == 0 ]]; then
      summary+=("$(printf '%-8s %-10s ok      %5ss  (%s)' lab qemu "${lab_took}" \
        "$(grep -o 'Linux [^ ]*' build/kernel-lab.log | head -n 1)")")
    elif [[ ${lab_rc} == 2 ]]; then
      summary+=("$(printf '%-8s %-10s skipped (%s)' lab qemu "$(sed -n 's/^kernel lab: skipped: //p' build/kernel-lab.log)")")
    else
      summary+=("$(printf '%-8s %-10s FAILED  %5ss  (exit %s)' lab qemu "${lab_took}" "${lab_rc}")")
      failed=1
    fi
  fi
fi

# failure_details <log>: what each failing test of a ctest log printed, trimmed to the
# lines that say why (gtest's failure lines, sanitizer and error lines), so that the
# end of the output, which is all some CI views keep, shows the cause and not only names.
failure_details() {
  awk '
    /^ *Start +[0-9]+: / { inblock = 0 }
    /Test +#[0-9]+: .*(\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout)/ { inblock = 1; shown = 0; print; next }
    inblock && shown < 40 && /FAIL:|Failure|[Ee]rror|Expected|Which is|Value of|Actual|exited|signal|Sanitizer|SUMMARY|Timeout|broke|connected again|retired/ {
      print "    " substr($0, 1, 300); shown++
    }
  ' "$1" | head -n 150
}

echo
for preset in ${presets}; do
  log=build/${preset}/ctest.log
  if [[ -f ${log} ]] && grep -q 'The following tests FAILED:' "${log}"; then
    echo "==================== ${preset}: why tests failed ===================="
    failure_details "${log}"
  fi
done
echo "==================== remora test summary ===================="
for line in "${summary[@]}"; do
  echo "${line}"
done
for preset in ${presets}; do
  log=build/${preset}/ctest.log
  if [[ -f ${log} ]]; then
    echo "--- ${preset}: $(grep -E 'tests passed|tests failed' "${log}" | tail -n 1 || echo 'no ctest summary')"
    # ctest lists failing tests after "The following tests FAILED:".
    sed -n '/The following tests FAILED:/,$p' "${log}" | grep -v '^Errors while running CTest' || true
  fi
done
echo "total time: $((SECONDS - start_all))s"
if [[ ${failed} -ne 0 ]]; then
  echo "RESULT: FAILED"
  exit 1
fi
echo "RESULT: OK (presets: ${presets})"
