"""A peer process for the tests (tests/python/conftest.py run_peer).

  peer.py target <address>   connects to <address>, registers 1 MiB (pattern i % 251),
                             sends its key (tag 1), prints "ready", then waits on stdin
                             (the test kills it with SIGKILL)
  peer.py rank <rank> <size> <store>   runs every collective against a local reference
                             (collectives.py) and exits 0 when all matched
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
    comm.close()
    ctx.close()
    print("ok", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "target":
        target(sys.argv[2])
    elif sys.argv[1] == "rank":
        rank(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
