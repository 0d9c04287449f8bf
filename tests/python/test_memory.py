"""Zero-copy: registration and transfers use the objects' own memory (an array changed
through remora is the same memory), NumPy and PyTorch CPU tensors alike; and lifetime:
an object stays alive while an operation on it is outstanding, though every Python
reference is dropped."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import remora
from conftest import BOUND


def test_registered_array_is_the_memory_remora_writes(pair):
    mem = np.zeros(1 << 20, np.uint8)
    region = pair.target_ctx.register(mem)
    assert region.address == mem.ctypes.data and region.size == mem.nbytes
    view = mem[1000:2000]  # a view of the same memory, taken before the put
    pair.init.put(np.full(1000, 9, np.uint8), region.remote_key(), 1000).wait(BOUND)
    assert (view == 9).all() and np.shares_memory(view, mem)


def test_recv_and_get_fill_the_callers_array_in_place(pair):
    dst = np.zeros(100_000, np.float32)
    before = dst.ctypes.data
    r = pair.target.recv(dst, 1)
    pair.init.send(np.arange(100_000, dtype=np.float32), 1).wait(BOUND)
    r.wait(BOUND)
    assert dst.ctypes.data == before and (dst == np.arange(100_000)).all()
    # a slice of a bigger array receives into exactly its part
    big = np.zeros(300, np.uint8)
    r = pair.target.recv(big[100:200], 2)
    pair.init.send(np.ones(100, np.uint8), 2).wait(BOUND)
    r.wait(BOUND)
    assert big[:100].sum() == 0 and (big[100:200] == 1).all() and big[200:].sum() == 0


def test_send_from_a_region_and_buffer_view(pair):
    pool = remora.Pool(pair.init_ctx, arena_bytes=1 << 20)
    buf = pool.allocate(4096)
    buf.view()[:] = 7
    got = np.zeros(4096, np.uint8)
    r = pair.target.recv(got, 1)
    pair.init.send(buf, 1).wait(BOUND)
    r.wait(BOUND)
    assert (got == 7).all()


def test_torch_cpu_tensors_in_place(pair):
    torch = pytest.importorskip("torch")
    t = torch.zeros(1000, dtype=torch.float32)
    region = pair.target_ctx.register(t)
    assert region.address == t.data_ptr()
    pair.init.put(torch.arange(1000, dtype=torch.float32), region.remote_key(), 0).wait(BOUND)
    assert torch.equal(t, torch.arange(1000, dtype=torch.float32))
    out = torch.empty(500, dtype=torch.bfloat16)
    r = pair.target.recv(out, 3)
    pair.init.send(torch.ones(500, dtype=torch.bfloat16), 3).wait(BOUND)
    r.wait(BOUND)
    assert torch.equal(out, torch.ones(500, dtype=torch.bfloat16))
    with pytest.raises(remora.InvalidArgument, match="contiguous"):
        pair.init.send(torch.zeros(10, 10).t(), 1)


class Tracked(np.ndarray):
    """An array that reports its contents when it is finally destroyed."""

    finals: list = []

    def __del__(self):
        Tracked.finals.append(bytes(np.asarray(self)))


def test_a_receive_keeps_its_array_alive_after_every_reference_is_gone(pair):
    Tracked.finals.clear()
    arr = np.zeros(1 << 20, np.uint8).view(Tracked)
    r = pair.target.recv(arr, 5)
    del arr, r  # neither the array nor the request is referenced any more
    gc.collect()
    assert Tracked.finals == [], "an outstanding receive must hold its buffer"
    payload = np.random.default_rng(5).integers(0, 256, 1 << 20, dtype=np.uint8)
    pair.init.send(payload, 5).wait(BOUND)
    # Once the receive completed, the next remora call lets the array go; it then holds
    # exactly what was sent (the transfer landed in live memory).
    for _ in range(10000):
        pair.init.flush().wait(BOUND)
        gc.collect()
        if Tracked.finals:
            break
    assert len(Tracked.finals) == 1, "a completed operation must let its buffer go"
    assert Tracked.finals[0] == payload.tobytes()


def test_a_put_source_dropped_before_completion_still_lands(pair):
    mem = np.zeros(4 << 20, np.uint8)
    region = pair.target_ctx.register(mem)
    key = region.remote_key()
    requests = []
    for i in range(4):
        src = np.full(1 << 20, i + 1, np.uint8)
        requests.append(pair.init.put(src, key, i << 20))
        del src
        gc.collect()
    for r in requests:
        r.wait(BOUND)
    for i in range(4):
        assert (mem[i << 20 : (i + 1) << 20] == i + 1).all()


def test_region_holds_its_array_and_bytearray_cannot_resize(pair):
    ba = bytearray(4096)
    region = pair.target_ctx.register(ba)
    with pytest.raises(BufferError):
        ba.extend(b"x")  # exported to remora: its memory cannot move
    pair.init.put(b"hello", region.remote_key(), 0).wait(BOUND)
    assert bytes(ba[:5]) == b"hello"
    arr = np.zeros(10, np.uint8)
    alive = weakref.ref(arr)
    region2 = pair.target_ctx.register(arr)
    del arr
    gc.collect()
    assert alive() is not None and region2.obj is alive()
