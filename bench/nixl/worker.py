"""bench/nixl/worker.py — one side of bench/nixl/nixl_compare.py: a NIXL agent with one
backend (REMORA, or NIXL's own UCX), driven over stdin/stdout by the comparison script.

  target     registers its memory, prints "MD <base64 agent metadata> <base address>",
             then waits for "quit" (it makes no call for transfers to complete: NIXL's
             transfers are one-sided)
  initiator  reads the target's line, registers its own memory, prepares one transfer per
             workload (single buffers of --sizes MiB, and a list of --blocks blocks of
             --block-size bytes, placed apart on both sides and in reverse order on the
             target) and operation (WRITE, READ), then measures in --rounds rounds: in each,
             every workload in turn (the order rotating from round to round), posting its
             transfer again and again, one in flight at a time, until --sample-mib have
             moved; prints "RES <round> <workload> <op> <bytes> <seconds>" per measurement
             and "END". Interleaving makes the ratio of two workloads of one run (the block
             list against one 16 MiB buffer) robust against a host whose load changes.

Nothing is checked here (tests/nixl checks every byte of the same transfers); a transfer
that fails or runs past 60 s ends the run with an error.
"""
import argparse
import base64
import sys
import time

import numpy as np

try:
    from nixl_cu12 import nixl_agent, nixl_agent_config
except ImportError:  # the meta package, or a CUDA 13 wheel
    from nixl import nixl_agent, nixl_agent_config  # type: ignore

MIB = 1 << 20


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--role", choices=["target", "initiator"], required=True)
    p.add_argument("--backend", default="REMORA")
    p.add_argument("--sizes", default="1,16,64", help="MiB")
    p.add_argument("--blocks", type=int, default=256)
    p.add_argument("--block-size", type=int, default=64 * 1024)
    p.add_argument("--sample-mib", type=int, default=128)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--ops", default="WRITE,READ")
    return p.parse_args()


def layout(a):
    """Bytes each side needs: the largest single buffer, then the block area after it."""
    largest = max(int(s) for s in a.sizes.split(",")) * MIB
    local_blocks = a.blocks * 2 * a.block_size  # a gap of one block after each
    remote_blocks = a.blocks * 3 * a.block_size  # two blocks of gap, reversed order
    return largest, local_blocks, remote_blocks


def wait(agent, handle, deadline_s=60.0):
    """Posts `handle` and polls it until it is done, as the frameworks do (the clock is read
    every 1024 polls only: it is not what is measured)."""
    state = agent.transfer(handle)
    end = time.monotonic() + deadline_s
    polls = 0
    while state == "PROC":
        state = agent.check_xfer_state(handle)
        polls += 1
        if polls % 1024 == 0 and time.monotonic() > end:
            sys.exit("transfer did not finish within 60 s")
    if state != "DONE":
        sys.exit(f"transfer failed: {state}")


def main():
    a = parse()
    largest, local_blocks, remote_blocks = layout(a)
    agent = nixl_agent(f"{a.role}-{a.backend}", nixl_agent_config(backends=[a.backend]))
    if a.role == "target":
        mem = np.zeros(largest + remote_blocks, dtype=np.uint8)
        registered = agent.register_memory([(mem.ctypes.data, mem.nbytes, 0, "")], "DRAM")
        md = base64.b64encode(agent.get_agent_metadata()).decode()
        print(f"MD {md} {mem.ctypes.data}", flush=True)
        for line in sys.stdin:
            if line.strip() == "quit":
                break
        # Before the array goes: left to the interpreter's exit, the agent may deregister
        # memory numpy has already given back (remora then warns that munlock failed).
        agent.deregister_memory(registered)
        return

    words = []
    while not words or words[0] != "MD":
        words = sys.stdin.readline().split()
    remote_name = agent.add_remote_agent(base64.b64decode(words[1]))
    rbase = int(words[2])
    mem = np.empty(largest + local_blocks, dtype=np.uint8)
    mem[:] = 1  # every page touched: no page fault is timed
    registered = agent.register_memory([(mem.ctypes.data, mem.nbytes, 0, "")], "DRAM")
    lbase = mem.ctypes.data
    workloads = []
    for s in a.sizes.split(","):
        n = int(s) * MIB
        workloads.append((f"{s}MiB", [(lbase, n, 0)], [(rbase, n, 0)]))
    bs = a.block_size
    local = [(lbase + largest + i * 2 * bs, bs, 0) for i in range(a.blocks)]
    remote = [(rbase + largest + (a.blocks - 1 - i) * 3 * bs, bs, 0) for i in range(a.blocks)]
    workloads.append((f"{a.blocks}x{bs // 1024}KiB", local, remote))

    handles = {}
    for name, ldesc, rdesc in workloads:
        for op in a.ops.split(","):
            h = agent.initialize_xfer(op, agent.get_xfer_descs(ldesc, "DRAM"), agent.get_xfer_descs(rdesc, "DRAM"),
                                      remote_name)
            wait(agent, h)  # warm-up, and the connection
            handles[(name, op)] = (h, sum(d[1] for d in ldesc))
    keys = list(handles)
    for r in range(a.rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            h, total = handles[k]
            iters = max(2, (a.sample_mib * MIB) // total)
            t0 = time.perf_counter()
            for _ in range(iters):
                wait(agent, h)
            dt = time.perf_counter() - t0
            print(f"RES {r} {k[0]} {k[1]} {total * iters} {dt:.6f}", flush=True)
    for h, _ in handles.values():
        agent.release_xfer_handle(h)
    agent.deregister_memory(registered)
    print("END", flush=True)


if __name__ == "__main__":
    main()
