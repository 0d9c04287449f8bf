"""The remora backend of torch.distributed, as users run it: the installed
remora-torch package, torchrun, real processes over loopback.

Run with the interpreter of the environment that has torch and remora-torch:
    python -m pytest tests/torch
(scripts/test.sh builds that environment: scripts/lib/torch_env.sh).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# Bounds on whole runs: far above what they take (seconds), so that a hang fails the
# test instead of the suite.
RUN_LIMIT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMORA_", "TORCHELASTIC_"))}
    env["OMP_NUM_THREADS"] = "1"
    # run from outside the source tree: the installed package, not python/torch/src
    env.pop("PYTHONPATH", None)
    return env


def torchrun(nproc: int, script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr",
           "127.0.0.1", "--master-port", str(free_port()), str(HERE / script), *args]
    proc = subprocess.run(cmd, env={**clean_env(), **(env or {})}, cwd="/", capture_output=True, text=True,
                          timeout=RUN_LIMIT_S)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def test_the_installed_package_is_used():
    out = subprocess.run([sys.executable, "-c", "import remora_torch; print(remora_torch.__file__)"], env=clean_env(),
                         cwd="/", capture_output=True, text=True, check=True).stdout
    assert "site-packages" in out, out


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_operation_matches_a_local_reference(nproc):
    out = torchrun(nproc, "ops_check.py").stdout
    # The ranks share one stdout, and a rank's line may land in the middle of another's:
    # find each report wherever it is.
    reports = {int(rank): int(n) for rank, n in re.findall(r"rank (\d+): ops ok: (\d+) checks", out)}
    assert sorted(reports) == list(range(nproc)), out
    assert all(n >= 80 for n in reports.values()), out


def test_every_operation_matches_under_encryption():
    # REMORA_ENCRYPT seals every connection of the backend's endpoints and of the store;
    # same-host pulls off, so that every chunk crosses a sealed TCP stream too.
    sealed = {"REMORA_AUTH_KEY": "torch job secret", "REMORA_ENCRYPT": "on", "REMORA_SAME_HOST": "off"}
    out = torchrun(2, "ops_check.py", env=sealed).stdout
    reports = {int(rank): int(n) for rank, n in re.findall(r"rank (\d+): ops ok: (\d+) checks", out)}
    assert sorted(reports) == [0, 1], out
    assert all(n >= 80 for n in reports.values()), out
    # the ranks' connections really were sealed: every peer's endpoint, on both ranks
    sealed = re.findall(r"rank \d+: sealed peers: (\d+) of (\d+)", out)
    assert len(sealed) == 2 and all(int(s) == int(n) == 1 for s, n in sealed), out


@pytest.mark.parametrize("nproc", [2, 4])
def test_windows_put_signal_and_wait_between_every_pair(nproc):
    out = torchrun(nproc, "window_check.py").stdout
    reports = {int(rank): int(n) for rank, n in re.findall(r"rank (\d+): window ok: (\d+) checks", out)}
    assert sorted(reports) == list(range(nproc)), out
    assert all(n >= 20 for n in reports.values()), out
    # which way the races of a window freed during a put went (both are checked)
    print("\n".join(line for line in out.splitlines() if "freed during a put" in line))


def test_the_backend_builds_against_a_pytorch_without_windows(tmp_path):
    """Every source compiled (syntax and templates) against the installed headers as a
    PyTorch without c10d windows has them: Backend.hpp without its window section and
    C10D_BACKEND_HAS_WINDOW, Window.hpp empty (made here, in a folder searched first)."""
    import sysconfig

    import torch
    import torch.utils.cpp_extension as cpp

    root = HERE.parent.parent
    c10d = "torch/csrc/distributed/c10d"
    backend_hpp = next(Path(p) / c10d / "Backend.hpp" for p in cpp.include_paths()
                       if (Path(p) / c10d / "Backend.hpp").exists())
    text = backend_hpp.read_text()
    declared = "#define C10D_BACKEND_HAS_WINDOW" in text
    if declared:
        # The section runs from its banner to the next one's (2.15's layout; if it
        # moves, index() or the assert below fails and this test needs updating).
        start = text.index("  // Window & One-sided (RMA) API")
        end = text.index("  // Abort Hook API", start)
        text = text[:start] + text[end:]
        text = text.replace("#define C10D_BACKEND_HAS_WINDOW 1", "")
        text = text.replace("#include <torch/csrc/distributed/c10d/Window.hpp>", "")
        code = [line for line in text.splitlines() if not line.strip().startswith("//")]
        assert not [line for line in code if "Window" in line], "Backend.hpp's window section moved: update this test"
    overlay = tmp_path / "headers"
    (overlay / c10d).mkdir(parents=True)
    (overlay / c10d / "Backend.hpp").write_text(text)
    (overlay / c10d / "Window.hpp").write_text("#pragma once\n// no c10d windows in this PyTorch\n")
    flags = ["-std=c++20", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=_C", "-DTORCH_API_INCLUDE_EXTENSION_H",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", f"-I{overlay}",
             f"-I{root / 'include'}", f"-I{root / 'python' / 'torch' / 'csrc'}",
             f"-I{sysconfig.get_paths()['include']}"] + [f"-I{p}" for p in cpp.include_paths()]
    sources = sorted((root / "python" / "torch" / "csrc").glob("*.cc"))
    procs = [subprocess.Popen(["c++", *flags, str(src)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for src in sources]
    for src, p in zip(sources, procs):
        out, _ = p.communicate(timeout=RUN_LIMIT_S)
        assert p.returncode == 0, f"{src.name} without windows:\n{out[-6000:]}"
    # and the module built here has windows exactly where the installed headers declare them
    has = subprocess.run([sys.executable, "-c", "import remora_torch._C as c; print(c.has_windows)"],
                         env=clean_env(), cwd="/", capture_output=True, text=True, check=True).stdout.strip()
    assert has == str(declared), (has, declared)


def test_ddp_training_ends_where_gloo_ends():
    out = torchrun(2, "ddp_check.py", "200").stdout
    assert out.count("ddp ok: 200 steps") == 2, out


def test_a_killed_rank_makes_the_others_raise_not_hang():
    world, victim, timeout_s = 3, 1, 60.0
    port = free_port()
    procs = []
    for rank in range(world):
        env = clean_env()
        env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(HERE / "kill_check.py"), str(victim), str(timeout_s)],
                                      env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    start = time.monotonic()
    outputs = []
    try:
        for p in procs:
            # well inside the group's timeout: the failure must come from the dead peer
            out, err = p.communicate(timeout=max(1.0, timeout_s - (time.monotonic() - start)))
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    report = "\n".join(f"rank {r}: rc {rc}\n{out}\n{err[-3000:]}" for r, (rc, out, err) in enumerate(outputs))
    assert outputs[victim][0] == -signal.SIGKILL, report
    for rank in range(world):
        if rank == victim:
            continue
        rc, out, _ = outputs[rank]
        assert rc == 0, report
        assert "raised after" in out and "next operation failed too" in out, report
        # the dead peer's failure, not the group's timeout
        assert "peer_failed" in out and "timeout" not in out.lower(), report
