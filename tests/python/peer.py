"""A peer process for the tests (tests/python/conftest.py run_peer).

  peer.py target <address>   connects to <address>, registers 1 MiB (pattern i % 251),
                             sends its key (tag 1), prints "ready", then waits on stdin
                             (the test kills it with SIGKILL)
  peer.py rank <rank> <size> <store>   runs every collective against a local reference
                             (collectives.py) and exits 0 when all matched
  peer.py shrink <rank> <size> <store>   joins, passes a barrier; the last rank prints
                             "ready" and waits on stdin (the test kills it), the others
                             call a barrier that the death breaks, ask failed_ranks(),
                             shrink them out, allreduce on the new communicator and print
                             one JSON line of what they saw
"""

from __future__ import annotations

import sys

import numpy as np

import remora


def target(address: str) -> None:
    ctx = remora.Context(ignore_env=True)
    ep = ctx.connect(address, 30)
    mem = (np.arange(1 << 20) % 251).astype(np.uint8)
    region = ctx.register(mem, remora.Access.ALL)
    ep.send(region.remote_key().to_bytes(), 1).wait(30)
    print("ready", flush=True)
    sys.stdin.readline()  # until killed (or the test closes stdin)
    ep.close()


def rank(r: int, n: int, store: str) -> None:
    from collectives import run_all

    ctx = remora.Context(ignore_env=True)
    comm = remora.Communicator(ctx, rank=r, size=n, store=store, timeout=60)
    run_all(comm)
    held = comm.connections()
    # Every collective of run_all has run (alltoall included): an endpoint to each other
    # rank, 1 control + its data streams each; the process holds at least those. Counted
    # before the barrier, which keeps the others from closing theirs meanwhile.
    comm.barrier()
    assert held["peers"] == n - 1, held
    assert held["sockets"] == (n - 1) * (1 + ctx.config()["streams_per_endpoint"]), held
    assert held["descriptor_limit"] >= held["descriptors"] >= held["sockets"], held
    # Ranks of one host: a segment all of them map, or a reason why not.
    assert held["segment_ranks"] in (0, n) and (held["segment_ranks"] == 0) == bool(held["no_segment"]), held
    comm.close()
    ctx.close()
    print("ok", flush=True)


def shrink(r: int, n: int, store: str) -> None:
    import json

    ctx = remora.Context(ignore_env=True)
    comm = remora.Communicator(ctx, rank=r, size=n, store=store, timeout=60)
    comm.barrier()
    if r == n - 1:
        print("ready", flush=True)
        sys.stdin.readline()  # killed meanwhile
        return
    error = None
    try:
        comm.barrier()  # the last rank never calls it: only its death ends it
    except remora.Error as e:
        error = type(e).__name__
    failed = comm.failed_ranks(30)
    new = comm.shrink(failed, timeout=60)
    buf = np.full(8, float(new.rank + 1))
    new.allreduce(buf)
    print(json.dumps({"error": error, "failed": failed, "rank": new.rank, "size": new.size,
                      "epoch": new.epoch, "sum": buf.tolist()}), flush=True)
    new.close()
    comm.close()
    ctx.close()


if __name__ == "__main__":
    if sys.argv[1] == "target":
        target(sys.argv[2])
    elif sys.argv[1] == "rank":
        rank(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "shrink":
        shrink(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
