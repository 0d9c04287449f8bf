"""Every Endpoint, Listener, Context, Region, RemoteKey, Pool and Buffer call, over real
loopback sockets; data compared byte for byte."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import remora
from conftest import BOUND, Pair


def pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_send_recv_every_size(pair):
    for size in (0, 1, 4096, 70_000, 1 << 20):
        msg = pattern(size, size)
        buf = np.zeros(size + 5, np.uint8)
        r = pair.target.recv(buf, 9)
        pair.init.send(msg, 9).wait(BOUND)
        r.wait(BOUND)
        assert r.done and r.bytes == size and r.tag == 9
        assert (buf[:size] == msg).all()


def test_send_accepts_bytes_bytearray_memoryview(pair):
    buf = bytearray(64)
    for i, obj in enumerate((b"x" * 10, bytearray(b"y" * 20), memoryview(b"z" * 30))):
        r = pair.target.recv(buf, i)
        pair.init.send(obj, i).wait(BOUND)
        r.wait(BOUND)
        assert bytes(buf[: r.bytes]) == bytes(obj)


def test_put_get_notify_flush(pair):
    mem = np.zeros(2 << 20, np.uint8)
    region = pair.target_ctx.register(mem, remora.Access.ALL)
    key = remora.RemoteKey.from_bytes(region.remote_key().to_bytes())
    data = pattern(1 << 20, 1)
    pair.init.put(data, key, 100, notify=42).wait(BOUND)
    n = pair.target.wait_notification(BOUND)
    assert (n.value, n.region, n.offset, n.length) == (42, region.id, 100, 1 << 20)
    assert (mem[100 : 100 + (1 << 20)] == data).all()
    assert pair.target.poll_notification() is None
    back = np.zeros(5000, np.uint8)
    pair.init.get(back, key, 100).wait(BOUND)
    assert (back == data[:5000]).all()
    # fire-and-forget puts, then flush as the fence
    for i in range(10):
        pair.init.put(np.full(10, i, np.uint8), key, i * 10)
    pair.init.flush().wait(BOUND)
    assert (mem[:100] == np.repeat(np.arange(10, dtype=np.uint8), 10)).all()
    stats = pair.init.stats()
    assert stats["puts"] >= 11 and stats["gets"] == 1


def test_atomics(pair):
    words = np.zeros(4, np.uint64)
    region = pair.target_ctx.register(words, remora.Access.ALL)  # keys die with their region
    key = region.remote_key()
    r = pair.init.fetch_add(key, 8, 5)
    r.wait(BOUND)
    assert r.value == 0 and words[1] == 5
    r = pair.init.compare_swap(key, 8, 5, 77)
    r.wait(BOUND)
    assert r.value == 5 and words[1] == 77
    r = pair.init.compare_swap(key, 8, 5, 1)
    r.wait(BOUND)
    assert r.value == 77 and words[1] == 77  # no swap
    with pytest.raises(remora.InvalidArgument):
        pair.init.fetch_add(key, 3, 1).wait(BOUND)  # misaligned


def test_put_batch_two_regions_one_notification(pair):
    a = np.zeros(1 << 20, np.uint8)
    b = np.zeros(1 << 20, np.uint8)
    ra, rb = pair.target_ctx.register(a), pair.target_ctx.register(b)
    pieces = [pattern(s, s) for s in (100, 70_000, 300_000, 1)]
    items = [(pieces[0], ra.remote_key(), 0), (pieces[1], rb.remote_key(), 10),
             (pieces[2], ra.remote_key(), 1000), (pieces[3], rb.remote_key(), 500_000)]
    r = pair.init.put_batch(items, notify=0xAB)
    r.wait(BOUND)
    assert r.bytes == sum(p.size for p in pieces)
    n = pair.target.wait_notification(BOUND)
    assert (n.value, n.region, n.offset, n.length) == (0xAB, rb.id, 500_000, 0)
    assert (a[:100] == pieces[0]).all() and (b[10:70_010] == pieces[1]).all()
    assert (a[1000:301_000] == pieces[2]).all() and b[500_000] == pieces[3][0]
    assert pair.target.poll_notification() is None
    # get_batch reads them back
    outs = [np.zeros(p.size, np.uint8) for p in pieces]
    pair.init.get_batch([(o, k, off) for o, (_, k, off) in zip(outs, items)]).wait(BOUND)
    for o, p in zip(outs, pieces):
        assert (o == p).all()


def test_put_batch_failure_sends_no_notification(pair):
    mem = np.zeros(4096, np.uint8)
    region = pair.target_ctx.register(mem)
    key = region.remote_key()
    with pytest.raises(remora.OutOfRange):
        pair.init.put_batch([(np.ones(10, np.uint8), key, 0), (np.ones(10, np.uint8), key, 4090)],
                            notify=1).wait(BOUND)
    assert (mem[:10] == 1).all()  # the good item landed
    assert pair.target.poll_notification() is None
    with pytest.raises(remora.InvalidArgument):
        pair.init.put_batch([], notify=1).wait(BOUND)
    pair.init.put_batch([]).wait(BOUND)


def test_remote_key_bytes_pickle_window(pair):
    mem = np.zeros(1000, np.uint8)
    region = pair.target_ctx.register(mem, remora.Access.ALL)
    key = region.remote_key()
    assert len(key.to_bytes()) == 40
    assert pickle.loads(pickle.dumps(key)) == key
    window = region.remote_key(offset=100, length=50, access=remora.Access.REMOTE_READ)
    assert (window.offset, window.length) == (100, 50)
    with pytest.raises(remora.AccessDenied):
        pair.init.put(np.ones(4, np.uint8), window, 0).wait(BOUND)
    with pytest.raises(remora.InvalidArgument):
        remora.RemoteKey.from_bytes(b"short")
    assert region.size == 1000 and region.valid and region.obj is mem


def test_pool_and_buffers(pair):
    pool = remora.Pool(pair.target_ctx, arena_bytes=1 << 20)
    buf = pool.allocate(10_000)
    assert buf.size == 10_000 and buf.capacity >= 10_000
    view = buf.view()
    pair.init.put(pattern(10_000, 3), buf.remote_key(), 0).wait(BOUND)
    assert (view == pattern(10_000, 3)).all()
    # a Buffer is memory too: send from it
    got = np.zeros(10_000, np.uint8)
    r = pair.init.recv(got, 3)
    pair.target.send(buf, 3).wait(BOUND)
    r.wait(BOUND)
    assert (got == view).all()
    assert pool.stats()["buffers_in_use"] == 1
    buf.release()
    assert pool.stats()["buffers_in_use"] == 0


def test_context_options_and_listener():
    ctx = remora.Context(ignore_env=True, streams_per_endpoint=3, wait_timeout_ms=1234)
    assert ctx.config()["streams_per_endpoint"] == 3 and ctx.config()["wait_timeout_ms"] == 1234
    lst = ctx.listen("127.0.0.1:0")
    assert lst.port > 0 and lst.address.endswith(str(lst.port))
    other = remora.Context(ignore_env=True, streams_per_endpoint=3)  # the connector's count counts
    ep = other.connect(lst.address, BOUND)
    acc = lst.accept(BOUND)
    assert ep.data_streams == 3 and acc.data_streams == 3
    assert not ep.failed and ep.failure is None
    ep.close()
    buf = np.zeros(1, np.uint8)
    with pytest.raises(remora.PeerFailed):
        acc.recv(buf, 1).wait(BOUND)
    assert acc.closed_by_peer
    lst.close()
    ctx.progress()
    other.close()
    ctx.close()
    with pytest.raises(remora.Aborted):
        ctx.listen("127.0.0.1:0")


def test_help_says_what_the_header_says():
    assert "Completes when the TARGET placed every byte" in remora.Endpoint.put.__doc__
    assert "notification" in remora.Endpoint.put_batch.__doc__
    for name in ("send", "recv", "get", "fetch_add", "compare_swap", "flush", "wait_notification"):
        assert getattr(remora.Endpoint, name).__doc__


def test_notification_with_many_pairs():
    p = Pair()
    try:
        mem = np.zeros(64, np.uint8)
        region = p.target_ctx.register(mem)
        key = region.remote_key()
        for v in range(5):
            p.init.put(np.full(8, v, np.uint8), key, v * 8, notify=v).wait(BOUND)
        assert [p.target.wait_notification(BOUND).value for _ in range(5)] == list(range(5))
    finally:
        p.close()


def test_accessors_abort_and_options():
    p = Pair(pin_mode=remora.PinMode.TRY, log_level=remora.LogLevel.WARN, spin_us=0)
    try:
        assert p.init_ctx.config()["pin_mode"] == remora.PinMode.TRY and p.init_ctx.config()["spin_us"] == 0
        assert p.init.peer_address.endswith(str(p.listener.port)) and isinstance(p.init.id, int)
        mem = np.zeros(4096, np.uint8)
        region = p.target_ctx.register(mem, remora.Access.LOCAL_WRITE | remora.Access.REMOTE_READ)
        assert region.access == remora.Access.LOCAL_WRITE | remora.Access.REMOTE_READ
        assert isinstance(region.pinned, bool)
        pool = remora.Pool(p.target_ctx, arena_bytes=1 << 20)
        buf = pool.allocate(100)
        assert len(buf) == 100 and buf.region_offset + buf.capacity <= 1 << 20
        assert isinstance(buf.region_id, int)
        pending = p.target.recv(np.zeros(8, np.uint8), 1)
        p.init.abort()  # the peer fails as if this side had died
        with pytest.raises(remora.PeerFailed):
            pending.wait(BOUND)
        assert p.target.failed and not p.target.closed_by_peer
        assert isinstance(p.init.failure, remora.Aborted)
    finally:
        p.close()


def test_workers_move_chunks_of_messages_puts_and_gets_intact():
    # progress_threads=3: two workers per context put chunks of 64 KiB or more on the
    # data streams and take them off (same-host pulls off, so the chunks travel on the
    # streams).
    p = Pair(progress_threads=3, same_host_pulls=False, eager_limit=4096, chunk_bytes=256 * 1024)
    try:
        assert p.init_ctx.config()["progress_threads"] == 3
        size = (3 << 20) + 12345  # chunks whole and one cut short
        msg = pattern(size, 7)
        buf = np.zeros(size, np.uint8)
        r = p.target.recv(buf, 1)
        p.init.send(msg, 1).wait(BOUND)
        r.wait(BOUND)
        assert r.bytes == size and (buf == msg).all()

        mem = np.zeros(size + 64, np.uint8)
        region = p.target_ctx.register(mem, remora.Access.ALL)
        key = region.remote_key()
        data = pattern(size, 8)
        p.init.put(data, key, 32, notify=5).wait(BOUND)
        assert p.target.wait_notification(BOUND).value == 5
        assert (mem[32 : 32 + size] == data).all()
        assert not mem[:32].any() and not mem[32 + size :].any()  # nothing outside

        back = np.zeros(size, np.uint8)
        p.init.get(back, key, 32).wait(BOUND)
        assert (back == data).all()
        # The message and the put landed through the target's workers, the get's reply
        # through the initiator's.
        assert p.target.stats()["worker_jobs"] > 0 and p.target.stats()["worker_bytes"] > 0
        assert p.init.stats()["worker_jobs"] > 0
        # The message and the put left through the initiator's workers, the get's reply
        # through the target's.
        assert p.init.stats()["worker_send_jobs"] > 0 and p.init.stats()["worker_send_bytes"] > 2 << 20
        assert p.target.stats()["worker_send_bytes"] > 1 << 20
    finally:
        p.close()
