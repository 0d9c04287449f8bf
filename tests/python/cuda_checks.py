"""CUDA memory through the installed package, one check per run of this script.

Run by test_cuda.py in a child process whose REMORA_CUDA_DRIVER names the CUDA driver
to load (the driver is loaded once per process): on the development machines and in
CI that is the emulated driver of tests/device/emulated_cuda (host memory behind the
driver API, not a GPU); on a GPU machine it can be the real libcuda.so.1. Each check
raises (exit status 1) on a failure and prints "ok" at the end.

    python cuda_checks.py send_recv|rma|collective|lifetime|demanded_path|refusals
"""

from __future__ import annotations

import socket
import sys
import threading

import numpy as np

import remora

BOUND = 30.0


def pattern(n: int, seed: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint64) * 131 + seed) % 251).astype(np.uint8)


def to_device(host: np.ndarray):
    dev = remora.cuda_empty(host.nbytes)
    remora.cuda_copy(dev, host)
    return dev


def to_host(dev, n: int) -> np.ndarray:
    out = np.empty(n, np.uint8)
    remora.cuda_copy(out, dev)
    return out


def connected(**options):
    """Two contexts (made before any CUDA memory is seen) and an endpoint pair."""
    options.setdefault("ignore_env", True)
    a, b = remora.Context(**options), remora.Context(**options)
    listener = b.listen("127.0.0.1:0")
    ea = a.connect(listener.address, BOUND)
    eb = listener.accept(BOUND)
    return a, b, ea, eb


def send_recv() -> None:
    a, b, ea, eb = connected()
    eager = a.config()["eager_limit"]
    chunk = a.config()["chunk_bytes"]
    cap = 3 * chunk + 4096
    tag = 1
    for src_dev, dst_dev in ((True, True), (False, True), (True, False)):
        for size in (1, eager - 1, eager, eager + 1, chunk + 7, 3 * chunk + 5):
            message = pattern(cap, tag)
            src = to_device(message[:size]) if src_dev else message[:size].copy()
            fill = np.full(cap, 0xCD, np.uint8)
            dst = to_device(fill) if dst_dev else fill
            r = eb.recv(dst, tag)
            s = ea.send(src, tag)
            s.wait(BOUND)
            r.wait(BOUND)
            assert r.bytes == size, (r.bytes, size)
            got = to_host(dst, cap) if dst_dev else dst
            assert np.array_equal(got[:size], message[:size]), f"{src_dev}->{dst_dev} {size}: data differs"
            assert (got[size:] == 0xCD).all(), f"{src_dev}->{dst_dev} {size}: written past the message"
            tag += 1
    assert ea.stats()["staged_transfers"] > 0 and eb.stats()["staged_transfers"] > 0
    assert eb.stats()["device_path"] == "staging", eb.stats()["device_path"]


def rma() -> None:
    a, b, ea, eb = connected()
    n = 1 << 20
    region_mem = to_device(np.zeros(n, np.uint8))
    region = b.register(region_mem)  # local write, remote read and write
    key = region.remote_key()
    data = pattern(4096 + 3, 9)
    ea.put(data, key, 1000).wait(BOUND)  # host memory into a device region
    back = to_device(np.zeros(data.size, np.uint8))
    ea.get(back, key, 1000).wait(BOUND)  # from the device region into device memory
    assert np.array_equal(to_host(back, data.size), data)
    whole = to_host(region_mem, n)
    assert np.array_equal(whole[1000:1000 + data.size], data)
    assert not whole[:1000].any() and not whole[1000 + data.size:].any(), "bytes outside the put changed"
    big = pattern(n - 64, 3)
    ea.put(to_device(big), key, 64).wait(BOUND)  # device memory into a device region, many chunks
    assert np.array_equal(to_host(region_mem, n)[64:], big)


def collective() -> None:
    with socket.socket() as sock:  # a free port for the store rank 0 hosts
        sock.bind(("127.0.0.1", 0))
        store = f"127.0.0.1:{sock.getsockname()[1]}"
    size, n = 2, 300000
    results: dict[int, object] = {}

    def rank(r: int) -> None:
        try:
            ctx = remora.Context(ignore_env=True)
            comm = remora.Communicator(ctx, rank=r, size=size, store=store, timeout=BOUND)
            mine = (np.arange(n, dtype=np.int32) * (r + 1))
            send = to_device(mine.view(np.uint8))
            recv = remora.cuda_empty(mine.nbytes)
            comm.allreduce(send, recv, op="sum", dtype="int32")
            got = to_host(recv, mine.nbytes).view(np.int32)
            results[r] = np.array_equal(got, np.arange(n, dtype=np.int32) * 3)
            comm.close()
            ctx.close()
        except BaseException as e:  # reported by the main thread
            results[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * BOUND)
    assert results == {0: True, 1: True}, results


def lifetime() -> None:
    a, b, ea, eb = connected()
    n = 1 << 16
    dst = remora.cuda_empty(n)
    before = sys.getrefcount(dst)
    r = eb.recv(dst, 5)
    assert sys.getrefcount(dst) > before, "the receive does not hold the device array"
    ea.send(to_device(pattern(n, 5)), 5).wait(BOUND)
    r.wait(BOUND)
    assert np.array_equal(to_host(dst, n), pattern(n, 5))
    remora.wait_all([])  # a binding that sweeps the finished requests' holds
    assert sys.getrefcount(dst) == before, "the device array is still held after the receive completed"


def demanded_path() -> None:
    a, b, ea, eb = connected(device_path=remora.DevicePathMode.DEVMEM)
    src = to_device(pattern(1 << 20, 1))
    try:
        ea.send(src, 1).wait(BOUND)
    except remora.Unsupported as e:
        assert "devmem" in str(e), str(e)
    else:
        raise AssertionError("a send of CUDA memory with devmem demanded and no devmem here succeeded")


def refusals() -> None:
    dev = remora.cuda_empty(16)
    host = np.zeros(16, np.uint8)
    cases = [
        (host, np.zeros(8, np.uint8), "bytes"),  # sizes differ
        (np.zeros(8, np.uint8), dev, "bytes"),
        (host, host.copy(), "one side must be each"),  # host to host
        (dev, remora.cuda_empty(16), "one side must be each"),  # device to device
    ]
    for dst, src, why in cases:
        try:
            remora.cuda_copy(dst, src)
        except remora.InvalidArgument as e:
            assert why in str(e), str(e)
        else:
            raise AssertionError(f"cuda_copy succeeded where it should say '{why}'")


def frameworks() -> None:
    """PyTorch CUDA tensors and CuPy arrays, through DLPack, as users pass them: sends,
    receives, a registered tensor as an RMA region, an allreduce. Needs a real GPU (the
    frameworks load the real driver, not the emulated one); every framework found with a
    device runs, and finding none is a failure (test_cuda.py runs this only on a GPU)."""
    makers = {}
    try:
        import torch
        if torch.cuda.is_available():
            makers["torch"] = (lambda host: torch.from_numpy(host).cuda(),
                               lambda n: torch.full((n,), 0xCD, dtype=torch.uint8, device="cuda"),
                               lambda t: t.cpu().numpy())
    except ImportError:
        pass
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            makers["cupy"] = (cupy.asarray, lambda n: cupy.full(n, 0xCD, dtype=cupy.uint8), cupy.asnumpy)
    except Exception:  # no CuPy, or CuPy without a device
        pass
    assert makers, "neither PyTorch nor CuPy sees a CUDA device"
    a, b, ea, eb = connected()
    chunk = a.config()["chunk_bytes"]
    tag = 100
    for name, (upload, filled, download) in makers.items():
        for size in (1, a.config()["eager_limit"] + 1, 3 * chunk + 5):
            message = pattern(size, tag)
            dst = filled(size + 64)
            r = eb.recv(dst, tag)
            ea.send(upload(message), tag).wait(BOUND)
            r.wait(BOUND)
            got = download(dst)
            assert r.bytes == size and np.array_equal(got[:size], message), f"{name} {size}: data differs"
            assert (got[size:] == 0xCD).all(), f"{name} {size}: written past the message"
            tag += 1
        region_mem = filled(1 << 20)
        region = b.register(region_mem)
        data = pattern(300000, 7)
        ea.put(upload(data), region.remote_key(), 4096).wait(BOUND)  # device to device region, chunked
        back = filled(data.size)
        ea.get(back, region.remote_key(), 4096).wait(BOUND)
        whole = download(region_mem)
        assert np.array_equal(whole[4096:4096 + data.size], data), f"{name}: put differs"
        assert (whole[:4096] == 0xCD).all() and (whole[4096 + data.size:] == 0xCD).all(), f"{name}: outside the put"
        assert np.array_equal(download(back), data), f"{name}: get differs"
        region.deregister()
        print(name, "ok", flush=True)
    assert eb.stats()["staged_transfers"] > 0


CHECKS = {f.__name__: f for f in (send_recv, rma, collective, lifetime, demanded_path, refusals, frameworks)}

if __name__ == "__main__":
    CHECKS[sys.argv[1]]()
    print("ok")
