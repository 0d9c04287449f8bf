"""Every Communicator operation on NumPy arrays, each checked against a reference the
rank computes locally from the data every rank is known to contribute (run by
peer.py rank in each process of test_collectives.py). Raises AssertionError on a
mismatch, remora.Error on a failure."""

from __future__ import annotations

import numpy as np


def data(rank: int, n: int, dtype=np.float64) -> np.ndarray:
    return (np.arange(n) * (rank + 1) + rank).astype(dtype)


def run_all(comm) -> None:
    r, size = comm.rank, comm.size
    n = 1000
    everyone = [data(k, n) for k in range(size)]

    comm.barrier()
    comm.ibarrier().wait(60)

    # allreduce: out of place, in place, every op, i-form, an int type
    out = np.zeros(n)
    comm.allreduce(data(r, n), out, "sum")
    np.testing.assert_array_equal(out, sum(everyone))
    buf = data(r, n)
    comm.allreduce(buf, op="max")
    np.testing.assert_array_equal(buf, np.maximum.reduce(everyone))
    buf = data(r, n)
    comm.iallreduce(buf, op="min").wait(60)
    np.testing.assert_array_equal(buf, np.minimum.reduce(everyone))
    buf = data(r, n)
    comm.allreduce(buf, op="avg")
    np.testing.assert_allclose(buf, sum(everyone) / size)
    small = [(data(k, n, np.int64) % 50).astype(np.int32) for k in range(size)]  # no overflow
    ints = small[r].copy()
    comm.allreduce(ints, op="prod")
    np.testing.assert_array_equal(ints, np.prod(np.array(small, np.int64), axis=0))

    # broadcast, reduce
    buf = data(r, n) if r == 1 % size else np.zeros(n)
    comm.broadcast(buf, root=1 % size)
    np.testing.assert_array_equal(buf, everyone[1 % size])
    out = np.zeros(n) if r == 0 else None
    comm.reduce(data(r, n), out, "sum", root=0)
    if r == 0:
        np.testing.assert_array_equal(out, sum(everyone))

    # gather(v), scatter(v), allgather(v)
    out = np.zeros(n * size) if r == 0 else None
    comm.gather(data(r, n), out, root=0)
    if r == 0:
        np.testing.assert_array_equal(out, np.concatenate(everyone))
    counts = [k + 1 for k in range(size)]
    displs = [sum(counts[:k]) for k in range(size)]
    out = np.zeros(sum(counts)) if r == 0 else None
    comm.gatherv(data(r, counts[r]), out, counts, displs, root=0)
    if r == 0:
        np.testing.assert_array_equal(out, np.concatenate([data(k, counts[k]) for k in range(size)]))
    recv = np.zeros(n)
    comm.scatter(np.concatenate(everyone) if r == 0 else None, recv, root=0)
    np.testing.assert_array_equal(recv, everyone[r])
    recv = np.zeros(counts[r])
    src = np.concatenate([data(k, counts[k]) for k in range(size)]) if r == 0 else None
    comm.scatterv(src, counts, displs, recv, root=0)
    np.testing.assert_array_equal(recv, data(r, counts[r]))
    out = np.zeros(n * size)
    comm.allgather(data(r, n), out)
    np.testing.assert_array_equal(out, np.concatenate(everyone))
    out = np.zeros(sum(counts))
    comm.allgatherv(data(r, counts[r]), out, counts, displs)
    np.testing.assert_array_equal(out, np.concatenate([data(k, counts[k]) for k in range(size)]))

    # reduce_scatter, alltoall(v)
    out = np.zeros(n)
    comm.reduce_scatter(np.concatenate([data(r, n) + j for j in range(size)]), out, "sum")
    np.testing.assert_array_equal(out, sum(data(k, n) + r for k in range(size)))
    send = np.concatenate([data(r, n) + 100 * j for j in range(size)])
    out = np.zeros(n * size)
    comm.alltoall(send, out)
    np.testing.assert_array_equal(out, np.concatenate([data(k, n) + 100 * r for k in range(size)]))
    sc = [1] * size
    sd = list(range(size))
    out = np.zeros(size)
    comm.alltoallv(np.arange(size, dtype=np.float64) + 10 * r, sc, sd, out, sc, sd)
    np.testing.assert_array_equal(out, np.array([10 * k + r for k in range(size)], dtype=np.float64))

    # scan, exscan
    out = np.zeros(n)
    comm.scan(data(r, n), out, "sum")
    np.testing.assert_array_equal(out, sum(everyone[: r + 1]))
    out = np.full(n, -1.0)
    comm.exscan(data(r, n), out, "sum")
    if r > 0:
        np.testing.assert_array_equal(out, sum(everyone[:r]))

    # point to point in a ring, and split
    right, left = (r + 1) % size, (r - 1) % size
    got = np.zeros(n)
    req = comm.irecv(got, left, tag=7)
    comm.send(data(r, n), right, tag=7)
    req.wait(60)
    np.testing.assert_array_equal(got, everyone[left])
    sub = comm.split(r % 2, r)
    total = np.array([r], dtype=np.int64)
    sub.allreduce(total)
    assert total[0] == sum(k for k in range(size) if k % 2 == r % 2)
    assert comm.algorithm("allreduce", 1 << 20)[0] in {"ring", "rd", "local"}
    sub.close()
