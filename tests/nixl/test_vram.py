"""VRAM through NIXL's agent and the REMORA backend: NIXL's VRAM_SEG registrations become
regions of remora's CUDA memory domain, and transfers of them move through remora's
pinned staging buffers (docs/device-memory.md).

Here the CUDA driver is remora's EMULATED one (tests/device/emulated_cuda, built by the
release preset: host memory behind the driver API, clearly not a GPU), named by
REMORA_CUDA_DRIVER in both agents and allocated with remora.cuda_empty: this proves the
plugin's VRAM plumbing, not a GPU. On a GPU machine REMORA_TEST_CUDA_DRIVER=libcuda.so.1
runs the same tests on the real driver (not run for this change: no GPU was available)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import b64, exchange
from test_transfers import GUARD, MIB, assert_intact, block_layout, run

HERE = Path(__file__).resolve().parent
EMULATED = HERE.parent.parent / "build" / "release" / "tests" / "libremora_test_emulated_cuda.so"
DRIVER = os.environ.get("REMORA_TEST_CUDA_DRIVER", str(EMULATED))


@pytest.fixture
def cuda_env():
    if DRIVER == str(EMULATED) and not EMULATED.exists():
        pytest.skip(f"the emulated CUDA driver is built by the release preset ({EMULATED} is missing)")
    return {"REMORA_CUDA_DRIVER": DRIVER}


@pytest.mark.parametrize("kinds", [("VRAM", "VRAM"), ("VRAM", "DRAM"), ("DRAM", "VRAM")],
                         ids=["vram-vram", "vram-dram", "dram-vram"])
def test_vram_transfers(world, cuda_env, kinds):
    local_mem, remote_mem = kinds
    size = 4 * MIB + 2 * GUARD
    a, b = world.pair(cuda_env)
    a.call("alloc", id="src", size=size, seed=1, mem=local_mem)
    a.call("alloc", id="back", size=size, seed=3, mem=local_mem)
    dst = b.call("alloc", id="dst", size=size, seed=2, mem=remote_mem)["addr"]
    for agent, ids, mem in ((a, ("src", "back"), local_mem), (b, ("dst",), remote_mem)):
        for i in ids:
            agent.call("register", id=i, mem=mem)
    exchange(a, b)
    # One buffer, then a list of blocks apart on both sides.
    a.call("prep", h="w", op="WRITE", local=[["src", GUARD, 3 * MIB + 5]], remote=[[dst + GUARD, 3 * MIB + 5]],
           agent="B", notif=b64(b"vram"), mem=local_mem, remote_mem=remote_mem)
    assert run(a, "w") == "DONE"
    assert b.call("notifs", count=1)["notifs"] == {"A": [b64(b"vram")]}
    assert_intact(b, "dst", [[GUARD, 3 * MIB + 5, 1, GUARD]])
    loc, rem = block_layout(64, 16 * 1024, seed=9)
    a.call("prep", h="r", op="READ", local=[["back", o, 16 * 1024] for o in loc],
           remote=[[dst + o, 16 * 1024] for o in rem], agent="B", mem=local_mem, remote_mem=remote_mem)
    assert run(a, "r") == "DONE"
    # The blocks lie in what the WRITE placed, so A reads A's own first pattern back.
    assert all(GUARD <= ro and ro + 16 * 1024 <= GUARD + 3 * MIB + 5 for ro in rem)
    expected = [[lo, 16 * 1024, 1, ro] for lo, ro in zip(loc, rem)]
    assert_intact(a, "back", expected)
    assert_intact(a, "src")


def test_vram_without_a_cuda_driver_is_refused_with_the_reason(loopback):
    a = loopback.agent("A", env={"REMORA_CUDA_DRIVER": "/nowhere/libcuda.so.1"})
    a.call("alloc", id="m", size=MIB, seed=1)  # host memory, registered as VRAM
    r = a.ask("register", id="m", mem="VRAM")
    # The plugin answers NIXL_ERR_NOT_SUPPORTED; NIXL's registerMem reports any backend's
    # refusal as NIXL_ERR_BACKEND. The reason is in the plugin's log line.
    assert r.get("error") == "nixlBackendError", r
    assert "VRAM needs remora's CUDA memory domain" in a.log() and "/nowhere/libcuda.so.1" in a.log(), a.log()
