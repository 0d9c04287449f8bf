#!/usr/bin/env bash
# scripts/kernel_lab.sh — run remora's kernel-lab tests inside a real Debian kernel booted
# by QEMU under software emulation (no KVM needed), and report their results here.
#
#   scripts/kernel_lab.sh [--suite SUITE] [--preset PRESET] [--keep]
#
# It installs qemu-system-x86, kmod and xz-utils where they are missing, fetches the suite's newest
# linux-image-amd64 (with its modules) and busybox-static by package name with apt's own
# tools into ~/.cache/remora/kernel-lab (a private apt configuration there: the host's is
# not changed), builds the preset's `remora` and `remora_kernel_lab_tests`, packs them
# with their shared libraries, busybox and the modules the tests need into an initramfs,
# boots it, and reads one result line per test back from the serial console. The console
# log and each test's output stay in build/kernel-lab/<suite>/; the initramfs is removed.
#
# Tests run in the guest, as root, on its loopback (and veth pairs the tests make):
#   doctor    `remora doctor --json` (its exit status 3, "no device zero-copy path", is
#             expected there: the JSON is kept in doctor.json)
#   gtest     remora_kernel_lab_tests: real udmabuf and DMA-heap buffers as DmabufMemory
#             through endpoints, the devmem binds of real dmabufs, zcrx's device-less mode
#
# Exit status: 0 every test passed; 1 a test failed or the guest did not finish; 2 the lab
# could not run here, skipped, with a line "kernel lab: skipped: <reason>" (no QEMU and no
# way to install it, no kernel packages reachable).
#
# Environment: REMORA_LAB_SUITE (default trixie-backports, whose kernel is the newest
# Debian publishes), REMORA_LAB_GTEST_FILTER (a --gtest_filter for the gtest step),
# REMORA_LAB_VERBOSE=1 (the guest's console on stdout as it runs), and those of
# scripts/lib/kernel_lab.sh (cache, timeout, memory, CPUs, mirror).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${repo_root}"
# shellcheck source=scripts/lib/deps.sh
source scripts/lib/deps.sh
# shellcheck source=scripts/lib/kernel_lab.sh
source scripts/lib/kernel_lab.sh

suite=${REMORA_LAB_SUITE:-trixie-backports}
preset=release
keep=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --suite) suite=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

skip() {
  echo "kernel lab: skipped: $*"
  exit 2
}

reason=$(remora_lab_host_tools) || skip "${reason}"

# The programs the guest runs: built here (only these targets) unless the caller did.
build=build/${preset}
if [[ ${REMORA_LAB_BUILD:-1} == 1 ]]; then
  remora_use_ccache "${repo_root}"
  remora_sodium_setup
  [[ -f ${build}/CMakeCache.txt ]] || cmake --preset "${preset}" >/dev/null
  cmake --build --preset "${preset}" -j "${REMORA_JOBS:-$(nproc)}" --target remora_tool remora_kernel_lab_tests
fi
tool=${build}/tools/remora
lab_tests=${build}/tests/kernel_lab/remora_kernel_lab_tests
for f in "${tool}" "${lab_tests}"; do
  [[ -x ${f} ]] || { echo "kernel lab: ${f} is not built (cmake --build --preset ${preset})"; exit 1; }
done
tool=$(realpath "${tool}")
lab_tests=$(realpath "${lab_tests}")

start=${SECONDS}
tree=$(remora_lab_fetch "${suite}") || skip "${tree}"
kernel_version=$(basename "$(remora_lab_modules_dir "${tree}")")
remora_lab_log "kernel ${kernel_version} ($(cut -d' ' -f3 "${tree}/complete")) from ${suite}; fetched in $((SECONDS - start)) s"

out=build/kernel-lab/${suite}
rm -rf "${out}"
mkdir -p "${out}"
rm -f "${out}/console-panicked-boot.log"
filter=${REMORA_LAB_GTEST_FILTER:+--gtest_filter=${REMORA_LAB_GTEST_FILTER}}
# One test per line: "<name> <shell command>" (run by the guest's busybox sh).
guest_tests() {
  cat <<EOF
doctor ${tool} doctor --json; r=\$?; echo "doctor exit status \$r"; test \$r -eq 0 -o \$r -eq 3
gtest REMORA_TEST_KERNEL_LAB=1 ${lab_tests} --gtest_color=no ${filter}
EOF
}
REMORA_LAB_TESTS=$(guest_tests)
export REMORA_LAB_TESTS
expected=(doctor gtest)

initrd=$(mktemp "${TMPDIR:-/tmp}/remora-lab-initrd.XXXXXX")
trap 'rm -f "${initrd}"' EXIT
start=${SECONDS}
remora_lab_initramfs "${tree}" "${initrd}" "${tool}" "${lab_tests}"
remora_lab_log "initramfs: $(du -h "${initrd}" | cut -f1) in $((SECONDS - start)) s; modules: ${REMORA_LAB_LOADED_MODULES:-none}"
if [[ ${keep} == 1 ]]; then cp "${initrd}" "${out}/initramfs.cpio.gz"; fi

start=${SECONDS}
boot_rc=0
remora_lab_boot "${tree}" "${initrd}" "${out}/console.log" || boot_rc=$?
# The emulated guest's kernel sometimes panics while it boots, before its init runs
# anything of ours (seen here: an int3 oops in the scheduler, about one boot in four of
# Debian's 7.3.4 under TCG with two CPUs). That is not a test result: boot once more,
# keeping the first console. A panic after the first test began is reported as it is.
if ! grep -q '^REMORA-LAB-BEGIN' "${out}/console.log" && grep -q 'Kernel panic' "${out}/console.log"; then
  mv "${out}/console.log" "${out}/console-panicked-boot.log"
  remora_lab_log "the guest kernel panicked while booting, before any test began ($(grep -m1 -oE 'Oops: .*|BUG: .*' \
    "${out}/console-panicked-boot.log" || echo 'see the log')); booting once more (that console: ${out}/console-panicked-boot.log)"
  boot_rc=0
  remora_lab_boot "${tree}" "${initrd}" "${out}/console.log" || boot_rc=$?
fi
boot_seconds=$((SECONDS - start))

for name in "${expected[@]}"; do remora_lab_section "${out}/console.log" "${name}" >"${out}/${name}.log"; done
sed -n '/^{/,/^}/p' "${out}/doctor.log" >"${out}/doctor.json"

echo
echo "==================== kernel lab: ${suite}, Linux ${kernel_version} ===================="
grep -oE 'REMORA-LAB-(KERNEL|NOTE) .*' "${out}/console.log" | sed 's/^REMORA-LAB-[A-Z]* //' || true
failed=0
results=$(remora_lab_results "${out}/console.log")
for name in "${expected[@]}"; do
  line=$(grep "^${name} " <<<"${results}" || true)
  if [[ -z ${line} ]]; then
    printf '%-8s DID NOT FINISH\n' "${name}"
    failed=1
  else
    read -r _ rc secs <<<"${line}"
    if [[ ${rc} == 0 ]]; then printf '%-8s ok      %5ss\n' "${name}" "${secs}"; else
      printf '%-8s FAILED  %5ss  (exit %s)\n' "${name}" "${secs}" "${rc}"
      failed=1
    fi
  fi
done
grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]|^\[=+\] .* ran' "${out}/gtest.log" || true
if ! grep -q '^REMORA-LAB-DONE' "${out}/console.log"; then
  echo "the guest did not finish (QEMU exit ${boot_rc}$([[ ${boot_rc} == 124 ]] && echo ", killed after ${REMORA_LAB_TIMEOUT} s")); last lines:"
  tail -n 20 "${out}/console.log"
  failed=1
fi
echo "boot and tests: ${boot_seconds} s; console log and outputs: ${out}/"
exit "${failed}"
