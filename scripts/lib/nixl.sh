# shellcheck shell=bash
# scripts/lib/nixl.sh — the NIXL step of scripts/test.sh: NVIDIA's NIXL agent from PyPI in
# the Python step's environment, and the tests of remora's NIXL backend plugin through it
# (tests/nixl/*.py, run against the INSTALLED remora package, whose remora/nixl/ holds
# libplugin_REMORA.so).
#
# Sourced; defines:
#   REMORA_NIXL_WHEEL      the NIXL wheel installed (default nixl-cu12==1.5.1, the release
#                          the plugin supports: plugin/nixl/release.cc, docs/nixl.md)
#   remora_nixl_setup      pip install --no-deps of that wheel into REMORA_VENV (its
#                          dependencies are torch, which the agent does not need, and
#                          numpy, which the Python step installed). Returns 2, saying why,
#                          when it cannot be installed (no network, no wheel for this
#                          platform or Python): the caller then skips the tests.
#   remora_nixl_test [args]   runs pytest on tests/nixl with the venv's python, from outside
#                          the checkout. Needs root for the network-namespace tests (they
#                          skip with the reason otherwise). The installed plugin is
#                          stripped, so the vtable comparison (test_plugin.py) reads the
#                          release preset's build of it (NIXL_ABI_TEST_PLUGIN) when there is one.

REMORA_NIXL_WHEEL=${REMORA_NIXL_WHEEL:-nixl-cu12==1.5.1}

remora_nixl_setup() {
  local py=${REMORA_VENV:-build/venv}/bin/python out
  if [[ ! -x ${py} ]]; then
    echo "no Python environment at ${REMORA_VENV:-build/venv}: run the Python step first"
    return 1
  fi
  if ! out=$("${py}" -m pip install --quiet --no-deps "${REMORA_NIXL_WHEEL}" 2>&1); then
    echo "SKIPPED: ${REMORA_NIXL_WHEEL} cannot be installed here, so the NIXL plugin's tests do not run:"
    echo "${out}" | tail -n 5
    return 2
  fi
  "${py}" -c 'import nixl_cu12, remora.nixl; print("NIXL", nixl_cu12.__name__, "plugin", remora.nixl.plugin_path())'
}

remora_nixl_test() {
  local root venv
  root=$(pwd)
  venv=$(cd "${REMORA_VENV:-build/venv}" && pwd) || return 1
  local unstripped=${root}/build/release/plugin/nixl/libplugin_REMORA.so
  if [[ -f ${unstripped} ]]; then export NIXL_ABI_TEST_PLUGIN=${unstripped}; fi
  (cd "${venv}" && "${venv}/bin/python" -m pytest -q -p no:cacheprovider "${root}/tests/nixl" "$@")
}
