"""One-sided windows of the remora backend (c10d's Window: put, signal, wait_signal).

Run under torchrun (tests/torch/test_torch_backend.py does, with 2 and 4 processes):
    python -m torch.distributed.run --nproc-per-node N tests/torch/window_check.py
Each rank prints "window ok: <count> checks" at the end, and for each freeing case
which way the race went; any mismatch raises.
"""

from __future__ import annotations

import datetime
import gc

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import WaitSignalOptions, WindowAccessType

CHECKS = 0
BLOCK = 300_000  # int64 elements a rank puts into each peer: 2.3 MiB, several chunks


def check(name: str, ok: bool, detail: str = "") -> None:
    global CHECKS
    if not ok:
        raise AssertionError(f"rank {dist.get_rank()}: {name} {detail}")
    CHECKS += 1


def expect_error(name: str, fn, *needles: str) -> str:
    global CHECKS
    try:
        fn()
    except RuntimeError as e:  # DistBackendError and c10::Error are RuntimeErrors
        msg = str(e)
        for n in needles:
            if n not in msg:
                raise AssertionError(f"rank {dist.get_rank()}: {name}: {n!r} not in {msg!r}") from e
        CHECKS += 1
        return msg
    raise AssertionError(f"rank {dist.get_rank()}: {name}: nothing raised")


def payload(src: int, dst: int, n: int) -> torch.Tensor:
    """What rank src puts into rank dst: distinct per pair and position."""
    return torch.arange(n, dtype=torch.int64) * 7 + src * 1_000_003 + dst * 10_007


def no_pending_signal(win, peer: int) -> None:
    opts = WaitSignalOptions()
    opts.timeout = datetime.timedelta(milliseconds=300)
    expect_error(f"extra signal from {peer}", lambda: win.wait_signal(peer, False, opts), "timeout")


def every_rank_into_every_other(rank: int, world: int) -> None:
    mem = torch.full((world * BLOCK,), -1, dtype=torch.int64)
    win = dist._new_window(mem)
    works = []
    for p in range(world):
        if p == rank:
            continue
        data = payload(rank, p, BLOCK)
        half = BLOCK // 3
        # two puts (each signals p once) and one explicit signal: 3 signals per pair
        works.append(win.put(data[:half], p, rank * BLOCK, True))
        works.append(win.put(data[half:], p, rank * BLOCK + half, True))
        works.append(win.signal(p, True))
    for p in range(world):
        if p == rank:
            continue
        for _ in range(3):
            win.wait_signal(p, False)
    for w in works:
        w.wait()
    for p in range(world):
        if p == rank:
            check(f"own block {p} untouched", bool((mem[p * BLOCK:(p + 1) * BLOCK] == -1).all()))
        else:
            check(f"block from {p}", torch.equal(mem[p * BLOCK:(p + 1) * BLOCK], payload(p, rank, BLOCK)))
    # Every signal sent was counted above: after a barrier (every put and signal
    # completed, so queued at its target) none is left.
    dist.barrier()
    for p in range(world):
        if p != rank:
            no_pending_signal(win, p)
    # A put to this rank itself: a local copy that signals this rank once.
    win.put(torch.arange(5, dtype=torch.int64) + 900, rank, rank * BLOCK + 10, False)
    win.wait_signal(rank, False)
    check("self put", torch.equal(mem[rank * BLOCK + 10:rank * BLOCK + 15], torch.arange(5) + 900))
    no_pending_signal(win, rank)

    # What a remora window is and is not.
    check("map own tensor", win.map_remote_tensor(rank).data_ptr() == mem.data_ptr())
    check("attr self", win.get_attr(rank).access_type == WindowAccessType.UNIFIED)
    peer = (rank + 1) % world
    check("attr peer", win.get_attr(peer).access_type == WindowAccessType.SEPARATE)
    expect_error("map a peer", lambda: win.map_remote_tensor(peer), "cannot map", "put and signal")
    expect_error("dtype", lambda: win.put(torch.ones(3), peer, 0, False), "Float", "Long")
    expect_error("range", lambda: win.put(torch.ones(3, dtype=torch.int64), peer, world * BLOCK - 2, False),
                 "does not fit")
    expect_error("negative offset", lambda: win.put(torch.ones(1, dtype=torch.int64), peer, -1, False), "offset")
    expect_error("bad rank", lambda: win.put(torch.ones(1, dtype=torch.int64), world, 0, False), "not in the group")
    expect_error("bad rank signal", lambda: win.signal(-1, False), "not in the group")
    # A wait that times out takes nothing and breaks nothing.
    no_pending_signal(win, peer)
    t = torch.ones(3)
    dist.all_reduce(t)
    check("group after a timed-out wait", torch.equal(t, torch.full((3,), float(world))))

    win.tensor_deregister()
    expect_error("put after deregister", lambda: win.put(torch.ones(1, dtype=torch.int64), peer, 0, False),
                 "before tensor_register")
    # Registered again, with another dtype and size per rank.
    mem2 = torch.zeros(rank + 3, dtype=torch.float64)
    win.tensor_register(mem2)
    win.put(torch.tensor([rank + 0.5], dtype=torch.float64), peer, 1, False)
    prev = (rank - 1) % world
    win.wait_signal(prev, False)
    check("second registration", mem2[1].item() == prev + 0.5)
    dist.barrier()
    del win
    gc.collect()


def unregistered_window(rank: int, world: int) -> None:
    win = dist._new_window()
    peer = (rank + 1) % world
    expect_error("put unregistered", lambda: win.put(torch.ones(1), peer, 0, False), "before tensor_register")
    expect_error("wait unregistered", lambda: win.wait_signal(peer, False), "before tensor_register")
    expect_error("empty tensor", lambda: win.tensor_register(torch.empty(0)), "at least one element")
    dist.barrier()


def target_frees_during_put(rank: int, world: int, n: int) -> str:
    """Rank 0 frees its window while rank 1's large put into it is in flight: the put
    either completed first (every byte landed) or fails with invalid_key; either way
    not one byte of rank 0's tensor changes once the window is freed."""
    mem = torch.zeros(n if rank == 0 else 1, dtype=torch.int64)
    win = dist._new_window(mem)
    outcome = ""
    if rank == 1:
        data = payload(1, 0, n)
        work = win.put(data, 0, 0, True)
        dist.send(torch.ones(1), 0)  # "posted"
        try:
            work.wait()
            ok = 1
        except RuntimeError as e:
            check("freed target's error", "invalid_key" in str(e), str(e))
            ok = 0
        dist.send(torch.tensor([float(ok)]), 0)
        outcome = "completed before the free" if ok else "refused (invalid_key)"
    elif rank == 0:
        dist.recv(torch.empty(1), 1)
        del win  # deregisters: waits for the put's writes in progress, then revokes
        gc.collect()
        snapshot = mem.clone()
        result = torch.empty(1)
        dist.recv(result, 1)  # the put has ended at rank 1
        check("nothing written after the free", torch.equal(mem, snapshot))
        landed = int((snapshot == payload(1, 0, n)).sum())
        if result.item() == 1:
            check("completed put landed whole", landed == n)
            outcome = "completed before the free"
        else:
            outcome = f"refused (invalid_key) with {landed} of {n} elements in place when freed"
    if rank != 0:
        del win
        gc.collect()
    dist.barrier()
    return outcome


def initiator_frees_during_put(rank: int, world: int, n: int) -> None:
    """Rank 1 frees its window right after posting a large put: the put still completes
    (the work holds what it needs) and rank 0 gets every byte."""
    mem = torch.zeros(n if rank == 0 else 1, dtype=torch.int64)
    win = dist._new_window(mem)
    if rank == 1:
        work = win.put(payload(1, 0, n), 0, 0, True)
        del win
        gc.collect()
        work.wait()
        check("put outlives its window", work.is_completed())
    elif rank == 0:
        win.wait_signal(1, False)
        check("bytes of a freed initiator's put", torch.equal(mem, payload(1, 0, n)))
    dist.barrier()


def main() -> None:
    dist.init_process_group("remora", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    import remora_torch

    check("built with windows", remora_torch._C.has_windows)
    check("supports_window", dist._supports_window())
    every_rank_into_every_other(rank, world)
    unregistered_window(rank, world)
    n = 8 << 20  # 64 MiB of int64
    outcomes = [target_frees_during_put(rank, world, n) for _ in range(3)]
    initiator_frees_during_put(rank, world, n)
    if rank in (0, 1):
        print(f"rank {rank}: target freed during a put: {outcomes}", flush=True)
    dist.barrier()
    print(f"rank {rank}: window ok: {CHECKS} checks", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
