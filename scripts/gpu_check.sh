#!/usr/bin/env bash
# scripts/gpu_check.sh — remora's GPU checks, prepared on a build machine and run on a
# GPU machine that has the NVIDIA driver, Python with PyTorch, CMake and a compiler, but
# nothing to fetch (no Debian packages, no network).
#
#   scripts/gpu_check.sh bundle DIR   (here, after the release preset is built)
#       copies remora, remora_device_tests, remora_coll_tests and the shared libraries
#       they need that a bare machine lacks into DIR, the release libremora.a (linked
#       into the Python extensions there), the Debian packages of the libraries the
#       Python builds link (fmt, sodium, mnl, uring, isal: unpacked there, not
#       installed), and this script as DIR/run.sh
#   DIR/run.sh [RESULTS]              (there, in the repository's root)
#       runs, writing logs and JSON under RESULTS (default: $OUT, else ./gpu-results),
#       each stage only while REMORA_GPU_BUDGET seconds (default 450) last:
#       doctor   `remora doctor --json` (a GPU dmabuf offered to the devmem binds)
#       tests    the GPU tests (CudaDomainGpu, CudaScatterGpu, CudaStaging, CudaProbe,
#                CudaCollectives)
#       python   the remora package built there (pip install ., the bundled libremora.a)
#                and tests/python/test_cuda.py against the real driver, PyTorch CUDA
#                tensors and CuPy arrays included
#       p2p      `bench p2p` bandwidth and latency, CUDA and host memory, in pairs of
#                alternating order between two processes over loopback
#       workers  `bench p2p` bandwidth of host memory over loopback TCP (REMORA_SAME_HOST=off,
#                4 data streams) with REMORA_PROGRESS_THREADS 1, 2, 3 and 5 (send and receive
#                workers, docs/rails.md), two rounds of alternating order: how bandwidth
#                grows with threads where cores are free
#       torch    remora-torch built there and bench/torch/bench_torch.py (remora vs gloo)
#       devmem   DevmemRxEndpointCuda.* (devmem receive into CUDA memory through rxq's
#                stand-in mode), where the release build's remora_integration_tests is
#                there at its build path (it starts build/release/tools/remora and
#                remora_test_peer by those paths: carry the three)
#       memcheck the GPU tests under compute-sanitizer memcheck, where it is installed
#       staging  `bench staging` (the test device's check, which needs spare cores:
#                2-vCPU machines are CPU-bound there, bench/README.md)
#       nccl     a real NCCL (PyTorch's) through the remora net plugin: two ranks on GPU 0
#                under torchrun, each its own NCCL_HOSTID so that NCCL takes them for two
#                hosts and joins them through its network transport
#                (tests/nccl/real_nccl_check.py): allreduce, broadcast, allgather and
#                send/recv of CUDA tensors from 4 B to 256 MiB checked exactly, with
#                NCCL_NET_PLUGIN=remora and with NCCL's own socket transport, in pairs of
#                alternating order; the NCCL_DEBUG=INFO lines that show which ran
#       REMORA_GPU_STAGES (default: all of them, in that order) picks some.
# docs/engineering-log.md, "CUDA: what has run where", records what these gave.
set -uo pipefail

bundle() {
  local dir=$1 root build
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  build=${REMORA_BUILD:-${root}/build/release}
  mkdir -p "${dir}/bin" "${dir}/lib"
  cp "${build}/tools/remora" "${build}/tests/remora_device_tests" "${build}/tests/remora_coll_tests" "${dir}/bin/"
  mkdir -p "${dir}/plugin"
  cp "${build}/plugin/nccl/libnccl-net-remora.so" "${dir}/plugin/"
  # Every library the binaries link outside glibc and libstdc++ (which any machine that
  # runs the NVIDIA driver has, newer or equal).
  ldd "${dir}"/bin/* | awk '/=> \// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt)\.so' |
    while read -r lib; do cp -L "${lib}" "${dir}/lib/"; done
  mkdir -p "${dir}/pylib" "${dir}/debs"
  cp "${build}/libremora.a" "${dir}/pylib/"
  # The libsodium that archive was built with, when it is the build's own static one
  # (scripts/lib/sodium.sh): the extensions must link that one, not Debian's.
  local sodium
  sodium=$(sed -n 's/^REMORA_SODIUM_LIBRARY:[A-Z]*=//p' "${build}/CMakeCache.txt")
  if [[ ${sodium} == *.a ]]; then
    mkdir -p "${dir}/sodium"
    cp -r "$(dirname "$(dirname "${sodium}")")"/{lib,include} "${dir}/sodium/"
  fi
  # Headers, CMake files and libraries of what the Python extensions link besides
  # libremora.a; unpacked into a folder there (dpkg -x), never installed.
  (cd "${dir}/debs" && apt-get download -q libfmt-dev libfmt9 libsodium-dev libsodium23 libmnl-dev libmnl0 \
    liburing-dev liburing2 libisal-dev libisal2 >/dev/null) || return
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

# Whether a stage is asked for and at least $2 seconds of the budget are left.
stage() {
  [[ " ${STAGES} " == *" $1 "* ]] || return 1
  if ((SECONDS + $2 > BUDGET)); then
    echo "=== $1: skipped, $((BUDGET - SECONDS)) s of the budget left (it needs about $2)"
    return 1
  fi
  echo "=== $1 (at ${SECONDS} s)"
}

# Seconds of the budget left, at least $1 (default 30): the bound of a stage's commands.
left() { local l=$((BUDGET - SECONDS)) min=${1:-30}; echo $((l > min ? l : min)); }

# pip install --no-build-isolation of the package at $1 into the running Python, linking
# the bundled libremora.a and the unpacked packages' libraries.
pip_build() {
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) timeout 300 python3 -m pip install -q --no-build-isolation --no-deps \
    -Ccmake.define.REMORA_PYTHON_LIBRARY="${HERE}/pylib/libremora.a" -Ccmake.define.CMAKE_PREFIX_PATH="${HERE}/sodium;${DEPS}/usr" \
    -Cbuild-dir="/tmp/remora-build-$2" "$1"
}

# The nccl stage: two pairs of runs of tests/nccl/real_nccl_check.py under torchrun, the
# remora plugin and NCCL's socket transport in alternating order, over loopback for both.
real_nccl() {
  local results=$1 port=$2 pair order transport log
  for pair in 1 2; do
    order="remora socket"
    [ $((pair % 2)) = 0 ] && order="socket remora"
    for transport in ${order}; do
      port=$((port + 1))
      log=${results}/nccl_${transport}_${pair}.log
      local net=(NCCL_NET_PLUGIN=none NCCL_NET=Socket)
      [ "${transport}" = remora ] && net=(NCCL_NET_PLUGIN=remora NCCL_NET=remora)
      env "${net[@]}" LD_LIBRARY_PATH="${HERE}/plugin:${LD_LIBRARY_PATH}" NCCL_DEBUG=INFO \
        NCCL_DEBUG_SUBSYS=INIT,NET NCCL_SOCKET_IFNAME=lo timeout "$(left 60)" \
        python3 -m torch.distributed.run --nproc_per_node 2 --master_port "${port}" tests/nccl/real_nccl_check.py \
        --label "${transport}" --json "${results}/nccl_${transport}_${pair}.json" >"${log}" 2>&1
      echo "rc=$? (${transport}, pair ${pair}; log ${log})"
      grep -E 'Loaded net plugin|Using network|NET/remora: (device|CUDA)|MISMATCH|every operation' "${log}" | sort -u | head -8
      grep -E ' (allreduce|sendrecv) .* (262144|67108864|268435456) B ' "${log}"
    done
  done
}

run() {
  local results port=29811 pair order mem tmp cs
  tmp=$(mktemp -d)
  HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  results=${1:-${OUT:-./gpu-results}}
  mkdir -p "${results}"
  B=${HERE}/bin
  BUDGET=${REMORA_GPU_BUDGET:-450}
  STAGES=${REMORA_GPU_STAGES:-doctor tests python devmem p2p workers torch nccl memcheck staging}
  DEPS=/tmp/remora-deps
  mkdir -p "${DEPS}"
  for deb in "${HERE}"/debs/*.deb; do dpkg -x "${deb}" "${DEPS}"; done
  export LD_LIBRARY_PATH="${HERE}/lib:${DEPS}/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
  echo "=== machine"; uname -r; nproc; python3 --version
  nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
  local filter='CudaDomainGpu.*:Paths/CudaScatterGpu.*:CudaStaging.*:CudaProbe.*'
  if stage doctor 10; then
    timeout 60 "${B}/remora" doctor --json >"${results}/doctor.json"; echo "rc=$? (3: no device path)"
  fi
  if stage tests 60; then
    timeout 300 "${B}/remora_device_tests" --gtest_filter="${filter}" 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|^\[  FAILED'
    REMORA_TEST_REQUIRE_CUDA=1 timeout 300 "${B}/remora_coll_tests" --gtest_filter='CudaCollectives.*' 2>&1 |
      grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|^\[  FAILED'
  fi
  if stage python 60; then
    {
      pip_build . python && echo "built the remora package" &&
        REMORA_TEST_CUDA_DRIVER=libcuda.so.1 timeout 300 python3 -m pytest -p no:cacheprovider -v -rs tests/python/test_cuda.py
      echo "rc=$?"
    } >"${results}/python.log" 2>&1
    grep -E 'PASSED|FAILED|SKIPPED|ERROR|passed|failed|rc=' "${results}/python.log"
  fi
  local itests=build/release/tests/integration/remora_integration_tests
  if [ -x "${itests}" ] && stage devmem 20; then
    REMORA_TEST_REQUIRE_CUDA=1 timeout "$(left)" "${itests}" --gtest_filter='DevmemRxEndpointCuda.*' 2>&1 |
      grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure|^\[  FAILED'
  fi
  if stage p2p 60; then
    for pair in 1 2 3 4; do
      ((SECONDS < BUDGET)) || { echo "p2p: budget spent after $((pair - 1)) pairs"; break; }
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
  fi
  if stage workers 40; then
    local threads round
    for round in 1 2; do
      order="1 2 3 5"
      [ "${round}" = 2 ] && order="5 3 2 1"
      for threads in ${order}; do
        ((SECONDS < BUDGET)) || break
        port=$((port + 1))
        REMORA_SAME_HOST=off REMORA_STREAMS=4 REMORA_PROGRESS_THREADS=${threads} \
          p2p_pair "${port}" host bw 1M,16M "--window 8 --iters 40" "${tmp}/workers_${threads}_${round}.json"
        echo "  (REMORA_PROGRESS_THREADS=${threads}, round ${round})"
      done
    done
    for f in "${tmp}"/workers_*.json; do
      [ -s "${f}" ] && tr -d '\n' <"${f}" && echo
    done >"${results}/bench_workers.jsonl"
  fi
  if stage torch 90; then
    {
      pip_build python/torch torch && echo "built remora-torch" &&
        PYTHONUNBUFFERED=1 timeout "$(left 60)" python3 bench/torch/bench_torch.py --pairs 4
      echo "rc=$?"
    } >"${results}/torch.log" 2>&1
    grep -vE '^\s*$' "${results}/torch.log" | tail -15
  fi
  if stage nccl 120; then
    real_nccl "${results}" "${port}"
    port=$((port + 10))
  fi
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "${cs}" ] && stage memcheck 60; then
    timeout "$(left)" "${cs}" --tool memcheck --print-limit 20 "${B}/remora_device_tests" --gtest_filter="${filter}" \
      >"${results}/memcheck.txt" 2>&1
    REMORA_TEST_REQUIRE_CUDA=1 timeout "$(left)" "${cs}" --tool memcheck --print-limit 20 "${B}/remora_coll_tests" \
      --gtest_filter='CudaCollectives.*' >>"${results}/memcheck.txt" 2>&1
    grep -E 'ERROR SUMMARY|Program hit|^\[  (PASSED|FAILED) ' "${results}/memcheck.txt" | sort | uniq -c
  fi
  if stage staging 60; then
    timeout "$(left)" "${B}/remora" bench staging --json "${results}/staging.json" 2>&1 |
      grep -vE '^# (ratio|host GB|the bound|before|cores|a GPU|copies take)'
  fi
  echo "=== done at ${SECONDS} s"
}

case "${1:-run}" in
  bundle) bundle "${2:?usage: scripts/gpu_check.sh bundle DIR}" ;;
  run) run "${2:-}" ;;
  *) run "$1" ;;  # DIR/run.sh RESULTS
esac
