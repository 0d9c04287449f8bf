"""asyncio support: ``await request``. One eventfd per event loop, written by the
operation's completion (Request::on_done, on remora's threads, without the GIL) and
watched by the loop with add_reader: no thread per request, no polling."""

from __future__ import annotations

import asyncio
import weakref

from . import _remora

_waiters: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaiter]" = weakref.WeakKeyDictionary()


class _LoopWaiter:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._completions = _remora._Completions()
        self._pending: dict[int, tuple[asyncio.Future, _remora.Request]] = {}
        self._next = 0
        loop.add_reader(self._completions.fileno(), self._drain)

    def watch(self, request: _remora.Request) -> asyncio.Future:
        future = self._loop.create_future()
        self._next += 1
        token = self._next
        self._pending[token] = (future, request)
        self._completions.watch(request, token)  # may complete at once: the fd is raised
        return future

    def _drain(self) -> None:
        for token in self._completions.drain():
            future, request = self._pending.pop(token)
            if future.done():
                continue
            try:
                request.test()  # done: returns True or raises the operation's error
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
                future.set_exception(e)
            else:
                future.set_result(request)


async def wait_for(request: _remora.Request) -> _remora.Request:
    """Completes when `request` does; raises its error; returns the request."""
    if request.done:
        request.test()
        return request
    loop = asyncio.get_running_loop()
    waiter = _waiters.get(loop)
    if waiter is None:
        waiter = _waiters[loop] = _LoopWaiter(loop)
    return await waiter.watch(request)
