"""A rank killed mid-loop (SIGKILL) makes the other ranks raise, not hang.

Started by tests/torch/test_torch_backend.py as separate processes with torchrun's
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), not under torchrun itself:
torchrun's agent would end the survivors as soon as one worker dies, hiding whether
they would have hung. Usage: kill_check.py VICTIM_RANK TIMEOUT_S
Each survivor prints "raised after <s> s: <error>" and exits 0 once an operation
fails; the victim kills itself with SIGKILL after a few iterations.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    victim, timeout_s = int(sys.argv[1]), float(sys.argv[2])
    dist.init_process_group("remora", timeout=datetime.timedelta(seconds=timeout_s))
    rank = dist.get_rank()
    t = torch.ones(1 << 16)
    start = None
    for i in range(1_000_000):
        if rank == victim and i == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        if i == 20:
            start = time.monotonic()
        try:
            dist.all_reduce(t)
            t.fill_(1.0)
        except dist.DistBackendError as e:
            took = time.monotonic() - (start or time.monotonic())
            print(f"rank {rank}: raised after {took:.2f} s at iteration {i}: {str(e).splitlines()[0]}", flush=True)
            # the group stays broken: the next operation fails at once too
            try:
                dist.all_reduce(t)
            except dist.DistBackendError:
                print(f"rank {rank}: next operation failed too", flush=True)
                os._exit(0)  # skip teardown with a dead peer
            print(f"rank {rank}: next operation did not fail", flush=True)
            os._exit(3)
    print(f"rank {rank}: the loop ended without an error", flush=True)
    return 2


if __name__ == "__main__":
    sys.exit(main())
