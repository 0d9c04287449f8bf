"""remora.DmabufMemory: a range of a dmabuf descriptor as memory (remora/dmabuf.h). No
exporter where these tests run (no udmabuf, no DMA-BUF heap, no GPU), so a memfd stands
in for the dmabuf: the package maps it, moves it through the device paths (staging) and
says it is not a dmabuf. Every byte is read back through the descriptor itself."""

from __future__ import annotations

import os

import numpy as np
import pytest

import remora
from conftest import BOUND

SIZE = 1 << 20
OFFSET = 4096 + 3  # not page-aligned


def memfd(size: int = SIZE) -> int:
    fd = os.memfd_create("remora-python-dmabuf")
    os.ftruncate(fd, size)
    return fd


def test_a_range_of_the_descriptor_is_memory_every_call_takes(pair):
    fd = memfd()
    try:
        mem = remora.DmabufMemory(fd, OFFSET, SIZE - OFFSET)
        assert mem.mapped and not mem.is_dmabuf and mem.exporter == "" and mem.unmapped_reason == ""
        assert len(mem) == mem.size == SIZE - OFFSET
        view = mem.view()
        assert view.ctypes.data == mem.address and view.nbytes == mem.size
        view[:5] = [1, 2, 3, 4, 5]  # the view is the descriptor's bytes
        assert os.pread(fd, 5, OFFSET) == bytes([1, 2, 3, 4, 5])

        pair.target_ctx.add_memory(mem)
        region = pair.target_ctx.register(mem)
        assert region.address == mem.address and region.size == mem.size
        data = np.random.default_rng(1).integers(0, 256, 3 * 65536 + 5, dtype=np.uint8)
        pair.init.put(data, region.remote_key(), 11, notify=9).wait(BOUND)
        assert pair.target.wait_notification(BOUND).value == 9
        assert os.pread(fd, data.nbytes, OFFSET + 11) == data.tobytes()
        back = np.zeros_like(data)
        pair.init.get(back, region.remote_key(), 11).wait(BOUND)
        assert (back == data).all()

        # A message from it, and one into it.
        got = np.zeros(mem.size, np.uint8)
        r = pair.init.recv(got, 1)
        pair.target.send(mem, 1).wait(BOUND)
        r.wait(BOUND)
        assert got.tobytes() == os.pread(fd, mem.size, OFFSET)
        incoming = np.arange(mem.size, dtype=np.uint64).astype(np.uint8)
        r = pair.target.recv(mem, 2)
        pair.init.send(incoming, 2).wait(BOUND)
        r.wait(BOUND)
        assert os.pread(fd, mem.size, OFFSET) == incoming.tobytes()
        assert pair.target.stats()["device_path"] == "staging"
    finally:
        os.close(fd)


def test_a_range_the_cpu_cannot_map_has_no_view_and_is_not_copied(pair):
    fd = memfd()
    wo = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)  # mmap refuses it, as GPU drivers refuse theirs
    try:
        mem = remora.DmabufMemory(wo, 0, SIZE)
        assert not mem.mapped and "mmap" in mem.unmapped_reason
        with pytest.raises(remora.Unsupported, match="the CPU cannot reach this dmabuf"):
            mem.view()
        pair.target_ctx.add_memory(mem)
        got = np.zeros(SIZE, np.uint8)
        r = pair.init.recv(got, 1)
        with pytest.raises(remora.Unsupported, match="the CPU cannot reach this dmabuf"):
            pair.target.send(mem, 1).wait(BOUND)
        with pytest.raises(remora.Error):
            r.wait(BOUND)
    finally:
        os.close(wo)
        os.close(fd)


def test_bad_descriptors_and_ranges_raise_their_classes():
    fd = memfd(8192)
    try:
        with pytest.raises(remora.InvalidArgument):
            remora.DmabufMemory(-1, 0, 4096)
        with pytest.raises(remora.InvalidArgument):
            remora.DmabufMemory(fd, 0, 0)
        with pytest.raises(remora.OutOfRange, match="past the end"):
            remora.DmabufMemory(fd, 8000, 200)
        r, w = os.pipe()
        try:
            with pytest.raises(remora.InvalidArgument, match="has no size"):
                remora.DmabufMemory(r, 0, 4096)
        finally:
            os.close(r)
            os.close(w)
    finally:
        os.close(fd)


def test_the_context_keeps_its_memory_alive():
    fd = memfd()
    try:
        ctx = remora.Context(ignore_env=True)
        mem = remora.DmabufMemory(fd, 0, SIZE)
        ctx.add_memory(mem)
        region = ctx.register(mem)
        address = mem.address
        del mem  # the context and the region hold it
        assert region.address == address
        region.deregister()
        ctx.close()
    finally:
        os.close(fd)
