"""The real-NCCL check of scripts/gpu_check.sh (tests/nccl/real_nccl_check.py) needs a GPU;
here its checking logic runs on CPU tensors over gloo (--cpu-self-check), so that the script
the GPU stage depends on is exercised on every test run. This says nothing about NCCL or
the plugin: docs/nccl.md says what ran on a GPU.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "nccl" / "real_nccl_check.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_check(*extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMORA_", "TORCHELASTIC_"))}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), str(SCRIPT), "--cpu-self-check", "--iters", "2", *extra]
    return subprocess.run(cmd, env=env, cwd="/", capture_output=True, text=True, timeout=240)


def test_the_gpu_stages_check_script_verifies_every_operation(tmp_path):
    out_json = tmp_path / "out.json"
    proc = self_check("--label", "selfcheck", "--json", str(out_json))
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "selfcheck: every operation at every size verified" in proc.stdout, proc.stdout
    rows = json.loads(out_json.read_text())["rows"]
    ops = {(r["op"], r["bytes"]) for r in rows}
    for op in ("allreduce", "broadcast_from_0", "broadcast_from_1", "allgather", "sendrecv"):
        for size in (4, 64, 1024, 16384, 262144, 1 << 20):
            assert (op, size) in ops, (op, size)


def test_the_gpu_stages_check_script_fails_on_a_wrong_element():
    for op in ("allreduce", "broadcast", "allgather", "sendrecv"):
        proc = self_check("--self-check-corrupt", op)
        assert proc.returncode != 0, f"{op}: a spoiled result passed\n{proc.stdout}"
        assert f"MISMATCH {op}" in proc.stdout, proc.stdout
