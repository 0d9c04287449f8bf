#!/usr/bin/env bash
# scripts/demo.sh — build the `remora` command (release preset, its target only) and run
# `remora demo`, on a fresh Debian 12 machine or an existing checkout. Arguments are
# passed on to `remora demo`. It configures exactly as scripts/test.sh does (the same
# preset, the same compiler launcher), so that the test command then builds only what
# the demo did not need.
#
# Environment:
#   REMORA_JOBS=<n>    compile jobs (default: nproc)
#   REMORA_SKIP_APT=1  do not install packages (see scripts/lib/deps.sh)
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${repo_root}"
# shellcheck source=scripts/lib/deps.sh
source scripts/lib/deps.sh

remora_install_deps
remora_sodium_setup
remora_use_ccache "${repo_root}"
cmake --preset release
cmake --build --preset release -j "${REMORA_JOBS:-$(nproc)}" --target remora_tool

tool=build/release/tools/remora
if [[ ! -x ${tool} ]]; then
  remora_log "${tool} was not built; the remora CLI is missing from tools/"
  exit 1
fi
exec "${tool}" demo "$@"
