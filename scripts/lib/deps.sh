# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/demo.sh: installs what building, testing and
# running remora needs on Debian 12 (bookworm), and sets up the compiler launcher both use.
#
#   remora_install_deps
#   remora_use_ccache <repo root>
#   remora_sodium_setup          (scripts/lib/sodium.sh: libsodium 1.0.22, built once)
#
# Skips apt entirely when REMORA_SKIP_APT=1 or when every package is already installed
# (checked with dpkg-query), so repeated runs are fast and work offline. Uses sudo when
# not run as root.

REMORA_APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev nlohmann-json3-dev libcli11-dev libxxhash-dev libcap-dev libsodium-dev
  libmnl-dev liburing-dev
  curl  # scripts/lib/sodium.sh fetches libsodium 1.0.22's source from Debian's archive
  libisal-dev  # CRC-32C for REMORA_CHECKSUM=crc32c (optional at build time)
  iproute2 ethtool iperf3 sockperf procps
  tcpdump  # the encryption tests capture a veth between namespaces (tests/integration/encryption_test.cc)
  iptables libnetfilter-queue-dev  # the fault matrix (tests/faults): drops, resets, NFQUEUE delay
  openmpi-bin
  clang libclang-rt-14-dev  # the fuzz preset: libFuzzer and its sanitizers (tests/fuzz)
  python3-dev python3-venv  # the Python package and the PyTorch backend (scripts/lib/python.sh, torch_env.sh)
)

remora_log() { printf '[remora] %s\n' "$*" >&2; }

# shellcheck source=scripts/lib/sodium.sh
source "$(dirname "${BASH_SOURCE[0]}")/sodium.sh"

# ccache, where installed, makes building the same sources again quick, also in another
# clone (paths are taken relative to the clone; the directory is left out of the hash so
# that -g builds hit too). Nothing depends on it: without it every object is compiled.
# scripts/demo.sh and scripts/test.sh both call this before they configure, so that the
# release preset is configured the same way by both: CMake takes the launcher from the
# environment whenever its cache has none, and a launcher that appears on a later
# configure changes every compile command, so the test command would rebuild everything
# the demo command built. A launcher the caller set is kept.
remora_use_ccache() {
  if command -v ccache >/dev/null 2>&1 && [[ -z ${CMAKE_CXX_COMPILER_LAUNCHER:-} ]]; then
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR=$1 CCACHE_NOHASHDIR=1
  fi
}

# Prints the packages of REMORA_APT_PACKAGES that are not installed, one per line.
remora_missing_packages() {
  local pkg status
  for pkg in "${REMORA_APT_PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "${pkg}" 2>/dev/null || true)
    if [[ ${status} != ii* ]]; then
      printf '%s\n' "${pkg}"
    fi
  done
}

remora_install_deps() {
  if [[ ${REMORA_SKIP_APT:-0} == 1 ]]; then
    remora_log "REMORA_SKIP_APT=1: not installing packages"
    return 0
  fi
  if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    remora_log "no dpkg/apt here (not Debian?): install these yourself, or set REMORA_SKIP_APT=1:"
    remora_log "  ${REMORA_APT_PACKAGES[*]}"
    return 1
  fi
  if [[ -r /etc/os-release ]] && ! grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then
    remora_log "note: this is not Debian 12 (bookworm); package names may differ"
  fi

  local missing
  missing=$(remora_missing_packages)
  if [[ -z ${missing} ]]; then
    remora_log "all ${#REMORA_APT_PACKAGES[@]} packages already installed"
    return 0
  fi
  remora_log "installing missing packages: $(tr '\n' ' ' <<<"${missing}")"

  local -a sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
      remora_log "not root and no sudo: install the packages above as root, then rerun"
      return 1
    fi
    sudo=(sudo)
  fi
  # Install the whole list, not just the missing ones, so apt resolves them together.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${REMORA_APT_PACKAGES[@]}"

  missing=$(remora_missing_packages)
  if [[ -n ${missing} ]]; then
    remora_log "still missing after apt-get install: $(tr '\n' ' ' <<<"${missing}")"
    return 1
  fi
}
