"""remora vs gloo under torch.distributed, in one run.

    python bench/torch/bench_torch.py [--pairs 5] [--sizes-mib 1 16 64] [--ddp-steps 10]

(with the interpreter of an environment that has torch and remora-torch, e.g.
build/venv/bin/python after scripts/test.sh). It starts torchrun twice: 2 ranks
(allreduce bus bandwidth and a DDP training step) and 4 ranks (allreduce). In each,
the default group is remora and a gloo group spans the same ranks; every measurement
is a pair run back to back (gloo then remora, the order alternating from pair to pair),
and the report gives the median of the pairs and the ratio remora / gloo.

allreduce bus bandwidth: 2 (n - 1) / n x bytes / time (NCCL's convention), fp32.
CPU: the median CPU time (user + system, all threads) of rank 0's process per call,
which says more than wall time on a loaded machine.
DDP step: a wide MLP (1024 -> 8192 -> 2048 -> 1024, 27 M parameters, batch 8), forward,
backward (gradient allreduce through DDP's buckets) and SGD step. The gradients are views
of DDP's buckets (gradient_as_bucket_view=True, PyTorch's advice for speed: it saves two
copies of every gradient per step, for both backends alike); --no-bucket-view turns that off.
Three warm-up steps per backend: DDP rebuilds its buckets in the second. Each pair also
times the same step on a model without DDP, every rank at once: the step with no
communication. "added to the step" is each backend's step less that one, per pair: what
communication costs the step where the ranks' compute shares the CPUs with it.
--bytes-alone adds to each allreduce pair, after both backends, the bytes a ring allreduce
moves over plain loopback sockets with no reduction (BytesRing): a floor for either
backend over TCP. --lean-ring adds, after those, a ring allreduce of plain loopback
sockets with torch's adds and nothing else (LeanRing; its sums are checked first): the
least an allreduce over TCP does.
Ranks of one host: remora's chunks are read by same-host pulls (REMORA_SAME_HOST=off: over
loopback TCP, as gloo's), and remora collapses the buckets it sends again and again into
huge pages (REMORA_PULL_HUGEPAGES=off: left as they are), which the reading kernel pins as
one page where it would walk 512 small ones. --thp gives every rank PyTorch's huge-page
CPU allocator (THP_MEM_ALLOC_ENABLE=1), which speeds up both backends' compute too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def worker(args) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import remora_torch

    dist.init_process_group("remora")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"gloo": dist.new_group(list(range(world)), backend="gloo"), "remora": dist.group.WORLD}
    threads = max(1, (os.cpu_count() or 1) // world)
    torch.set_num_threads(threads)
    results = []

    cpu = {"gloo": [], "remora": [], "bytes": [], "lean": []}  # this process's CPU seconds (all threads) per call
    ring = BytesRing(rank, world, int(os.environ["MASTER_PORT"]) + 50) if args.bytes_alone else None
    lean = LeanRing(rank, world, int(os.environ["MASTER_PORT"]) + 70) if args.lean_ring else None

    def timed(fn, iters: int, name: str) -> float:
        dist.barrier(group=groups["gloo"])
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(iters):
            fn()
        cpu[name].append((time.process_time() - cpu_start) / iters)
        return (time.perf_counter() - start) / iters

    for mib in args.sizes_mib:
        n = mib * (1 << 20) // 4
        t = torch.ones(n)
        iters = max(3, min(50, 256 // mib))
        samples = {"gloo": [], "remora": [], "bytes": [], "lean": []}
        for pair in range(args.pairs):
            order = ["gloo", "remora"] if pair % 2 == 0 else ["remora", "gloo"]
            for name in order:
                g = groups[name]
                dist.all_reduce(t, group=g)  # warm-up
                samples[name].append(timed(lambda g=g: dist.all_reduce(t, group=g), iters, name))
            if ring is not None:
                ring.move(n * 4)  # warm-up
                samples["bytes"].append(timed(lambda: ring.move(n * 4), iters, "bytes"))
            if lean is not None:
                lean.allreduce(t)  # warm-up
                samples["lean"].append(timed(lambda: lean.allreduce(t), iters, "lean"))
        busbw = {k: [2 * (world - 1) / world * n * 4 / s / 1e9 for s in v] for k, v in samples.items()}
        results.append({"what": "allreduce", "ranks": world, "mib": mib,
                        "gloo_GBps": statistics.median(busbw["gloo"]),
                        "remora_GBps": statistics.median(busbw["remora"]),
                        "bytes_GBps": statistics.median(busbw["bytes"]) if ring is not None else None,
                        "bytes_over_gloo": [b / g for g, b in zip(busbw["gloo"], busbw["bytes"])],
                        "lean_GBps": statistics.median(busbw["lean"]) if lean is not None else None,
                        "lean_over_gloo": [b / g for g, b in zip(busbw["gloo"], busbw["lean"])],
                        "ratios": [r / g for g, r in zip(busbw["gloo"], busbw["remora"])],
                        "algorithm": remora_torch.allreduce_algorithm(n * 4),
                        "cpu_ms": {k: statistics.median(v) * 1e3 for k, v in cpu.items() if v}})
        for v in cpu.values():
            v.clear()
    if ring is not None:
        ring.close()

    if args.ddp_steps > 0 and world == 2:
        def mlp():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(1024, 8192), torch.nn.ReLU(), torch.nn.Linear(8192, 2048),
                                       torch.nn.ReLU(), torch.nn.Linear(2048, 1024))
        models = {k: DDP(mlp(), process_group=g, gradient_as_bucket_view=args.bucket_view) for k, g in groups.items()}
        if lean is not None:
            # DDP whose buckets the lean ring sums, one at a time on a thread of its own,
            # while backward goes on: what the least allreduce over TCP adds to the step.
            from concurrent.futures import ThreadPoolExecutor
            pool = ThreadPoolExecutor(max_workers=1)

            def lean_hook(_, bucket):
                fut = torch.futures.Future()

                def run(buf=bucket.buffer()):
                    try:
                        lean.allreduce(buf)
                        fut.set_result(buf.div_(world))
                    except Exception as e:  # the step fails with it, not hangs
                        fut.set_exception(e)

                pool.submit(run)
                return fut

            models["lean"] = DDP(mlp(), process_group=groups["gloo"], gradient_as_bucket_view=args.bucket_view)
            models["lean"].register_comm_hook(None, lean_hook)
        # The same step without DDP, every rank at once: what the step costs with no
        # communication at all, so that each backend's share of the step shows.
        models["local"] = mlp()
        params = sum(p.numel() for p in models["remora"].parameters())
        opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
        x, y = torch.randn(8, 1024), torch.randn(8, 1024)

        def step(k):
            opts[k].zero_grad(set_to_none=False)
            torch.nn.functional.mse_loss(models[k](x), y).backward()
            opts[k].step()

        samples = {"gloo": [], "remora": [], "local": []} | ({"lean": []} if lean is not None else {})
        cpu["local"], cpu["lean"] = [], []
        # Warm-up: DDP builds its buckets in the first step and rebuilds them, in the order
        # the gradients came, in the second; the third is the first of the steady state.
        for k in samples:
            for _ in range(3):
                step(k)
        for pair in range(args.pairs):
            order = ["gloo", "remora"] if pair % 2 == 0 else ["remora", "gloo"]
            for k in order + ["local"] + (["lean"] if lean is not None else []):
                samples[k].append(timed(lambda k=k: step(k), args.ddp_steps, k))
        # Every DDP model must have stayed the same on every rank: a backend or the lean
        # ring that summed wrongly shows here.
        for k, m in models.items():
            if k == "local":
                continue
            flat = torch.cat([p.detach().flatten() for p in m.parameters()])
            low, high = flat.clone(), flat.clone()
            dist.all_reduce(low, op=dist.ReduceOp.MIN, group=groups["gloo"])
            dist.all_reduce(high, op=dist.ReduceOp.MAX, group=groups["gloo"])
            if not torch.equal(low, high):
                raise RuntimeError(f"DDP over {k}: the ranks' parameters differ after the steps")
        if lean is not None:
            pool.shutdown()
        # Communication's share per pair: the step less the compute-only step beside it.
        added = {k: [s - c for s, c in zip(samples[k], samples["local"])] for k in samples if k != "local"}
        results.append({"what": "ddp_step", "ranks": world, "params": params,
                        "gloo_ms": statistics.median(samples["gloo"]) * 1e3,
                        "remora_ms": statistics.median(samples["remora"]) * 1e3,
                        "compute_ms": statistics.median(samples["local"]) * 1e3,
                        "added_ms": {k: statistics.median(v) * 1e3 for k, v in added.items()},
                        "added_ratios": [r / g if g > 0 else float("nan") for g, r in zip(added["gloo"], added["remora"])],
                        "ratios": [r / g for g, r in zip(samples["gloo"], samples["remora"])],
                        "lean_ms": statistics.median(samples["lean"]) * 1e3 if lean is not None else None,
                        "lean_ratios": [r / g for g, r in zip(samples["gloo"], samples.get("lean", []))],
                        "cpu_ms": {k: statistics.median(v) * 1e3 for k, v in cpu.items() if v}})
    if lean is not None:
        lean.close()
    if rank == 0:
        for r in results:
            print("RESULT " + json.dumps(r), flush=True)
    dist.destroy_process_group()


def ring_sockets(rank: int, world: int, base_port: int):
    """A ring of plain loopback TCP sockets among the ranks (ports base_port + rank): the
    socket to the next rank and the one from the rank before, 60 s timeouts, no Nagle."""
    import socket
    import torch.distributed as dist

    listener = socket.create_server(("127.0.0.1", base_port + rank), backlog=1)
    listener.settimeout(60)
    dist.barrier()  # every rank listens before any connects
    out = socket.create_connection(("127.0.0.1", base_port + (rank + 1) % world), timeout=60)
    inc, _ = listener.accept()
    listener.close()
    for s in (out, inc):
        s.settimeout(60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return out, inc


class BytesRing:
    """The bytes a ring allreduce moves, and nothing else: plain TCP sockets on loopback,
    each rank sending 2 (n - 1) / n x size to the next rank while it receives as much from
    the one before, with no reduction, no protocol and no dependence between steps. Both
    backends move at least these bytes through the same kernel, so its time is a floor
    for an allreduce over TCP on this host (--bytes-alone)."""

    PIECE = 1 << 20

    def __init__(self, rank: int, world: int, base_port: int):
        self.world = world
        self.out, self.inc = ring_sockets(rank, world, base_port)
        self.src = memoryview(bytearray(self.PIECE))
        self.dst = memoryview(bytearray(self.PIECE))

    def move(self, nbytes: int) -> None:
        import threading

        total = 2 * (self.world - 1) * nbytes // self.world

        def send() -> None:
            left = total
            while left > 0:
                k = min(left, self.PIECE)
                self.out.sendall(self.src[:k])
                left -= k

        sender = threading.Thread(target=send)
        sender.start()
        left = total
        while left > 0:
            got = self.inc.recv_into(self.dst[:min(left, self.PIECE)])
            if got == 0:
                raise ConnectionError("the rank before closed its ring socket")
            left -= got
        sender.join()

    def close(self) -> None:
        self.out.close()
        self.inc.close()


class LeanRing:
    """The least a ring allreduce over TCP does, in a few lines: plain loopback sockets,
    the ring's 2 (n - 1) / n x size bytes sent out of the tensor and received into it (the
    reduce-scatter's pieces into a 1 MiB scratch, added into the tensor with torch's add),
    each piece passed on as soon as it is summed or has landed. No protocol, no
    notifications, no checks but its own result's (--lean-ring). Against the bytes alone
    it adds touching the tensor's memory and the reduction; against the backends, it
    shows how far a ring of plain sockets gets on this host."""

    PIECE = 1 << 20

    def __init__(self, rank: int, world: int, base_port: int):
        import torch

        self.rank, self.world = rank, world
        self.out, self.inc = ring_sockets(rank, world, base_port)
        self.scratch = torch.empty(self.PIECE // 4)
        # Its own sums must be right before it is timed: every rank contributes rank + 1.
        probe = torch.full((3 * self.PIECE // 4 * world + 5,), float(rank + 1))
        self.allreduce(probe)
        if not bool((probe == world * (world + 1) / 2).all()):
            raise RuntimeError("the lean ring's allreduce summed wrongly")

    def _recv_exactly(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            k = self.inc.recv_into(view[got:])
            if k == 0:
                raise ConnectionError("the rank before closed its ring socket")
            got += k

    def allreduce(self, t) -> None:
        """Sums the fp32 tensor t over the ring, in place."""
        import queue
        import threading

        n, r = self.world, self.rank
        flat = t.view(-1)
        raw = memoryview(flat.numpy()).cast("B")
        base, extra = divmod(flat.numel(), n)
        starts = [b * base + min(b, extra) for b in range(n + 1)]
        step = self.PIECE // 4

        def pieces(b):
            return [(o, min(step, starts[b + 1] - o)) for o in range(starts[b], starts[b + 1], step)]

        ready = queue.SimpleQueue()  # (element offset, count) to send, in order; None ends

        def send() -> None:
            while (item := ready.get()) is not None:
                o, c = item
                self.out.sendall(raw[4 * o:4 * (o + c)])

        for p in pieces(r):  # the reduce-scatter's first step: this rank's own block
            ready.put(p)
        sender = threading.Thread(target=send)
        sender.start()
        try:
            scratch = memoryview(self.scratch.numpy()).cast("B")
            for s in range(n - 1):  # reduce-scatter: sum each piece, then pass it on
                for o, c in pieces((r - s - 1) % n):
                    self._recv_exactly(scratch[:4 * c])
                    flat[o:o + c].add_(self.scratch[:c])
                    ready.put((o, c))
            for s in range(n - 1):  # allgather: into place, passed on but at the last step
                for o, c in pieces((r - s) % n):
                    self._recv_exactly(raw[4 * o:4 * (o + c)])
                    if s < n - 2:
                        ready.put((o, c))
        finally:
            ready.put(None)
            sender.join()

    def close(self) -> None:
        self.out.close()
        self.inc.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--ddp-steps", type=int, default=10)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--bucket-view", action=argparse.BooleanOptionalAction, default=True,
                        help="DDP's gradient_as_bucket_view (default on)")
    parser.add_argument("--thp", action="store_true",
                        help="THP_MEM_ALLOC_ENABLE=1 (C10_THP_MEM_ALLOC_ENABLE=1 in newer PyTorch) for every rank: "
                             "PyTorch's CPU allocator backs tensors of 2 MiB and more with transparent huge pages "
                             "(both backends alike)")
    parser.add_argument("--bytes-alone", action="store_true",
                        help="also time, in each pair, the bytes a ring allreduce moves over plain loopback sockets "
                             "with no reduction: a floor for either backend over TCP")
    parser.add_argument("--lean-ring", action="store_true",
                        help="also time, in each pair, a ring allreduce of plain loopback sockets with torch's adds "
                             "and nothing else: how far the least an allreduce over TCP does gets on this host")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0

    rows = []
    for nproc in args.ranks:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr",
               "127.0.0.1", "--master-port", str(29600 + nproc), os.path.abspath(__file__), "--worker", "--pairs",
               str(args.pairs), "--ddp-steps", str(args.ddp_steps), "--sizes-mib", *map(str, args.sizes_mib),
               "--bucket-view" if args.bucket_view else "--no-bucket-view"] + (["--bytes-alone"] if args.bytes_alone else []) \
            + (["--lean-ring"] if args.lean_ring else [])
        env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // nproc)))
        if args.thp:  # the variable's name changed between PyTorch versions: set both
            env["THP_MEM_ALLOC_ENABLE"] = env["C10_THP_MEM_ALLOC_ENABLE"] = "1"
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stdout, out.stderr, file=sys.stderr)
            return 1
        rows += [json.loads(line[len("RESULT "):]) for line in out.stdout.splitlines() if line.startswith("RESULT ")]

    print(f"# remora vs gloo, median of {args.pairs} back-to-back pairs; host: {os.cpu_count()} CPUs")
    # Ranks of one host: remora reads their chunks out of each other's memory unless
    # REMORA_SAME_HOST=off (docs/protocol.md, "Same-host pulls"); gloo uses loopback TCP.
    thp = "1" if args.thp else os.environ.get("THP_MEM_ALLOC_ENABLE", "unset")
    print(f"# REMORA_SAME_HOST={os.environ.get('REMORA_SAME_HOST', 'auto')}, "
          f"REMORA_PULL_HUGEPAGES={os.environ.get('REMORA_PULL_HUGEPAGES', 'auto')}, THP_MEM_ALLOC_ENABLE={thp}")
    print(f"{'measure':<28}{'gloo':>12}{'remora':>12}{'remora/gloo':>13}  pair ratios")
    for r in rows:
        ratios = " ".join(f"{x:.2f}" for x in r["ratios"])
        if r["what"] == "allreduce":
            label = f"allreduce {r['mib']} MiB, {r['ranks']} ranks"
            ratio = r["remora_GBps"] / r["gloo_GBps"]
            print(f"{label:<28}{r['gloo_GBps']:>9.2f} GB/s{r['remora_GBps']:>7.2f} GB/s{ratio:>10.2f}x  [{ratios}]"
                  f" (busbw; remora runs {r['algorithm']}; CPU ms/call gloo {r['cpu_ms']['gloo']:.1f},"
                  f" remora {r['cpu_ms']['remora']:.1f})")
            # The references, each against gloo in the same pairs.
            for key, label, what in (("bytes", "  the bytes alone", "a ring of plain sockets, no reduction: the floor"),
                                     ("lean", "  a lean ring", "plain sockets and torch's adds, nothing else")):
                if r[f"{key}_GBps"] is None:
                    continue
                over = " ".join(f"{x:.2f}" for x in r[f"{key}_over_gloo"])
                ratio = r[f"{key}_GBps"] / r["gloo_GBps"]
                print(f"{label:<28}{'':>12}{r[f'{key}_GBps']:>7.2f} GB/s{ratio:>10.2f}x  [{over}]"
                      f" ({what}; ratio to gloo; CPU ms/call {r['cpu_ms'][key]:.1f})")
        else:
            label = f"DDP step, {r['ranks']} ranks"
            ratio = r["remora_ms"] / r["gloo_ms"]
            print(f"{label:<28}{r['gloo_ms']:>9.1f} ms{r['remora_ms']:>9.1f} ms{ratio:>10.2f}x  [{ratios}]"
                  f" ({r['params'] / 1e6:.1f} M parameters, bucket view {'on' if args.bucket_view else 'off'}; step time, lower is better; CPU ms/step gloo"
                  f" {r['cpu_ms']['gloo']:.0f}, remora {r['cpu_ms']['remora']:.0f})")
            added = " ".join(f"{x:.2f}" for x in r["added_ratios"])
            label = "  added to the step"
            ratio = statistics.median(r["added_ratios"])
            print(f"{label:<28}{r['added_ms']['gloo']:>9.1f} ms{r['added_ms']['remora']:>9.1f} ms{ratio:>10.2f}x  [{added}]"
                  f" (the step less the same step without DDP, {r['compute_ms']:.1f} ms and CPU ms/step"
                  f" {r['cpu_ms']['local']:.0f}, timed beside it in each pair)")
            if r.get("lean_ms") is not None:
                over = " ".join(f"{x:.2f}" for x in r["lean_ratios"])
                print(f"{'  a lean ring':<28}{'':>12}{r['lean_ms']:>6.1f} ms{r['lean_ms'] / r['gloo_ms']:>10.2f}x  [{over}]"
                      f" (DDP whose buckets the lean ring sums; adds {r['added_ms']['lean']:.1f} ms;"
                      f" CPU ms/step {r['cpu_ms']['lean']:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
