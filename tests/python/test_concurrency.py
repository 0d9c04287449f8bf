"""The GIL is released while remora waits and works (another Python thread runs and
completes the wait), and Requests are awaitable from asyncio without a thread per
request."""

from __future__ import annotations

import asyncio
import os
import threading

import numpy as np
import pytest

import remora
from conftest import BOUND


def test_a_wait_lets_another_python_thread_complete_it(pair):
    # The main thread waits; only a Python thread can send what it waits for. If the wait
    # held the GIL, that thread could not run and the wait would time out.
    got = np.zeros(1 << 20, np.uint8)
    r = pair.target.recv(got, 1)
    progress = []

    def sender():
        progress.append("started")
        pair.init.send(np.full(1 << 20, 4, np.uint8), 1).wait(BOUND)
        progress.append("sent")

    t = threading.Thread(target=sender)
    t.start()
    r.wait(BOUND)
    t.join(BOUND)
    assert progress == ["started", "sent"] and (got == 4).all()


def test_wait_notification_and_accept_release_the_gil(pair):
    mem = np.zeros(8, np.uint8)
    region = pair.target_ctx.register(mem)
    t = threading.Thread(target=lambda: pair.init.put(np.ones(8, np.uint8), region.remote_key(), 0,
                                                      notify=5).wait(BOUND))
    t.start()
    assert pair.target.wait_notification(BOUND).value == 5
    t.join(BOUND)
    lst = pair.target_ctx.listen("127.0.0.1:0")
    eps = []
    t = threading.Thread(target=lambda: eps.append(pair.init_ctx.connect(lst.address, BOUND)))
    t.start()
    accepted = lst.accept(BOUND)
    t.join(BOUND)
    assert len(eps) == 1 and not accepted.failed


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_asyncio_awaits_many_requests_without_threads(pair):
    mem = np.zeros(1 << 20, np.uint8)
    region = pair.target_ctx.register(mem)
    key = region.remote_key()

    async def main():
        before = _threads()
        bufs = [np.zeros(1000, np.uint8) for _ in range(50)]
        recvs = [pair.target.recv(b, 100 + i) for i, b in enumerate(bufs)]
        puts = [pair.init.put(np.full(1000, i, np.uint8), key, i * 1000) for i in range(50)]
        for i in range(50):
            pair.init.send(np.full(1000, i, np.uint8), 100 + i)
        done = await asyncio.gather(*recvs, *puts)
        during = _threads()
        assert all(isinstance(d, remora.Request) and d.done for d in done)
        assert all((b == i).all() for i, b in enumerate(bufs))
        assert all((mem[i * 1000 : (i + 1) * 1000] == i).all() for i in range(50))
        assert during == before, "awaiting must not start threads"
        # an error is raised in the awaiting task
        raw = bytearray(key.to_bytes())
        raw[8] ^= 0xFF
        with pytest.raises(remora.InvalidKey):
            await pair.init.put(np.ones(4, np.uint8), remora.RemoteKey.from_bytes(bytes(raw)), 0)
        # an already-completed request
        r = pair.init.put(np.ones(4, np.uint8), key, 0)
        r.wait(BOUND)
        assert (await r) is r
        # a batch, awaited alongside a timer: the loop keeps running while it is in flight
        tick = asyncio.create_task(asyncio.sleep(0))
        await pair.init.put_batch([(np.ones(10, np.uint8), key, 0)], notify=3)
        await tick
        return True

    assert asyncio.run(asyncio.wait_for(main(), BOUND))
    assert pair.target.wait_notification(BOUND).value == 3
