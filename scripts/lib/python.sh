# shellcheck shell=bash
# scripts/lib/python.sh — the Python step of scripts/test.sh: a virtual environment,
# the remora package installed into it from this checkout (pip install .), and its
# pytest suite (tests/python) run against the INSTALLED package, not the source tree.
#
# Sourced; defines:
#   REMORA_VENV                  the environment (default build/venv; reused when present)
#   REMORA_PY_REQUIREMENTS       PyPI packages installed into it (extend it: the torch
#                                backend adds its own with remora_python_require);
#                                matplotlib is for bench/plot.py and its test
#   remora_python_require <pkg...>   adds requirements before remora_python_setup runs
#   remora_python_setup          creates the venv, installs the requirements and the package
#   REMORA_PYTHON_LIBRARY        a libremora.a just built from this tree (scripts/test.sh
#                                passes build/release's): linked instead of compiling the
#                                library again (python/CMakeLists.txt)
#   remora_python_test [args]    runs pytest on tests/python with the venv's python
#
# The package build reuses build/python/ between runs (scikit-build-core's build-dir), so
# a second run recompiles only what changed; ccache is used when present.

REMORA_VENV=${REMORA_VENV:-build/venv}
REMORA_PY_REQUIREMENTS=${REMORA_PY_REQUIREMENTS:-"numpy pytest nanobind>=2.0 scikit-build-core>=0.10 matplotlib"}

remora_python_require() {
  REMORA_PY_REQUIREMENTS="${REMORA_PY_REQUIREMENTS} $*"
}

remora_python_setup() {
  local python=${REMORA_PYTHON:-python3}
  if [[ ! -x ${REMORA_VENV}/bin/python ]]; then
    "${python}" -m venv "${REMORA_VENV}" || return 1
  fi
  # shellcheck disable=SC2086  # the list is word-split on purpose
  "${REMORA_VENV}/bin/python" -m pip install --quiet --upgrade ${REMORA_PY_REQUIREMENTS} || return 1
  local cmake_args=${CMAKE_ARGS:-}
  if [[ -n ${REMORA_PYTHON_LIBRARY:-} ]]; then
    cmake_args="${cmake_args} -DREMORA_PYTHON_LIBRARY=$(realpath "${REMORA_PYTHON_LIBRARY}")"
  else
    cmake_args="${cmake_args} -DREMORA_PYTHON_LIBRARY="
  fi
  if command -v ccache >/dev/null 2>&1; then
    cmake_args="${cmake_args} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache"
  fi
  # --no-build-isolation: build with the venv's nanobind and scikit-build-core (installed
  # above), so that nothing is fetched per build and build/python/ stays valid.
  CMAKE_ARGS="${cmake_args}" CMAKE_BUILD_PARALLEL_LEVEL=${REMORA_JOBS:-$(nproc)} \
    "${REMORA_VENV}/bin/python" -m pip install --quiet --no-build-isolation . || return 1
}

remora_python_test() {
  # From outside the checkout, so that `import remora` finds the installed package.
  local root venv
  root=$(pwd)
  venv=$(cd "${REMORA_VENV}" && pwd) || return 1
  (cd "${venv}" && "${venv}/bin/python" -m pytest -q -p no:cacheprovider "${root}/tests/python" "$@")
}
