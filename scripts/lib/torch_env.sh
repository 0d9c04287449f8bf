# shellcheck shell=bash
# Sourced by scripts/test.sh: the PyTorch backend's environment and tests.
#
#   remora_torch_env    creates or reuses the virtual environment build/venv and makes
#                       PyTorch, NumPy, scikit-build-core and pytest importable in it
#                       (and expecttest, which PyTorch's own test suite imports), then
#                       builds and installs ./python/torch (remora-torch) into it
#   remora_torch_tests  runs tests/torch with that environment's pytest (PyTorch's
#                       distributed suite over remora included: test_distributed_suite.py)
#
# PyTorch from PyPI is ~4 GB installed (its CUDA libraries come with it: `import torch`
# loads them even on a machine without a GPU, so `--no-deps` does not work) and takes
# minutes to install. It is therefore installed once per machine and Python version
# into a cache outside the checkout (REMORA_TORCH_CACHE, default
# ~/.cache/remora/torch-pyX.Y, with `pip install --target`), and build/venv sees it
# through a .pth file: a fresh clone (CI) reuses it. Delete the folder to upgrade.
#
# Environment: REMORA_JOBS (compile jobs, default nproc), REMORA_TORCH_CACHE.
# Needs python3 with venv and its development headers (Debian: python3-venv python3-dev).

# The environment, shared with the Python package's tests (tests/python).
remora_torch_venv() { printf '%s\n' build/venv; }

remora_torch_cache() {
  local pyver
  pyver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")') || return
  printf '%s\n' "${REMORA_TORCH_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/remora/torch-py${pyver}}"
}

remora_torch_env() {
  local venv py cache site
  venv=$(remora_torch_venv)
  py=${venv}/bin/python
  cache=$(remora_torch_cache) || return
  if [[ ! -x ${py} ]]; then
    python3 -m venv "${venv}" || return
  fi
  if [[ ! -f ${cache}/.complete ]]; then
    remora_log "installing torch, numpy, scikit-build-core and pytest into ${cache} (once; minutes)"
    rm -rf "${cache}"
    "${py}" -m pip install -q --target "${cache}" torch numpy 'scikit-build-core>=0.10' pytest || return
    touch "${cache}/.complete"
  fi
  site=$("${py}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return
  printf '%s\n' "$(cd "${cache}" && pwd)" >"${site}/remora-torch-cache.pth"
  "${py}" -c 'import torch, numpy, scikit_build_core, pytest' || return
  # PyTorch's test helpers (torch.testing._internal) import expecttest, which the torch
  # wheel does not bring: small and pure Python, so into the environment itself.
  if ! "${py}" -c 'import expecttest' 2>/dev/null; then
    "${py}" -m pip install -q expecttest || return
  fi
  local launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache -Ccmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
  # The library just built by the release preset (scripts/test.sh), if any: linked
  # instead of compiled again.
  if [[ -n ${REMORA_PYTHON_LIBRARY:-} ]]; then
    launcher+=(-Ccmake.define.REMORA_PYTHON_LIBRARY="$(realpath "${REMORA_PYTHON_LIBRARY}")")
  else
    launcher+=(-Ccmake.define.REMORA_PYTHON_LIBRARY=)
  fi
  CMAKE_BUILD_PARALLEL_LEVEL=${REMORA_JOBS:-$(nproc)} \
    "${py}" -m pip install -q --no-build-isolation --no-deps "${launcher[@]}" ./python/torch
}

remora_torch_tests() {
  local venv
  venv=$(remora_torch_venv)
  "${venv}/bin/python" -m pytest -q -p no:cacheprovider tests/torch
}
