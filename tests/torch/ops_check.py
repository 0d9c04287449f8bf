"""Every operation of the remora backend against a reference computed locally.

Run under torchrun (tests/torch/test_torch_backend.py does, with 2 and 4 processes):
    python -m torch.distributed.run --nproc-per-node N tests/torch/ops_check.py
Inputs are small integers (or values built from them), so results compare exactly.
Each rank prints "ops ok: <count> checks" at the end; any mismatch raises.
"""

from __future__ import annotations

import datetime
import os
import sys

import remora_torch
import torch
import torch.distributed as dist

CHECKS = 0


def check(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    global CHECKS
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError(f"rank {dist.get_rank()}: {name}: got {got!r}, want {want!r}")
    CHECKS += 1


def expect_error(name: str, kind, fn) -> str:
    global CHECKS
    try:
        fn()
    except kind as e:  # noqa: PERF203
        CHECKS += 1
        return str(e)
    raise AssertionError(f"rank {dist.get_rank()}: {name}: no {kind.__name__} raised")


def base(rank: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Rank r's input: small integers depending on r and the position."""
    if dtype == torch.bool:
        return (torch.arange(n) + rank) % 3 == 0
    return ((torch.arange(n, dtype=torch.int64) * 7 + rank * 3) % 11 + 1).to(dtype)


def ones_twos(rank: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """Values 1 and 2, so that products stay small in every dtype."""
    return ((torch.arange(n, dtype=torch.int64) + rank) % 2 + 1).to(dtype)


def reference(inputs: list[torch.Tensor], op) -> torch.Tensor:
    wide = [t.to(torch.float64) if t.is_floating_point() else t.to(torch.int64) for t in inputs]
    stack = torch.stack(wide)
    if op == dist.ReduceOp.SUM:
        out = stack.sum(0)
    elif op == dist.ReduceOp.PRODUCT:
        out = stack.prod(0)
    elif op == dist.ReduceOp.MIN:
        out = stack.min(0).values
    elif op == dist.ReduceOp.MAX:
        out = stack.max(0).values
    elif op == dist.ReduceOp.AVG:
        out = stack.sum(0) / len(inputs)
    else:
        raise ValueError(op)
    return out.to(inputs[0].dtype)


REDUCE_DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
                 torch.float64]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.AVG]


def inputs_for(op, dtype, world: int, n: int) -> list[torch.Tensor]:
    make = ones_twos if op == dist.ReduceOp.PRODUCT else base
    return [make(r, n, dtype) for r in range(world)]


def main() -> None:
    dist.init_process_group("remora", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "remora", dist.get_backend()
    n = 37  # not a multiple of anything

    # allreduce: every dtype x every op (AVG: floating types only)
    for dtype in REDUCE_DTYPES:
        for op in OPS:
            if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
                continue
            ins = inputs_for(op, dtype, world, n)
            t = ins[rank].clone()
            dist.all_reduce(t, op=op)
            check(f"all_reduce {dtype} {op}", t, reference(ins, op))
    for op in (dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT):
        ins = [base(r, n, torch.bool) for r in range(world)]
        t = ins[rank].clone()
        dist.all_reduce(t, op=op)
        want = torch.stack(ins).all(0) if op != dist.ReduceOp.MAX else torch.stack(ins).any(0)
        check(f"all_reduce bool {op}", t, want)
    # a non-contiguous tensor, and an empty one
    ins = [base(r, 24, torch.float32).view(4, 6).t() for r in range(world)]
    t = ins[rank].clone().t().contiguous().t()  # same strides as the transposed view
    assert not t.is_contiguous()
    dist.all_reduce(t)
    check("all_reduce non-contiguous", t, reference(ins, dist.ReduceOp.SUM))
    e = torch.empty(0)
    dist.all_reduce(e)
    check("all_reduce empty", e, torch.empty(0))

    # allreduce_coalesced
    shapes = [(3,), (2, 5), (7,)]
    ins = [[base(r + i, torch.Size(s).numel(), torch.float32).view(s) for i, s in enumerate(shapes)]
           for r in range(world)]
    ts = [t.clone() for t in ins[rank]]
    dist.all_reduce_coalesced(ts)
    for i in range(len(shapes)):
        check(f"all_reduce_coalesced {i}", ts[i], reference([ins[r][i] for r in range(world)], dist.ReduceOp.SUM))

    # unsupported reductions: a clear NotImplementedError naming the dtype / op
    msg = expect_error("int16 all_reduce", NotImplementedError, lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)))
    assert "Short" in msg or "int16" in msg, msg
    msg = expect_error("BAND all_reduce", NotImplementedError,
                       lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.BAND))
    assert "ReduceOp" in msg, msg
    expect_error("AVG int32", NotImplementedError,
                 lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.AVG))

    # broadcast and reduce from every root; movement works for any dtype (int16, complex)
    for root in range(world):
        for dtype in (torch.float32, torch.int16, torch.complex64, torch.bfloat16):
            t = base(rank, n, torch.float32).to(dtype)
            dist.broadcast(t, src=root)
            check(f"broadcast root {root} {dtype}", t, base(root, n, torch.float32).to(dtype))
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
            ins = inputs_for(op, torch.int64, world, n)
            t = ins[rank].clone()
            dist.reduce(t, dst=root, op=op)
            check(f"reduce root {root} {op}", t, reference(ins, op) if rank == root else ins[rank])

    # allgather: list form, into one tensor, coalesced
    outs = [torch.empty(n, dtype=torch.float16) for _ in range(world)]
    dist.all_gather(outs, base(rank, n, torch.float16))
    for r in range(world):
        check(f"all_gather block {r}", outs[r], base(r, n, torch.float16))
    out = torch.empty(world * n, dtype=torch.int32)
    dist.all_gather_into_tensor(out, base(rank, n, torch.int32))
    check("all_gather_into_tensor", out, torch.cat([base(r, n, torch.int32) for r in range(world)]))
    pg = dist.distributed_c10d._get_default_group()
    ins2 = [base(rank, 5, torch.float32), base(rank + 1, 3, torch.int64)]
    outs2 = [torch.empty(world * 5, dtype=torch.float32), torch.empty(world * 3, dtype=torch.int64)]
    pg.allgather_into_tensor_coalesced(outs2, ins2).wait()
    check("allgather_into_tensor_coalesced 0", outs2[0], torch.cat([base(r, 5, torch.float32) for r in range(world)]))
    check("allgather_into_tensor_coalesced 1", outs2[1], torch.cat([base(r + 1, 3, torch.int64) for r in range(world)]))

    # all_gather_coalesced: tensors of several shapes (an empty one, non-contiguous ones)
    # in one call, every rank's list into every rank; complex tensors; and, through the
    # process group (torch.distributed insists on one dtype), several dtypes at once
    def coalesced_inputs(r: int, dtypes) -> list[torch.Tensor]:
        return [base(r, 6, dtypes[0]).view(2, 3), torch.empty(0, dtype=dtypes[1]), base(r, 5, dtypes[2]),
                base(r, 8, dtypes[3]).view(2, 4).t()]

    for dtypes in ([torch.float32] * 4, [torch.complex64] * 4, [torch.float32, torch.int64, torch.int8, torch.float64]):
        ins3 = coalesced_inputs(rank, dtypes)
        outs3 = [[torch.full_like(t, 0) for t in ins3] for _ in range(world)]
        outs3[0][0] = outs3[0][0].t().contiguous().t()  # a non-contiguous output too
        if len(set(dtypes)) == 1:
            dist.all_gather_coalesced(outs3, ins3)
        else:
            pg.allgather_coalesced(outs3, ins3, dist.distributed_c10d.AllgatherOptions()).wait()
        for r in range(world):
            for i, w in enumerate(coalesced_inputs(r, dtypes)):
                check(f"all_gather_coalesced {dtypes[i]} rank {r} tensor {i}", outs3[r][i], w)
    msg = expect_error("all_gather_coalesced shapes", RuntimeError,
                       lambda: dist.all_gather_coalesced([[torch.empty(2)] for _ in range(world)], [torch.empty(3)]))
    assert "does not match input 0" in msg, msg

    # reduce_scatter: list form, from one tensor, coalesced
    full = [base(r, world * n, torch.float32) for r in range(world)]
    want_full = reference(full, dist.ReduceOp.SUM)
    out = torch.empty(n)
    dist.reduce_scatter(out, list(full[rank].split(n)))
    check("reduce_scatter", out, want_full[rank * n:(rank + 1) * n])
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.AVG):
        out = torch.empty(n, dtype=torch.bfloat16)
        full_b = [t.to(torch.bfloat16) for t in full]
        dist.reduce_scatter_tensor(out, full_b[rank].clone(), op=op)
        check(f"reduce_scatter_tensor {op}", out, reference(full_b, op)[rank * n:(rank + 1) * n])
    outs2 = [torch.empty(4), torch.empty(2, dtype=torch.int64)]
    ins2 = [base(rank, world * 4, torch.float32), base(rank, world * 2, torch.int64)]
    pg.reduce_scatter_tensor_coalesced(outs2, ins2, dist.ReduceScatterOptions()).wait()
    check("reduce_scatter_tensor_coalesced 0", outs2[0],
          reference([base(r, world * 4, torch.float32) for r in range(world)], dist.ReduceOp.SUM)[rank * 4:rank * 4 + 4])
    check("reduce_scatter_tensor_coalesced 1", outs2[1],
          reference([base(r, world * 2, torch.int64) for r in range(world)], dist.ReduceOp.SUM)[rank * 2:rank * 2 + 2])

    # gather and scatter from every root
    for root in range(world):
        gl = [torch.empty(n, dtype=torch.int64) for _ in range(world)] if rank == root else None
        dist.gather(base(rank, n, torch.int64), gl, dst=root)
        if rank == root:
            for r in range(world):
                check(f"gather root {root} block {r}", gl[r], base(r, n, torch.int64))
        out = torch.empty(n, dtype=torch.float64)
        sl = [base(100 + r, n, torch.float64) for r in range(world)] if rank == root else None
        dist.scatter(out, sl, src=root)
        check(f"scatter root {root}", out, base(100 + rank, n, torch.float64))

    # all_to_all_single: equal blocks, then uneven splits (rows of 3 elements)
    inp = torch.arange(world * 4, dtype=torch.int32) + 100 * rank
    out = torch.empty(world * 4, dtype=torch.int32)
    dist.all_to_all_single(out, inp)
    check("all_to_all_single", out, torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.int32) + 100 * r
                                               for r in range(world)]))
    # rank r sends (r + p) % 3 + 1 rows to rank p
    send_rows = [(rank + p) % 3 + 1 for p in range(world)]
    recv_rows = [(p + rank) % 3 + 1 for p in range(world)]
    inp = torch.arange(sum(send_rows) * 3, dtype=torch.float32).view(-1, 3) + 1000 * rank
    out = torch.empty(sum(recv_rows), 3)
    dist.all_to_all_single(out, inp, output_split_sizes=recv_rows, input_split_sizes=send_rows)
    want = []
    for p in range(world):
        rows_from_p = [(p + q) % 3 + 1 for q in range(world)]
        start = sum(rows_from_p[:rank])
        want.append(torch.arange(sum(rows_from_p) * 3, dtype=torch.float32).view(-1, 3)[start:start + rows_from_p[rank]]
                    + 1000 * p)
    check("all_to_all_single uneven", out, torch.cat(want))
    # all_to_all (lists, sizes differ by destination)
    ins = [torch.full((p + 1,), rank * 10 + p, dtype=torch.int64) for p in range(world)]
    outs = [torch.empty(rank + 1, dtype=torch.int64) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for p in range(world):
        check(f"all_to_all from {p}", outs[p], torch.full((rank + 1,), p * 10 + rank, dtype=torch.int64))

    # barrier
    dist.barrier()

    # send / recv around the ring, blocking and with isend/irecv and batch_isend_irecv
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    if rank % 2 == 0:
        dist.send(base(rank, n, torch.float32), dst=nxt, tag=7)
        t = torch.empty(n)
        dist.recv(t, src=prv, tag=7)
    else:
        t = torch.empty(n)
        dist.recv(t, src=prv, tag=7)
        dist.send(base(rank, n, torch.float32), dst=nxt, tag=7)
    check("send/recv ring", t, base(prv, n, torch.float32))
    t = torch.empty(n, dtype=torch.int16)
    ops = [dist.P2POp(dist.isend, base(rank, n, torch.int16), nxt), dist.P2POp(dist.irecv, t, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check("batch_isend_irecv", t, base(prv, n, torch.int16))

    # recv from any rank: every rank sends two messages to rank 0, which takes them in
    # whatever order they come; each rank's two arrive in send order
    if rank == 0:
        got = {}
        for i in range(2 * (world - 1)):
            t = torch.empty(n, dtype=torch.int32)
            if i % 2 == 0:
                sender = dist.recv(t, tag=11)
            else:
                w = dist.irecv(t, tag=11)
                w.wait()
                sender = w._source_rank()
            assert 0 < sender < world, sender
            seq = len(got.setdefault(sender, []))
            check(f"recv from any rank: {sender} #{seq}", t, base(sender * 10 + seq, n, torch.int32))
            got[sender].append(seq)
        assert sorted(got) == list(range(1, world)) and all(v == [0, 1] for v in got.values()), got
    else:
        dist.send(base(rank * 10, n, torch.int32), dst=0, tag=11)
        dist.send(base(rank * 10 + 1, n, torch.int32), dst=0, tag=11)
    dist.barrier()

    # async works and futures (what DDP communication hooks use)
    t = base(rank, n, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    want = reference([base(r, n, torch.float32) for r in range(world)], dist.ReduceOp.SUM)
    check("future then", fut.wait(), want * 2)
    assert work.is_completed() and work.is_success()
    check("work result", work.result()[0], want)
    works = [dist.all_reduce(base(rank, n, torch.float32) * i, async_op=True) for i in range(5)]
    for w in works:
        w.wait()

    # a subgroup (ranks 1, 3, ... with 4 processes; 0 and 1 with 2) runs its own communicator
    members = list(range(1, world, 2)) if world >= 4 else [0, 1]
    sub = dist.new_group(members, backend="remora")
    if rank in members:
        t = base(rank, n, torch.float64)
        dist.all_reduce(t, group=sub)
        check("subgroup all_reduce", t, reference([base(r, n, torch.float64) for r in members], dist.ReduceOp.SUM))

    # the group's timeout bounds a recv that nothing answers; the failure reaches the peer
    short = dist.new_group(list(range(world)), backend="remora", timeout=datetime.timedelta(seconds=2))
    if rank == 0:
        msg = expect_error("recv timeout", dist.DistBackendError,
                           lambda: dist.recv(torch.empty(4), src=1, group=short, tag=99))
        # the group's 2 s, not the default group's 60 s nor remora's own bound
        assert "recv did not complete within the process group's timeout of 2000 ms" in msg, msg
    dist.barrier()  # the default group is unaffected
    if rank == 1:
        # rank 0's timeout broke the communicator on both ranks: this rank's next
        # operation fails with the peer's failure, not after its own 2 s
        msg = expect_error("peer of the timed-out recv", dist.DistBackendError,
                           lambda: dist.all_reduce(torch.ones(4), group=short))
        assert "timeout" not in msg.lower() and ("peer" in msg or "abort" in msg), msg
    dist.barrier()

    conn = remora_torch.connections()
    print(f"rank {rank}: sealed peers: {conn['sealed_peers']} of {conn['peers']}", flush=True)
    print(f"rank {rank}: ops ok: {CHECKS} checks", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
