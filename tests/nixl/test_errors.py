"""Error paths through NIXL's real agent with the REMORA backend, over loopback and across
network namespaces: each asserts the status NIXL reports (the exception class its Python
API raises for it) and that no byte outside the transfer's descriptors changed on either
side (and, for refused transfers, no byte at all).

  a remote agent killed, stopped (silent), or gone (its agent closed)  NIXL_ERR_REMOTE_DISCONNECT, never a hang
  a remote registration deregistered, or its key forged               NIXL_ERR_INVALID_PARAM, nothing written
  bad descriptors (outside a registration, lengths or counts unequal) refused before anything moves
  a notification too long for the plugin                              NIXL_ERR_INVALID_PARAM, nothing moves
  agents with different REMORA_AUTH_KEYs                               refused (NIXL_ERR_NOT_ALLOWED), nothing written
  one agent sealing (REMORA_ENCRYPT=on), the other not                 refused (NIXL_ERR_NOT_SUPPORTED), nothing written
"""

from __future__ import annotations

import base64
import time

import pytest

from conftest import AUTH, SEALED, b64, exchange
from test_transfers import GUARD, MIB, assert_intact, run, setup_buffers

DISCONNECT = "nixlRemoteDisconnectError"


def test_a_killed_agent_fails_transfers_in_flight_and_new_ones(world):
    a, b = world.pair()
    addr = setup_buffers(a, b, 64 * MIB)
    a.call("prep", h="r", op="READ", local=[["back", GUARD, 64 * MIB]], remote=[[addr["ro"] + GUARD, 64 * MIB]],
           agent="B")
    a.call("connect", name="B")
    b.stop()  # so that the READ is surely in flight when B dies
    assert a.call("post", h="r")["state"] == "PROC"
    b.kill()
    t0 = time.monotonic()
    assert a.ask("wait", h="r", timeout=30).get("error") == DISCONNECT
    assert time.monotonic() - t0 < 30
    # What the READ names is undefined now; nothing else of A changed.
    assert_intact(a, "back", ignore=[[GUARD, 64 * MIB]])
    assert_intact(a, "src")
    a.call("release", h="r")


def test_a_killed_agent_fails_the_next_transfer(world):
    a, b = world.pair()
    addr = setup_buffers(a, b, MIB)
    a.call("connect", name="B")
    b.kill()
    a.call("prep", h="w", op="WRITE", local=[["src", GUARD, MIB]], remote=[[addr["dst"] + GUARD, MIB]], agent="B")
    assert run(a, "w", timeout=30) == DISCONNECT
    assert_intact(a, "src")


def test_a_silent_agent_fails_transfers_within_the_peer_timeout(world):
    env = {"REMORA_PEER_TIMEOUT_MS": "1000"}
    a, b = world.pair(env)
    addr = setup_buffers(a, b, 16 * MIB)
    a.call("prep", h="w", op="WRITE", local=[["src", GUARD, 16 * MIB]], remote=[[addr["dst"] + GUARD, 16 * MIB]],
           agent="B")
    a.call("connect", name="B")
    b.stop()  # alive but silent: its sockets stay open
    t0 = time.monotonic()
    assert run(a, "w", timeout=30) == DISCONNECT
    assert time.monotonic() - t0 < 30
    b.cont()
    assert_intact(a, "src")
    assert_intact(b, "dst", ignore=[[GUARD, 16 * MIB]])
    assert_intact(b, "ro")


def test_a_closed_agent_fails_transfers(world):
    a, b = world.pair()
    addr = setup_buffers(a, b, MIB)
    a.call("connect", name="B")
    b.call("close")  # the agent is destroyed; the process lives on
    a.call("prep", h="w", op="WRITE", local=[["src", GUARD, MIB]], remote=[[addr["dst"] + GUARD, MIB]], agent="B")
    assert run(a, "w", timeout=30) == DISCONNECT
    assert_intact(b, "dst")


@pytest.mark.parametrize("op", ["WRITE", "READ"])
def test_a_deregistered_region_is_refused_and_nothing_moves(world, op):
    a, b = world.pair()
    addr = setup_buffers(a, b, MIB)  # A loaded B's metadata with "dst" and "ro" in it
    b.call("deregister", reg="dst")
    local = "src" if op == "WRITE" else "back"
    a.call("prep", h="x", op=op, local=[[local, GUARD, MIB]], remote=[[addr["dst"] + GUARD, MIB]], agent="B",
           notif=b64(b"must not come"))
    assert run(a, "x") == "nixlInvalidParamError"
    assert_intact(b, "dst")
    assert_intact(a, local)
    assert b.call("notifs", timeout=0.5)["notifs"] == {}
    # The endpoint is still good: the region still registered works.
    a.call("prep", h="y", op="READ", local=[["back", GUARD, MIB]], remote=[[addr["ro"] + GUARD, MIB]], agent="B")
    assert run(a, "y") == "DONE"
    assert_intact(a, "back", [[GUARD, MIB, 4, GUARD]])


def forge(md_b64: str) -> str:
    """B's metadata with one bit of its REMORA key's secret flipped (plugin/nixl/wire.h:
    "RMNX", version, kind, 2 zero bytes, base, then the key, whose secret is at +16)."""
    md = bytearray(base64.b64decode(md_b64))
    at = md.find(b"RMNX")
    assert at >= 0 and md.find(b"RMNX", at + 1) < 0, "one REMORA registration in the metadata"
    md[at + 16 + 16] ^= 0x01
    return base64.b64encode(bytes(md)).decode()


def test_a_forged_key_is_refused_and_nothing_is_written(world):
    a, b = world.pair()
    dst = b.call("alloc", id="dst", size=MIB, seed=2)["addr"]
    b.call("register", id="dst")
    a.call("alloc", id="src", size=MIB, seed=1)
    a.call("register", id="src")
    a.call("load", md=forge(b.call("metadata")["md"]))
    for op in ("WRITE", "READ"):
        a.call("prep", h=op, op=op, local=[["src", 0, MIB]], remote=[[dst, MIB]], agent="B")
        assert run(a, op) == "nixlInvalidParamError", op
    assert_intact(b, "dst")
    assert_intact(a, "src")


def test_bad_descriptors_are_refused_before_anything_moves(world):
    a, b = world.pair()
    addr = setup_buffers(a, b, MIB)
    size = MIB + 2 * GUARD
    cases = {
        "remote past its registration": ([["src", 0, 8192]], [[addr["dst"] + size - 4096, 8192]]),
        "remote before its registration": ([["src", 0, 8192]], [[addr["dst"] - 4096, 8192]]),
        "local past its registration": ([["src", size - 4096, 8192]], [[addr["dst"], 8192]]),
        "lengths differ": ([["src", 0, 8192]], [[addr["dst"], 4096]]),
        "counts differ": ([["src", 0, 4096], ["src", 8192, 4096]], [[addr["dst"], 4096]]),
    }
    for what, (local, remote) in cases.items():
        for op in ("WRITE", "READ"):
            r = a.ask("prep", h="x", op=op, local=local, remote=remote, agent="B")
            if "error" not in r:  # NIXL let it through to the backend: the post is refused
                r = a.ask("post", h="x")
                a.ask("release", h="x")
            assert r.get("error", "").startswith("nixl"), (what, op, r)
    for agent, bufs in ((a, ("src", "back")), (b, ("dst", "ro"))):
        for buf in bufs:
            assert_intact(agent, buf)


def test_a_notification_too_long_is_refused_before_the_data_moves(world):
    a, b = world.pair()
    addr = setup_buffers(a, b, MIB)
    a.call("prep", h="w", op="WRITE", local=[["src", GUARD, MIB]], remote=[[addr["dst"] + GUARD, MIB]], agent="B",
           notif=b64(b"z" * (64 * 1024)))
    assert run(a, "w") == "nixlInvalidParamError"
    assert_intact(b, "dst")
    assert b.call("notifs", timeout=0.5)["notifs"] == {}


def test_agents_with_different_keys_cannot_talk(world):
    a = world.agent("A", 0, {**AUTH, "REMORA_AUTH_KEY": "one secret"})
    b = world.agent("B", 1, {**AUTH, "REMORA_AUTH_KEY": "another secret"})
    addr = setup_buffers(a, b, MIB)
    a.call("prep", h="w", op="WRITE", local=[["src", GUARD, MIB]], remote=[[addr["dst"] + GUARD, MIB]], agent="B")
    assert run(a, "w", timeout=30) == "nixlNotAllowedError"
    assert_intact(b, "dst")
    r = a.ask("send_notif", agent="B", msg=b64(b"hello"))
    assert r.get("error") == "nixlNotAllowedError", r
    assert b.call("notifs", timeout=0.5)["notifs"] == {}


def test_a_sealing_agent_and_a_plain_one_cannot_talk(world):
    """Both hold the secret; only A encrypts. So the test fails if the plugin's endpoints
    ignored REMORA_ENCRYPT: the refusal is what proves they seal."""
    a = world.agent("A", 0, SEALED)
    b = world.agent("B", 1, {"REMORA_AUTH_KEY": SEALED["REMORA_AUTH_KEY"]})
    addr = setup_buffers(a, b, MIB)
    a.call("prep", h="w", op="WRITE", local=[["src", GUARD, MIB]], remote=[[addr["dst"] + GUARD, MIB]], agent="B")
    assert run(a, "w", timeout=30) == "nixlNotSupportedError"  # remora: unsupported, naming REMORA_ENCRYPT
    assert_intact(b, "dst")
    assert b.call("notifs", timeout=0.5)["notifs"] == {}
