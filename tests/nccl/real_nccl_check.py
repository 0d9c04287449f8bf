"""A real NCCL carrying its traffic through remora's net plugin: two ranks on ONE GPU.

NCCL needs a GPU per rank but not a GPU per machine: it tells hosts apart by a hash of
the host name and boot id, which `NCCL_HOSTID` replaces (src/misc/utils.cc), and it
refuses two ranks on one GPU only when they are on the same host (src/init.cc). So two
ranks on GPU 0 with different `NCCL_HOSTID`s are two "hosts" to NCCL, which can then
reach each other only through its network transport: the net plugin named by
`NCCL_NET_PLUGIN` (remora), or its own socket transport.

Run under torchrun with 2 processes (scripts/gpu_check.sh, stage `nccl`):

    NCCL_NET_PLUGIN=remora NCCL_NET=remora NCCL_DEBUG=INFO \\
        torchrun --nproc_per_node 2 tests/nccl/real_nccl_check.py --label remora --json out.json

For every size from 4 B to 256 MiB (by 16x) it runs allreduce (sum), broadcast (from each
rank), all_gather_into_tensor and a send/recv exchange both ways, of int32 CUDA tensors
whose expected contents are known element by element, compares the results exactly
(torch.equal, on the GPU), and times each operation (CUDA-synchronised, median of a few
iterations). Rank 0 prints one line per operation and size and writes the JSON; any
mismatch exits 1.

`--cpu-self-check` runs the same checks on CPU tensors over gloo with small sizes: it
exercises this script's own checking (CI runs it, also with `--self-check-corrupt`, which
must make it fail), nothing of NCCL or of the plugin.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

SIZES = [4 << (4 * i) for i in range(7)] + [256 << 20]  # 4 B, 64 B, ..., 64 MiB, 256 MiB
SELF_CHECK_SIZES = [4, 64, 1024, 16384, 262144, 1 << 20]


def pattern(count, seed, device):
    """int32 values that differ per element and per seed, small enough that sums of a few
    ranks never overflow."""
    i = torch.arange(count, dtype=torch.int64, device=device)
    return ((i * 2654435761 + seed * 40503) % 1000003).to(torch.int32)


def timed(fn, device, iters):
    """Runs fn `iters` times; the median seconds of one run (CUDA-synchronised)."""
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


CORRUPT = None  # --self-check-corrupt: the operation whose result rank 1 spoils before checking


def check(name, size, got, want):
    if CORRUPT and name.startswith(CORRUPT) and dist.get_rank() == 1:
        got = got.clone()
        got[-1] += 1
    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        first = int(bad[0][0]) if bad.numel() else -1
        print(f"MISMATCH {name} {size} B: {bad.shape[0]} elements differ, first at {first}", flush=True)
        sys.exit(1)


def run_size(size, rank, world, device, iters):
    count = max(1, size // 4)
    results = {}

    # allreduce: every rank contributes pattern(rank); the sum is known element by element.
    want = sum(pattern(count, r, device) for r in range(world))
    t = pattern(count, rank, device)

    def allreduce():
        t.copy_(pattern(count, rank, device))
        dist.all_reduce(t)

    results["allreduce"] = timed(allreduce, device, iters)
    check("allreduce", size, t, want)

    # broadcast from each root.
    for root in range(world):
        b = torch.empty(count, dtype=torch.int32, device=device)

        def broadcast():
            if rank == root:
                b.copy_(pattern(count, 100 + root, device))
            else:
                b.fill_(-1)
            dist.broadcast(b, src=root)

        results[f"broadcast_from_{root}"] = timed(broadcast, device, iters)
        check(f"broadcast from {root}", size, b, pattern(count, 100 + root, device))

    # all_gather_into_tensor: rank r's chunk is pattern(200 + r).
    mine = pattern(count, 200 + rank, device)
    gathered = torch.empty(count * world, dtype=torch.int32, device=device)
    results["allgather"] = timed(lambda: dist.all_gather_into_tensor(gathered, mine), device, iters)
    check("allgather", size, gathered, torch.cat([pattern(count, 200 + r, device) for r in range(world)]))

    # send/recv both ways at once: rank r sends pattern(300 + r) to its neighbour.
    peer = (rank + 1) % world
    src = (rank - 1) % world
    out = pattern(count, 300 + rank, device)
    into = torch.empty(count, dtype=torch.int32, device=device)

    def exchange():
        into.fill_(-1)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, into, src)])
        for r in reqs:
            r.wait()

    results["sendrecv"] = timed(exchange, device, iters)
    check("sendrecv", size, into, pattern(count, 300 + src, device))
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="remora", help="what the run measures (remora, socket)")
    parser.add_argument("--json", help="rank 0 writes the results here")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--cpu-self-check", action="store_true", help="gloo on CPU tensors, small sizes")
    parser.add_argument("--self-check-corrupt", metavar="OP",
                        help="with --cpu-self-check: rank 1 spoils one element of OP's result (the check must fail)")
    args = parser.parse_args()
    global CORRUPT
    CORRUPT = args.self_check_corrupt if args.cpu_self_check else None

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if args.cpu_self_check:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
        sizes = SELF_CHECK_SIZES
    else:
        # Before NCCL initialises: each rank another "host", so only the network joins them.
        os.environ["NCCL_HOSTID"] = f"remora-gpu-check-{os.environ.get('MASTER_PORT', '0')}-rank{rank}"
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
        sizes = SIZES

    rows = []
    for size in sizes:
        res = run_size(size, rank, world, device, args.iters)
        for op, seconds in res.items():
            moved = max(4, size // 4 * 4) * (world if op == "allgather" else 1)
            rows.append({"label": args.label, "op": op, "bytes": size, "seconds": seconds,
                         "algbw_GBps": moved / seconds / 1e9})
            if rank == 0:
                print(f"{args.label:8s} {op:18s} {size:>11d} B  {seconds * 1e6:11.1f} us  "
                      f"{moved / seconds / 1e9:8.3f} GB/s  verified", flush=True)
    if rank == 0:
        version = ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None
        summary = {"label": args.label, "world": world, "nccl": version, "torch": torch.__version__, "rows": rows}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=1)
        print(f"{args.label}: every operation at every size verified", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
