#!/usr/bin/env bash
# scripts/gpu_check.sh — remora's GPU checks, prepared on a build machine and run on a
# GPU machine that has the NVIDIA driver but no toolchain (no compiler, no Debian
# packages, nothing to fetch).
#
#   scripts/gpu_check.sh bundle DIR   (here, after the release preset is built)
#       copies remora, remora_device_tests, remora_coll_tests and the shared libraries
#       they need that a bare machine lacks into DIR, with this script as DIR/run.sh
#   DIR/run.sh [RESULTS]              (there)
#       runs, writing logs and JSON under RESULTS (default: $OUT, else ./gpu-results):
#       the GPU tests (CudaDomainGpu, CudaScatterGpu, CudaStaging, CudaProbe,
#       CudaCollectives), the same under compute-sanitizer memcheck where it is installed,
#       `remora doctor --json` (a GPU dmabuf offered to the devmem binds), and, in pairs
#       against host memory over loopback between two processes: `bench p2p` bandwidth
#       and latency with CUDA memory, and `bench staging` (the test device's check, which
#       needs spare cores: 2-vCPU machines are CPU-bound there, bench/README.md).
# docs/device-memory.md, "What has run where", records what these gave.
set -uo pipefail

bundle() {
  local dir=$1 root build
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  build=${REMORA_BUILD:-${root}/build/release}
  mkdir -p "${dir}/bin" "${dir}/lib"
  cp "${build}/tools/remora" "${build}/tests/remora_device_tests" "${build}/tests/remora_coll_tests" "${dir}/bin/"
  # Every library the binaries link outside glibc and libstdc++ (which any machine that
  # runs the NVIDIA driver has, newer or equal).
  ldd "${dir}"/bin/* | awk '/=> \// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt)\.so' |
    while read -r lib; do cp -L "${lib}" "${dir}/lib/"; done
  cp "${BASH_SOURCE[0]}" "${dir}/run.sh"
  chmod +x "${dir}/run.sh"
  echo "bundled into ${dir} ($(du -sh "${dir}" | cut -f1)); run ${dir}/run.sh on the GPU machine"
}

# bench p2p between two processes over loopback; prints the table's data lines.
p2p_pair() {
  local port=$1 mem=$2 mode=$3 sizes=$4 extra=$5 json=$6 follower=/tmp/remora_follower_$1.txt fpid rc
  timeout 150 "${B}/remora" bench p2p --mode "${mode}" --listen "127.0.0.1:${port}" --memory "${mem}" \
    >"${follower}" 2>&1 &
  fpid=$!
  for _ in $(seq 200); do
    grep -q listening "${follower}" 2>/dev/null && break
    sleep 0.05  # the follower's listening line: a script's wait, bounded (10 s)
  done
  # shellcheck disable=SC2086
  timeout 120 "${B}/remora" bench p2p --mode "${mode}" --peer "127.0.0.1:${port}" --memory "${mem}" \
    --sizes "${sizes}" ${extra} --json "${json}" 2>&1 | grep -E '^[0-9]|verified|error'
  rc=${PIPESTATUS[0]}
  [ "${rc}" = 0 ] || kill "${fpid}" 2>/dev/null  # a driver that failed leaves its follower waiting
  wait "${fpid}"
  echo "  rc=${rc} (${mode} ${mem})"
}

run() {
  local here results port=29811 pair order mem tmp
  tmp=$(mktemp -d)
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  results=${1:-${OUT:-./gpu-results}}
  mkdir -p "${results}"
  B=${here}/bin
  export LD_LIBRARY_PATH="${here}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
  echo "=== machine"; uname -r; nproc
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  echo "=== doctor"; timeout 60 "${B}/remora" doctor --json >"${results}/doctor.json"; echo "rc=$? (3: no device path)"
  echo "=== GPU tests"
  local filter='CudaDomainGpu.*:Paths/CudaScatterGpu.*:CudaStaging.*:CudaProbe.*'
  timeout 300 "${B}/remora_device_tests" --gtest_filter="${filter}" --gtest_output="xml:${results}/device_tests.xml" 2>&1 |
    grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure'
  REMORA_TEST_REQUIRE_CUDA=1 timeout 300 "${B}/remora_coll_tests" --gtest_filter='CudaCollectives.*' \
    --gtest_output="xml:${results}/coll_tests.xml" 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure'
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "${cs}" ]; then
    echo "=== compute-sanitizer memcheck"
    timeout 300 "${cs}" --tool memcheck --print-limit 20 "${B}/remora_device_tests" --gtest_filter="${filter}" \
      >"${results}/memcheck.txt" 2>&1
    REMORA_TEST_REQUIRE_CUDA=1 timeout 300 "${cs}" --tool memcheck --print-limit 20 "${B}/remora_coll_tests" \
      --gtest_filter='CudaCollectives.*' >>"${results}/memcheck.txt" 2>&1
    grep -E 'ERROR SUMMARY|Program hit' "${results}/memcheck.txt" | sort | uniq -c
  fi
  echo "=== bench p2p, host and cuda pairs, order alternating"
  for pair in 1 2 3 4; do
    order="host cuda"
    [ $((pair % 2)) = 0 ] && order="cuda host"
    for mem in ${order}; do
      port=$((port + 1)); p2p_pair "${port}" "${mem}" bw 64K,1M,16M,64M "--window 4 --iters 20" "${tmp}/bw_${mem}_${pair}.json"
      port=$((port + 1)); p2p_pair "${port}" "${mem}" lat 8,4K,64K,1M "--iters 2000" "${tmp}/lat_${mem}_${pair}.json"
    done
  done
  # One file of every run's JSON, a line each (the runs' own files are many).
  for f in "${tmp}"/*.json; do
    [ -s "${f}" ] && tr -d '\n' <"${f}" && echo
  done >"${results}/bench_p2p.jsonl"
  echo "=== bench staging"
  timeout 300 "${B}/remora" bench staging --json "${results}/staging.json" 2>&1 | grep -vE '^# (ratio|host GB|the bound|before|cores|a GPU|copies take)'
}

case "${1:-run}" in
  bundle) bundle "${2:?usage: scripts/gpu_check.sh bundle DIR}" ;;
  run) run "${2:-}" ;;
  *) run "$1" ;;  # DIR/run.sh RESULTS
esac
