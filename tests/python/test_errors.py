"""One exception class per status code, each provoked for real where it can be: a
timeout, a dead peer process (SIGKILL), a tampered key, a window overrun, a missing
right, a short receive buffer, bad arguments, an unreachable address, a closed endpoint,
an exhausted pool."""

from __future__ import annotations

import ctypes
import signal

import numpy as np
import pytest

import remora
from conftest import BOUND, free_port, run_peer


def test_one_class_per_status_code_under_error():
    names = remora._remora._code_names()
    from remora._errors import _BY_CODE

    assert len(_BY_CODE) == len(names) - 1  # every code but ok
    for value, cls in _BY_CODE.items():
        assert issubclass(cls, remora.Error)
        assert cls.code == names[value], (cls, names[value])
    assert issubclass(remora.Timeout, TimeoutError)
    assert issubclass(remora.InvalidArgument, ValueError)


def test_timeout_is_a_timeout_error(pair):
    buf = np.zeros(8, np.uint8)
    r = pair.target.recv(buf, 1)
    with pytest.raises(TimeoutError) as e:
        r.wait(0.05)
    assert isinstance(e.value, remora.Timeout) and "in progress" in str(e.value)
    assert not r.done and r.test() is False
    pair.init.send(np.ones(8, np.uint8), 1).wait(BOUND)
    r.wait(BOUND)  # the operation went on after the timeout
    with pytest.raises(remora.Timeout):
        pair.target.wait_notification(0.01)


def test_invalid_key_out_of_range_access_denied(pair):
    mem = np.zeros(4096, np.uint8)
    region = pair.target_ctx.register(mem, remora.Access.LOCAL_WRITE | remora.Access.REMOTE_WRITE)
    raw = bytearray(region.remote_key().to_bytes())
    raw[8] ^= 1  # the secret
    forged = remora.RemoteKey.from_bytes(bytes(raw))
    with pytest.raises(remora.InvalidKey, match="invalid key"):
        pair.init.put(np.ones(16, np.uint8), forged, 0).wait(BOUND)
    with pytest.raises(remora.OutOfRange):
        pair.init.put(np.ones(16, np.uint8), region.remote_key(), 4090).wait(BOUND)
    with pytest.raises(remora.AccessDenied):
        pair.init.get(np.zeros(16, np.uint8), region.remote_key(), 0).wait(BOUND)
    assert (mem == 0).all()  # nothing refused was written
    stale = region.remote_key()
    region.deregister()
    with pytest.raises(remora.InvalidKey):
        pair.init.put(np.ones(16, np.uint8), stale, 0).wait(BOUND)


def test_truncated(pair):
    r = pair.target.recv(np.zeros(4, np.uint8), 2)
    pair.init.send(np.ones(100, np.uint8), 2).wait(BOUND)
    with pytest.raises(remora.Truncated):
        r.wait(BOUND)


def test_invalid_arguments(pair):
    with pytest.raises(remora.InvalidArgument, match="contiguous"):
        pair.init.send(np.zeros((10, 10))[:, 1], 1)
    with pytest.raises(remora.InvalidArgument, match="writable"):
        pair.target.recv(b"read-only bytes", 1)
    with pytest.raises(remora.InvalidArgument, match="neither the buffer protocol nor DLPack"):
        pair.init.send(object(), 1)
    with pytest.raises(remora.InvalidArgument):
        remora.Context(ignore_env=True, streams_per_endpoint=0)
    with pytest.raises(remora.InvalidArgument):
        pair.target.recv(np.zeros(1), 1).wait(-1)


def test_unreachable_and_aborted():
    ctx = remora.Context(ignore_env=True)
    with pytest.raises(remora.Unreachable):
        ctx.connect(f"127.0.0.1:{free_port()}", 5)
    lst = ctx.listen("127.0.0.1:0")
    other = remora.Context(ignore_env=True)
    ep = other.connect(lst.address, BOUND)
    r = ep.recv(np.zeros(8, np.uint8), 1)
    ep.close()
    with pytest.raises(remora.Aborted):
        r.wait(BOUND)
    assert isinstance(ep.failure, remora.Aborted)
    other.close()
    ctx.close()


def test_no_resource_from_an_exhausted_pool():
    ctx = remora.Context(ignore_env=True)
    pool = remora.Pool(ctx, arena_bytes=1 << 16, max_bytes=1 << 16)
    held = pool.allocate(1 << 16)
    with pytest.raises(remora.NoResource):
        pool.allocate(1 << 16)
    held.release()
    ctx.close()


def test_peer_failed_when_the_peer_process_is_killed():
    ctx = remora.Context(ignore_env=True)
    lst = ctx.listen("127.0.0.1:0")
    peer = run_peer("target", lst.address)
    try:
        ep = lst.accept(BOUND)
        raw = bytearray(40)
        ep.recv(raw, 1).wait(BOUND)
        key = remora.RemoteKey.from_bytes(bytes(raw))
        assert peer.stdout.readline().strip() == "ready"
        got = np.zeros(1000, np.uint8)
        ep.get(got, key, 0).wait(BOUND)  # the peer serves gets passively
        assert (got == np.arange(1000) % 251).all()
        pending = ep.recv(np.zeros(8, np.uint8), 99)  # never sent
        peer.send_signal(signal.SIGKILL)
        peer.wait(BOUND)
        with pytest.raises(remora.PeerFailed):
            pending.wait(BOUND)
        with pytest.raises(remora.PeerFailed):
            ep.get(got, key, 0).wait(BOUND)
        assert ep.failed and isinstance(ep.failure, remora.PeerFailed)
        assert not ep.closed_by_peer and not ep.peer_said_goodbye  # it died: no GOODBYE came
    finally:
        if peer.poll() is None:
            peer.kill()
        peer.wait(BOUND)
        ctx.close()


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeCudaTensor:
    """A DLPack producer whose tensor says it lives on CUDA device 0 (device type 2), as
    a PyTorch CUDA tensor's does; its data pointer is never touched."""

    def __init__(self):
        self._shape = (ctypes.c_int64 * 1)(4)
        self._managed = _DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = 0x1000
        t.device = _DLDevice(2, 0)
        t.ndim = 1
        t.dtype = _DLDataType(2, 32, 1)  # float32
        t.shape = self._shape

    def __dlpack__(self, stream=None, **kwargs):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)


def test_cuda_memory_without_a_driver_is_refused_with_the_drivers_reason(pair):
    # No CUDA driver in this process (the CUDA tests run theirs in child processes):
    # a CUDA tensor is refused before anything touches its pointer.
    with pytest.raises(remora.Unsupported, match="CUDA driver"):
        pair.init.send(FakeCudaTensor(), 1)
    with pytest.raises(remora.Unsupported, match="CUDA driver"):
        pair.target_ctx.register(FakeCudaTensor())
