"""Every collective on NumPy arrays across real processes (3 ranks: a non-power of two),
each checked against a reference (collectives.py); and a rank killed mid-job fails the
others instead of hanging."""

from __future__ import annotations

import numpy as np
import pytest

import remora
from conftest import BOUND, free_port, run_peer


def test_every_collective_on_three_processes():
    store = f"127.0.0.1:{free_port()}"
    procs = [run_peer("rank", str(r), "3", store) for r in range(3)]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        outs.append((p.returncode, out))
    assert all(rc == 0 and "ok" in out for rc, out in outs), outs


def test_single_rank_communicator_and_dtype_errors():
    ctx = remora.Context(ignore_env=True)
    comm = remora.Communicator(ctx, rank=0, size=1, store=f"127.0.0.1:{free_port()}", timeout=BOUND)
    assert (comm.rank, comm.size) == (0, 1)
    a = np.arange(10, dtype=np.float32)
    out = np.zeros(10, np.float32)
    comm.allreduce(a, out)
    assert (out == a).all()
    with pytest.raises(remora.InvalidArgument, match="element type"):
        comm.allreduce(np.zeros(4, np.complex64))
    with pytest.raises(remora.InvalidArgument, match="different element types"):
        comm.allreduce(np.zeros(4, np.float32), np.zeros(4, np.float64))
    with pytest.raises(remora.InvalidArgument):
        comm.allreduce(np.zeros(4, np.int32), op="avg")
    comm.allreduce(np.zeros(4, np.int16), dtype="uint8", op="max")  # bytes, by request
    with pytest.raises(remora.InvalidArgument):
        remora.Communicator(ctx, rank=0)
    comm.close()
    ctx.close()


def test_torch_tensors_through_the_same_paths():
    torch = pytest.importorskip("torch")
    ctx = remora.Context(ignore_env=True)
    comm = remora.Communicator(ctx, rank=0, size=1, store=f"127.0.0.1:{free_port()}", timeout=BOUND)
    t = torch.arange(16, dtype=torch.bfloat16)
    out = torch.zeros(16, dtype=torch.bfloat16)
    comm.iallreduce(t, out, op="max").wait(BOUND)
    assert torch.equal(out, t)
    g = torch.zeros(16, dtype=torch.float32)
    comm.allgather(torch.ones(16), g)
    assert torch.equal(g, torch.ones(16))
    comm.close()
    ctx.close()


def test_communicator_abort_and_failure():
    ctx = remora.Context(ignore_env=True)
    comm = remora.Communicator(ctx, rank=0, size=1, store=f"127.0.0.1:{free_port()}", timeout=BOUND)
    assert comm.failure is None and isinstance(comm.id, int)
    comm.abort()
    assert isinstance(comm.failure, remora.Aborted)
    with pytest.raises(remora.Aborted):
        comm.barrier()
    comm.close()
    ctx.close()
