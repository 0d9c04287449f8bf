"""CUDA memory through the installed package: PyTorch CUDA tensors, CuPy arrays and
remora.cuda_empty move through the CUDA domain's staging (docs/python.md).

Each check of cuda_checks.py runs in a child process with REMORA_CUDA_DRIVER set to the
emulated CUDA driver the release build makes (tests/device/emulated_cuda: host memory
behind the driver API, clearly not a GPU), so the package's CUDA paths run on machines
without one; the driver is loaded once per process, which is why each check has its own.
On a GPU machine, REMORA_TEST_CUDA_DRIVER=libcuda.so.1 runs the same checks on the GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EMULATED = HERE.parent.parent / "build" / "release" / "tests" / "libremora_test_emulated_cuda.so"
DRIVER = os.environ.get("REMORA_TEST_CUDA_DRIVER", str(EMULATED))


def run_check(name: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HERE / "cuda_checks.py"), name],
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("check", ["send_recv", "rma", "collective", "lifetime", "demanded_path", "refusals"])
def test_cuda_memory(check):
    if DRIVER == str(EMULATED) and not EMULATED.exists():
        pytest.skip(f"the emulated CUDA driver is built by the release preset ({EMULATED} is missing)")
    out = run_check(check, REMORA_CUDA_DRIVER=DRIVER)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_cuda_tensors_of_frameworks():
    """PyTorch CUDA tensors and CuPy arrays: they exist only on a real GPU."""
    if DRIVER == str(EMULATED):
        pytest.skip("PyTorch and CuPy tensors need a GPU: set REMORA_TEST_CUDA_DRIVER=libcuda.so.1 on one")
    out = run_check("frameworks", REMORA_CUDA_DRIVER=DRIVER)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def test_without_a_driver_every_cuda_entry_point_says_why():
    code = ("import remora, numpy as np\n"
            "for f in (lambda: remora.Context(cuda=True, ignore_env=True), lambda: remora.cuda_empty(16),\n"
            "          lambda: remora.cuda_copy(np.zeros(4, np.uint8), np.zeros(4, np.uint8))):\n"
            "    try:\n"
            "        f()\n"
            "    except remora.Unsupported as e:\n"
            "        assert 'no CUDA driver' in str(e) and 'nowhere' in str(e), str(e)\n"
            "    else:\n"
            "        raise AssertionError('no refusal')\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, REMORA_CUDA_DRIVER="/nowhere/libcuda.so.1"))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
