"""Transfers through NIXL's real agent with the REMORA backend, between two processes,
over loopback and across two network namespaces, plain, with REMORA_AUTH_KEY and
REMORA_CHECKSUM=crc32c, and sealed (REMORA_ENCRYPT=on): WRITE and READ of single buffers from 0 B to 64 MiB and of
256-descriptor lists of KV-cache-like blocks (apart on both sides, in another order on
the remote one), notifications after transfers and standalone ones, a finished request
posted again, requests in flight together, transfers within one agent, and releasing a
request in flight. Every byte of every buffer involved is compared afterwards: what the
descriptors name must hold the other side's bytes, everything else its own."""

from __future__ import annotations

import random

import pytest

from conftest import AUTH, SEALED, b64, exchange

MIB = 1 << 20
GUARD = 4096  # bytes around every descriptor that must never change
SIZES = [0, 1, 4095, 16384, 16385, 65536, 65537, MIB + 3, 16 * MIB, 64 * MIB]
SECURITY = {"plain": None, "auth+crc32c": AUTH, "sealed": SEALED}


def setup_buffers(a, b, size, seeds=(1, 2, 3, 4)):
    """A: "src" (the source of WRITEs) and "back" (the target of READs); B: "dst" (written)
    and "ro" (read). All registered, each `size` + two guards."""
    addr = {}
    for agent, ids in ((a, ("src", "back")), (b, ("dst", "ro"))):
        for i in ids:
            addr[i] = agent.call("alloc", id=i, size=size + 2 * GUARD, seed=seeds[len(addr)])["addr"]
            agent.call("register", id=i)
    exchange(a, b)
    return addr


def run(agent, h, timeout=60.0):
    """Posts `h` and waits for it; NIXL's state ("DONE") or the exception class it raised."""
    r = agent.ask("post", h=h)
    if "error" in r:
        return r["error"]
    if r["state"] != "PROC":
        return r["state"]
    r = agent.ask("wait", h=h, timeout=timeout)
    return r.get("state") or r["error"]


def assert_intact(agent, buf, segments=(), **kw):
    r = agent.call("check", id=buf, segments=list(segments), **kw)
    assert r["mismatches"] == 0, f"{agent.name}:{buf}: {r['mismatches']} wrong bytes, the first at {r['first']}"


@pytest.mark.parametrize("security", SECURITY)
def test_single_buffers_every_size(world, security):
    a, b = world.pair(SECURITY[security])
    addr = setup_buffers(a, b, 64 * MIB)
    written, read = [], []
    for size in SIZES:
        # Odd offsets on both sides: nothing here relies on alignment.
        soff, doff = GUARD + 5, GUARD + 11
        a.call("prep", h="w", op="WRITE", local=[["src", soff, size]], remote=[[addr["dst"] + doff, size]],
               agent="B", notif=b64(b"wrote %d" % size))
        assert run(a, "w") == "DONE", size
        a.call("release", h="w")
        written.append([doff, size, 1, soff])
        assert b.call("notifs", count=1)["notifs"] == {"A": [b64(b"wrote %d" % size)]}, size

        roff, boff = GUARD + 3, GUARD + 7
        a.call("prep", h="r", op="READ", local=[["back", boff, size]], remote=[[addr["ro"] + roff, size]],
               agent="B")
        assert run(a, "r") == "DONE", size
        a.call("release", h="r")
        read.append([boff, size, 4, roff])
        assert_intact(b, "dst", written)
        assert_intact(a, "back", read)
    assert_intact(a, "src")
    assert_intact(b, "ro")
    assert b.call("notifs")["notifs"] == {}  # exactly one per transfer


def block_layout(n, block, seed):
    """KV-cache-like: n blocks, every other slot on the local side; on the remote side a
    shuffled order with gaps of one slot, so no two blocks touch on either side."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    local = [GUARD + 2 * i * block for i in range(n)]
    remote = [GUARD + 2 * order[i] * block for i in range(n)]
    return local, remote


@pytest.mark.parametrize("security", SECURITY)
@pytest.mark.parametrize("prepped", [False, True], ids=["initialize_xfer", "make_prepped_xfer"])
def test_block_lists(world, security, prepped):
    n, block = 256, 16 * 1024
    a, b = world.pair(SECURITY[security])
    addr = setup_buffers(a, b, 2 * n * block)
    loc, rem = block_layout(n, block, seed=5)
    a.call("prep", h="w", op="WRITE", local=[["src", o, block] for o in loc],
           remote=[[addr["dst"] + o, block] for o in rem], agent="B", notif=b64(b"blocks written"), prepped=prepped)
    assert run(a, "w") == "DONE"
    assert b.call("notifs", count=1)["notifs"] == {"A": [b64(b"blocks written")]}
    assert_intact(b, "dst", [[r, block, 1, l] for l, r in zip(loc, rem)])

    a.call("prep", h="r", op="READ", local=[["back", o, block] for o in loc],
           remote=[[addr["ro"] + o, block] for o in rem], agent="B", prepped=prepped)
    assert run(a, "r") == "DONE"
    assert_intact(a, "back", [[l, block, 4, r] for l, r in zip(loc, rem)])
    assert_intact(a, "src")
    assert_intact(b, "ro")


def test_notifications_standalone_and_both_ways(world):
    a, b = world.pair()
    exchange(a, b)
    msgs = [b"first", b"", b"\x00binary\xff\x00", b"x" * (60 * 1024), b"last"]
    for m in msgs:
        a.call("send_notif", agent="B", msg=b64(m))
    assert b.call("notifs", count=len(msgs))["notifs"] == {"A": [b64(m) for m in msgs]}  # in order
    b.call("send_notif", agent="A", msg=b64(b"back"))
    assert a.call("notifs", count=1)["notifs"] == {"B": [b64(b"back")]}
    # A message that cannot fit the plugin's 64 KiB notification is refused, and not sent.
    r = a.ask("send_notif", agent="B", msg=b64(b"y" * (65 * 1024)))
    assert r.get("error") == "nixlInvalidParamError", r
    assert b.call("notifs", timeout=0.5)["notifs"] == {}


def test_a_finished_request_is_posted_again(world):
    a, b = world.pair()
    addr = setup_buffers(a, b, 8 * MIB)
    a.call("prep", h="w", op="WRITE", local=[["src", GUARD, 8 * MIB]], remote=[[addr["dst"] + GUARD, 8 * MIB]],
           agent="B", notif=b64(b"n0"))
    for i, seed in enumerate((11, 12, 13)):
        a.call("fill", id="src", seed=seed)  # new bytes for each post of the same request
        notif = None if i == 0 else b64(b"n%d" % i)  # the request's message, then new ones
        r = a.call("post", h="w", **({"notif": notif} if notif else {}))
        state = r["state"] if r["state"] != "PROC" else a.call("wait", h="w")["state"]
        assert state == "DONE"
        assert_intact(b, "dst", [[GUARD, 8 * MIB, seed, GUARD]])
        assert b.call("notifs", count=1)["notifs"] == {"A": [b64(b"n%d" % i)]}
    a.call("release", h="w")


def test_requests_in_flight_together(world):
    a, b = world.pair()
    addr = setup_buffers(a, b, 32 * MIB)
    part = 4 * MIB
    for i in range(8):
        op, local, remote = (("WRITE", "src", "dst") if i % 2 == 0 else ("READ", "back", "ro"))
        a.call("prep", h=f"h{i}", op=op, local=[[local, GUARD + i * part, part]],
               remote=[[addr[remote] + GUARD + i * part, part]], agent="B")
    for i in range(8):
        assert a.call("post", h=f"h{i}")["state"] in ("PROC", "DONE")
    for i in range(8):
        assert a.call("wait", h=f"h{i}")["state"] == "DONE"
    assert_intact(b, "dst", [[GUARD + i * part, part, 1, GUARD + i * part] for i in range(0, 8, 2)])
    assert_intact(a, "back", [[GUARD + i * part, part, 4, GUARD + i * part] for i in range(1, 8, 2)])


def test_transfers_within_one_agent(loopback):
    a = loopback.agent("A")
    src = a.call("alloc", id="src", size=MIB, seed=21)["addr"]
    dst = a.call("alloc", id="dst", size=MIB, seed=22)["addr"]
    a.call("register", id="src")
    a.call("register", id="dst")
    a.call("prep", h="w", op="WRITE", local=[["src", 100, 300_000]], remote=[[dst + 5000, 300_000]], agent="A",
           notif=b64(b"to myself"))
    assert run(a, "w") == "DONE"
    assert_intact(a, "dst", [[5000, 300_000, 21, 100]])
    assert a.call("notifs", count=1)["notifs"] == {"A": [b64(b"to myself")]}
    a.call("prep", h="r", op="READ", local=[["dst", 700_000, 200_000]], remote=[[src + 4096, 200_000]], agent="A")
    assert run(a, "r") == "DONE"
    assert_intact(a, "dst", [[5000, 300_000, 21, 100], [700_000, 200_000, 21, 4096]])


def test_release_in_flight_while_the_target_is_stopped(world):
    """The READ cannot finish (B is stopped) when it is released: releasing returns, and
    once B runs again nothing of it lands in A's memory, which A has meanwhile refilled;
    the next transfer to B connects again and works."""
    a, b = world.pair()
    addr = setup_buffers(a, b, 64 * MIB)
    a.call("prep", h="r", op="READ", local=[["back", GUARD, 64 * MIB]], remote=[[addr["ro"] + GUARD, 64 * MIB]],
           agent="B")
    a.call("connect", name="B")
    b.stop()
    a.call("send_notif", agent="B", msg=b64(b"before"))  # on the connection the release closes
    assert a.call("post", h="r")["state"] == "PROC"
    a.call("release", h="r")
    a.call("fill", id="back", seed=9)
    b.cont()
    a.call("prep", h="w", op="WRITE", local=[["src", GUARD, MIB]], remote=[[addr["dst"] + GUARD, MIB]], agent="B",
           notif=b64(b"after"))
    assert run(a, "w") == "DONE"  # B has run its progress since: any late byte would be there
    # The connection closed orderly: what A sent on it before still arrives, once.
    assert b.call("notifs", count=2)["notifs"] == {"A": [b64(b"before"), b64(b"after")]}
    assert_intact(a, "back")
    assert_intact(b, "dst", [[GUARD, MIB, 1, GUARD]])


@pytest.mark.parametrize("op", ["READ", "WRITE"])
def test_release_in_flight_at_once(world, op):
    """Released right after it was posted, while its 64 MiB are on the wire: nothing lands in
    the local memory afterwards, the target stays usable, and the next transfer works."""
    a, b = world.pair()
    addr = setup_buffers(a, b, 64 * MIB)
    local, remote = ("back", "ro") if op == "READ" else ("src", "dst")
    a.call("prep", h="x", op=op, local=[[local, GUARD, 64 * MIB]], remote=[[addr[remote] + GUARD, 64 * MIB]],
           agent="B")
    a.call("connect", name="B")
    a.call("post", h="x")
    a.call("release", h="x")
    a.call("fill", id=local, seed=31)
    a.call("prep", h="y", op="READ", local=[["back", GUARD, MIB]], remote=[[addr["ro"] + GUARD, MIB]], agent="B")
    assert run(a, "y") == "DONE"
    if op == "READ":
        assert_intact(a, "back", [[GUARD, MIB, 4, GUARD]], fill_seed=31)
    else:
        assert_intact(a, "back", [[GUARD, MIB, 4, GUARD]])
        # A cancelled WRITE leaves its own range undefined at the target, and nothing else.
        assert_intact(b, "dst", ignore=[[GUARD, 64 * MIB]])
    assert_intact(b, "ro")
