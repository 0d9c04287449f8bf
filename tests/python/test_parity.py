"""The parts of the C++ API added to the package for parity with include/remora/*.h:
the newer ContextOptions fields (max_pending_handshakes, peer_timeout_ms, device_path,
checksum, auth_key), AuthKey, the newer EndpointStats fields, Endpoint.peer_said_goodbye,
wait_all, and Communicator.epoch / failed_ranks / shrink. Real loopback sockets, real
processes where a rank must die; data compared byte for byte."""

from __future__ import annotations

import json

import numpy as np
import pytest

import remora
from conftest import BOUND, Pair, free_port, run_peer


def pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def roundtrip(p: Pair) -> None:
    """A rendezvous send/recv and a put/get between the pair, compared byte for byte."""
    msg = pattern(300_000, 7)
    buf = np.zeros(len(msg), np.uint8)
    r = p.target.recv(buf, 3)
    p.init.send(msg, 3).wait(BOUND)
    r.wait(BOUND)
    assert r.bytes == len(msg) and (buf == msg).all()
    mem = np.zeros(200_000, np.uint8)
    region = p.target_ctx.register(mem, remora.Access.ALL)
    data = pattern(150_000, 8)
    p.init.put(data, region.remote_key(), 1000).wait(BOUND)
    assert (mem[1000:151_000] == data).all()
    back = np.zeros(150_000, np.uint8)
    p.init.get(back, region.remote_key(), 1000).wait(BOUND)
    assert (back == data).all()
    region.deregister()


def test_context_options_new_fields_reach_the_config():
    with remora.Context(ignore_env=True, max_pending_handshakes=7, peer_timeout_ms=2500,
                        device_path=remora.DevicePathMode.STAGING,
                        checksum=remora.ChecksumMode.NONE) as ctx:
        c = ctx.config()
        assert c["max_pending_handshakes"] == 7
        assert c["peer_timeout_ms"] == 2500
        assert c["device_path"] == remora.DevicePathMode.STAGING
        assert c["checksum"] == remora.ChecksumMode.NONE
        assert c["auth_key"] is None
        assert c["devmem_ifname"] == ""
        assert c["rxq_socket"] == ""
        assert c["rxq_device_area"] == 0
        assert c["zcrx_area"] == 16 << 20
    with remora.Context(ignore_env=True) as ctx:  # the defaults of remora/config.h
        c = ctx.config()
        assert (c["max_pending_handshakes"], c["peer_timeout_ms"]) == (256, 30000)
        assert c["device_path"] == remora.DevicePathMode.AUTO
        assert c["checksum"] == remora.ChecksumMode.NONE
    with pytest.raises(remora.InvalidArgument):
        remora.Context(ignore_env=True, max_pending_handshakes=0)
    with pytest.raises(remora.InvalidArgument):
        remora.Context(ignore_env=True, max_pending_handshakes=65537)
    with pytest.raises(remora.InvalidArgument):
        remora.Context(ignore_env=True, peer_timeout_ms=999)


def test_every_option_of_the_configuration_table_is_a_keyword():
    rows = remora.config_variables()
    # Not those unset by default (auth_key, rails): "unset" is no value to pass.
    options = [r for r in rows if r["option"] and not r["default"].startswith("unset")]
    assert len(options) >= 20 and len({r["name"] for r in rows}) == len(rows)
    for r in options:
        # Every option takes the value its variable takes, as text, and reads back.
        with remora.Context(ignore_env=True, **{r["option"]: r["default"]}) as ctx:
            value = ctx.config()[r["option"]]
        with remora.Context(ignore_env=True) as ctx:
            assert ctx.config()[r["option"]] == value, r
    with remora.Context(ignore_env=True, chunk_bytes="64K", eager_limit=1024, same_host_pulls=False,
                        pin_mode=remora.PinMode.OFF, device_path="zcrx", log_level="warn") as ctx:
        c = ctx.config()
        assert (c["chunk_bytes"], c["eager_limit"], c["same_host_pulls"]) == (65536, 1024, False)
        assert c["pin_mode"] == remora.PinMode.OFF and c["device_path"] == remora.DevicePathMode.ZCRX
    with remora.Context(ignore_env=True, auth_key="the job secret") as ctx:
        assert isinstance(ctx.config()["auth_key"], remora.AuthKey)
    with remora.Context(ignore_env=True) as ctx:
        assert ctx.config()["rails"] == ""
    with remora.Context(ignore_env=True, rails="=lo") as ctx:
        assert ctx.config()["rails"] == "=lo"
    with pytest.raises(remora.InvalidArgument, match="REMORA_RAILS='no-such-nic'.*matches no interface"):
        remora.Context(ignore_env=True, rails="no-such-nic")
    with pytest.raises(TypeError, match="unexpected keyword argument 'chunk_size'.*chunk_bytes"):
        remora.Context(ignore_env=True, chunk_size=4096)
    with pytest.raises(remora.InvalidArgument, match="REMORA_CHUNK_SIZE"):
        remora.Context(ignore_env=True, chunk_bytes="1K")
    with pytest.raises(remora.InvalidArgument, match="auto"):
        remora.Context(ignore_env=True, same_host_pulls="maybe")
    with pytest.raises(remora.InvalidArgument):
        remora.Context(ignore_env=True, spin_us=-1)
    with pytest.raises(TypeError):
        remora.Context(ignore_env=True, spin_us=1.5)


def test_small_max_pending_handshakes_still_serves_clients():
    p = Pair(max_pending_handshakes=1)
    try:
        extra = [p.init_ctx.connect(p.listener.address, BOUND) for _ in range(3)]
        accepted = [p.listener.accept(BOUND) for _ in range(3)]
        for i, (a, b) in enumerate(zip(extra, accepted)):
            buf = bytearray(5)
            r = b.recv(buf, i)
            a.send(b"hello", i).wait(BOUND)
            r.wait(BOUND)
            assert bytes(buf) == b"hello"
            a.close()
            b.close()
    finally:
        p.close()


def checksum_pair(**options) -> Pair:
    try:
        return Pair(checksum=remora.ChecksumMode.CRC32C, eager_limit=4096, chunk_bytes=64 * 1024, **options)
    except remora.Unsupported as e:
        pytest.skip(f"built without ISA-L: {e}")


def test_crc32c_checksums_carry_data_intact():
    p = checksum_pair()
    try:
        assert p.init_ctx.config()["checksum"] == remora.ChecksumMode.CRC32C
        roundtrip(p)
    finally:
        p.close()


def test_checksum_modes_must_agree():
    try:
        target = remora.Context(ignore_env=True, checksum=remora.ChecksumMode.CRC32C)
    except remora.Unsupported as e:
        pytest.skip(f"built without ISA-L: {e}")
    init = remora.Context(ignore_env=True, checksum=remora.ChecksumMode.NONE)
    listener = target.listen("127.0.0.1:0")
    with pytest.raises(remora.Unsupported, match="checksum settings differ"):
        init.connect(listener.address, BOUND)  # the client learns it from the server's refusal
    init.close()
    target.close()


def test_auth_key_derivation_and_environment(monkeypatch):
    a = remora.AuthKey.from_secret(b"job secret")
    assert len(a.bytes) == 32 and a.bytes != b"job secret".ljust(32, b"\0")
    assert a == remora.AuthKey.from_secret(b"job secret")
    assert a != remora.AuthKey.from_secret(b"another secret")
    with pytest.raises(remora.InvalidArgument):
        remora.AuthKey.from_secret(b"")
    monkeypatch.delenv("REMORA_AUTH_KEY", raising=False)
    monkeypatch.delenv("REMORA_AUTH_KEY_FILE", raising=False)
    assert remora.AuthKey.from_env() is None
    monkeypatch.setenv("REMORA_AUTH_KEY", "job secret")
    assert remora.AuthKey.from_env() == a
    monkeypatch.setenv("REMORA_AUTH_KEY_FILE", "/nonexistent")
    with pytest.raises(remora.InvalidArgument):
        remora.AuthKey.from_env()  # both set


def test_auth_key_file_drops_one_newline(monkeypatch, tmp_path):
    f = tmp_path / "secret"
    f.write_bytes(b"job secret\n")
    monkeypatch.delenv("REMORA_AUTH_KEY", raising=False)
    monkeypatch.setenv("REMORA_AUTH_KEY_FILE", str(f))
    assert remora.AuthKey.from_env() == remora.AuthKey.from_secret(b"job secret")


def test_authenticated_endpoints_move_data_and_refuse_a_wrong_key():
    key = remora.AuthKey.from_secret(b"job secret")
    p = Pair(auth_key=key, eager_limit=4096, chunk_bytes=64 * 1024)
    try:
        assert p.init_ctx.config()["auth_key"] == key
        roundtrip(p)
        wrong = remora.Context(ignore_env=True, auth_key=remora.AuthKey.from_secret(b"guess"))
        with pytest.raises(remora.AccessDenied):
            wrong.connect(p.listener.address, BOUND)
        wrong.close()
        none = remora.Context(ignore_env=True)
        with pytest.raises(remora.AccessDenied):
            none.connect(p.listener.address, BOUND)
        none.close()
    finally:
        p.close()


def test_endpoint_stats_device_fields_on_host_memory(pair):
    msg = pattern(100_000, 1)
    buf = np.zeros(len(msg), np.uint8)
    r = pair.target.recv(buf, 1)
    pair.init.send(msg, 1).wait(BOUND)
    r.wait(BOUND)
    assert (buf == msg).all()
    for s in (pair.init.stats(), pair.target.stats()):
        # host memory never takes a device path: every device counter stays 0
        assert (s["staged_transfers"], s["staged_bytes"]) == (0, 0)
        assert (s["devmem_transfers"], s["zcrx_transfers"], s["device_path_refusals"]) == (0, 0, 0)
        assert (s["device_path"], s["device_path_reason"]) == ("", "")
    assert pair.init.stats()["bytes_sent"] >= len(msg)
    # the control streams' two ends: this process's own addresses, each with its port
    ends = [s["control_address"] for s in (pair.init.stats(), pair.target.stats())]
    assert all(e.rpartition(":")[2].isdigit() and int(e.rpartition(":")[2]) > 0 for e in ends), ends
    assert ends[0] != ends[1]


@pytest.mark.parametrize("pulls", [True, False])
def test_same_host_pulls_carry_chunks_and_can_be_turned_off(pulls):
    # Same-host pulls (docs/protocol.md): the two contexts are one process, which the
    # kernel always lets read itself, so with pulls on every chunk of a send and of a
    # put is read straight out of the sender's memory; off, all of it goes over TCP.
    p = Pair(eager_limit=4096, chunk_bytes=64 * 1024, same_host_pulls=pulls)
    try:
        assert p.init_ctx.config()["same_host_pulls"] is pulls
        msg = pattern(1 << 20, 21)
        buf = np.zeros(len(msg), np.uint8)
        r = p.target.recv(buf, 4)
        p.init.send(msg, 4).wait(BOUND)
        r.wait(BOUND)
        assert (buf == msg).all()
        mem = np.zeros(300_000, np.uint8)
        region = p.target_ctx.register(mem, remora.Access.ALL)
        data = pattern(200_000, 22)
        p.init.put(data, region.remote_key(), 50_000).wait(BOUND)
        assert (mem[50_000:250_000] == data).all()
        region.deregister()
        sent, got = p.init.stats(), p.target.stats()
        chunks = 16 + 4  # 1 MiB and 200 000 bytes in 64 KiB chunks
        assert sent["chunks_sent"] == chunks
        if pulls:
            assert (sent["chunks_pulled"], sum(sent["chunks_per_stream"])) == (chunks, 0)
            assert got["bytes_pulled"] == len(msg) + len(data)
            assert (sent["same_host_reason"], got["same_host_reason"]) == ("", "")
        else:
            assert (sent["chunks_pulled"], sum(sent["chunks_per_stream"])) == (0, chunks)
            assert got["bytes_pulled"] == 0
            assert got["same_host_reason"] == "REMORA_SAME_HOST=off"
    finally:
        p.close()


def thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return "never"
    return next((m for m in ("always", "madvise") if f"[{m}]" in text), "never")


@pytest.mark.parametrize("huge", [True, False])
def test_memory_pulled_again_and_again_is_promoted_to_huge_pages_unless_turned_off(huge):
    # A 4 MiB put source on 2 MiB boundaries, put three times with new contents: each put
    # lands intact; the two frames are collapsed into huge pages after the second put
    # where pull_huge_pages is on (REMORA_PULL_HUGEPAGES=auto) and THP is not "never".
    frame = 2 << 20
    p = Pair(eager_limit=4096, same_host_pulls=True, pull_huge_pages=huge)
    try:
        assert p.init_ctx.config()["pull_huge_pages"] is huge
        # The sides tell each other they can pull (HOST frames) just after connecting;
        # chunks sent before that go over TCP. A ping-pong orders both HOST frames first.
        ping = np.zeros(1, np.uint8)
        r = p.target.recv(ping, 9)
        p.init.send(np.ones(1, np.uint8), 9).wait(BOUND)
        r.wait(BOUND)
        r = p.init.recv(ping, 9)
        p.target.send(np.ones(1, np.uint8), 9).wait(BOUND)
        r.wait(BOUND)
        backing = np.zeros(3 * frame, np.uint8)
        skip = -backing.ctypes.data % frame
        source = backing[skip:skip + 2 * frame]
        mem = np.zeros(2 * frame, np.uint8)
        region = p.target_ctx.register(mem, remora.Access.ALL)
        for seed in range(3):
            source[:] = pattern(len(source), 30 + seed)
            p.init.put(source, region.remote_key(), 0).wait(BOUND)
            assert (mem == source).all()
        region.deregister()
        assert p.target.stats()["bytes_pulled"] == 3 * len(source)
        expected = 2 if huge and thp_mode() != "never" else 0
        assert p.init.stats()["huge_pages_promoted"] == expected
        assert p.target.stats()["huge_pages_promoted"] == 0
    finally:
        p.close()


def test_peer_said_goodbye_after_close(pair):
    assert not pair.target.peer_said_goodbye
    pair.init.close()
    with pytest.raises(remora.Error):
        pair.target.wait_notification(BOUND)  # ends with the endpoint's failure once the close came
    assert pair.target.failed and pair.target.closed_by_peer and pair.target.peer_said_goodbye


def test_wait_all(pair):
    msgs = [pattern(n, n) for n in (10, 5000, 200_000)]
    bufs = [np.zeros(len(m), np.uint8) for m in msgs]
    recvs = [pair.target.recv(b, i) for i, b in enumerate(bufs)]
    sends = [pair.init.send(m, i) for i, m in enumerate(msgs)]
    remora.wait_all(recvs + sends, BOUND)
    for m, b in zip(msgs, bufs):
        assert (m == b).all()
    remora.wait_all([])
    # the first error wins: a truncated receive
    small = bytearray(4)
    r = pair.target.recv(small, 9)
    s = pair.init.send(b"0123456789", 9)
    with pytest.raises(remora.Truncated):
        remora.wait_all([s, r], BOUND)
    # a receive nothing matches: Timeout at the deadline
    with pytest.raises(remora.Timeout):
        remora.wait_all([pair.target.recv(bytearray(1), 77)], 0.05)
    with pytest.raises(TypeError):
        remora.wait_all([object()])


def test_single_rank_epoch_failed_ranks_and_shrink_arguments():
    ctx = remora.Context(ignore_env=True)
    comm = remora.Communicator(ctx, rank=0, size=1, store=f"127.0.0.1:{free_port()}", timeout=BOUND)
    assert comm.epoch == 0
    assert comm.failed_ranks() == []
    with pytest.raises(remora.InvalidArgument):
        comm.shrink([1])  # outside 0..size-1
    with pytest.raises(remora.InvalidArgument):
        comm.shrink([-1])
    with pytest.raises(remora.InvalidArgument):
        comm.shrink([0])  # this rank
    new = comm.shrink([], timeout=BOUND)  # a healthy communicator shrinks too, and stays as it was
    assert (new.rank, new.size) == (0, 1) and new.epoch != 0
    buf = np.arange(5, dtype=np.float32)
    new.allreduce(buf)
    np.testing.assert_array_equal(buf, np.arange(5, dtype=np.float32))
    comm.barrier()
    assert comm.failure is None and comm.epoch == 0
    sub = new.split(0)
    assert sub.epoch == new.epoch  # splits of a shrunk communicator keep its epoch
    sub.close()
    new.close()
    comm.close()
    ctx.close()


def test_shrink_after_a_rank_is_killed():
    size = 3
    store = f"127.0.0.1:{free_port()}"
    peers = [run_peer("shrink", str(r), str(size), store) for r in range(1, size)]
    try:
        ctx = remora.Context(ignore_env=True)
        comm = remora.Communicator(ctx, rank=0, size=size, store=store, timeout=BOUND)
        comm.barrier()
        victim = peers[-1]
        assert victim.stdout.readline().strip() == "ready"
        victim.kill()
        victim.wait(BOUND)
        with pytest.raises(remora.Error):
            comm.barrier()
        assert comm.failure is not None
        assert comm.failed_ranks(BOUND) == [2]
        new = comm.shrink([2], timeout=BOUND)
        assert (new.rank, new.size) == (0, 2) and new.epoch != 0
        buf = np.full(8, 1.0)
        new.allreduce(buf)
        np.testing.assert_array_equal(buf, np.full(8, 3.0))
        seen = json.loads(peers[0].stdout.readline())
        assert seen["error"] is not None and seen["failed"] == [2]
        assert (seen["rank"], seen["size"], seen["epoch"]) == (1, 2, new.epoch)
        assert seen["sum"] == [3.0] * 8
        assert peers[0].wait(BOUND) == 0
        new.close()
        comm.close()
        ctx.close()
    finally:
        for p in peers:
            p.kill()
            p.wait(BOUND)


def test_store_every_call_over_loopback():
    with remora.StoreServer("127.0.0.1:0", auth_key=None) as server:
        assert server.address.endswith(f":{server.port}")
        a = remora.Store(server.address, BOUND, auth_key=None)
        b = remora.Store(server.address, BOUND, auth_key=None)
        assert a.local_host == "127.0.0.1"
        value = bytes(pattern(100_000, 3))
        a.set("k", value)
        assert b.get("k", BOUND) == value
        assert b.check("k") and not b.check("missing")
        b.wait(["k"], BOUND)
        with pytest.raises(remora.Timeout, match="missing"):
            b.wait(["k", "missing"], 0.05)
        assert b.wait_missing(["zz", "k", "missing"], 0.05) == ["zz", "missing"]
        assert b.wait_missing(["k"], BOUND) == []
        with pytest.raises(remora.Timeout):
            b.get("missing", 0.05)
        assert a.add("n", 5) == 5 and b.add("n", -7) == -2
        with pytest.raises(remora.InvalidArgument):
            a.add("k", 1)  # not a counter
        assert a.remove("k") and not a.remove("k") and not b.check("k")
        a.close()
        with pytest.raises(remora.Aborted):
            a.check("n")
        server.close()
        with pytest.raises(remora.PeerFailed):
            b.check("n")
        b.close()


def test_store_authentication():
    key = remora.AuthKey.from_secret(b"store secret")
    with remora.StoreServer("127.0.0.1:0", auth_key=key) as server:
        with remora.Store(server.address, BOUND, auth_key=key) as ok:
            ok.set("x", b"1")
            assert ok.get("x", BOUND) == b"1"
        with pytest.raises(remora.AccessDenied):
            remora.Store(server.address, BOUND, auth_key=remora.AuthKey.from_secret(b"guess"))
        with pytest.raises(remora.AccessDenied):
            with remora.Store(server.address, BOUND, auth_key=None) as none:
                none.check("x")  # a server that requires a key refuses the first request


def test_detect_launch(monkeypatch):
    for name in ("REMORA_RANK", "REMORA_WORLD_SIZE", "REMORA_LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                 "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "REMORA_STORE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(remora.InvalidArgument):
        remora.detect_launch()
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    li = remora.detect_launch()
    assert (li.rank, li.size, li.local_rank, li.local_size) == (2, 4, 0, 2)
    assert (li.launcher, li.store_address) == ("torchrun", "127.0.0.1:29500")
    monkeypatch.setenv("RANK", "4")  # rank >= size
    with pytest.raises(remora.InvalidArgument):
        remora.detect_launch()


def test_encrypt_seals_an_endpoint_and_refuses_a_plain_peer():
    # Same-host pulls off: the chunks of the 1 MiB message cross the sealed data stream.
    p = Pair(auth_key="the job secret", encrypt="on", same_host_pulls=False, eager_limit=4096,
             chunk_bytes=64 * 1024)
    try:
        assert p.init.stats()["encryption"] in ("aegis256", "aegis128l", "aes256gcm", "chacha20poly1305")
        assert p.target.stats()["encryption"] == p.init.stats()["encryption"]
        assert p.target_ctx.config()["encrypt"] == remora.EncryptMode.ON
        for size in (8, 4096, 1 << 20):
            msg = bytes((i * 7 + size) % 251 for i in range(size))
            buf = bytearray(size)
            r = p.target.recv(buf, size)
            p.init.send(msg, size).wait(BOUND)
            r.wait(BOUND)
            assert bytes(buf) == msg
        with remora.Context(ignore_env=True, auth_key="the job secret") as plain:
            with pytest.raises(remora.Unsupported, match="REMORA_ENCRYPT"):
                plain.connect(p.listener.address, BOUND)
    finally:
        p.close()
    with pytest.raises(remora.InvalidArgument, match="REMORA_AUTH_KEY"):
        remora.Context(ignore_env=True, encrypt="on")
    with pytest.raises(remora.InvalidArgument):
        remora.Context(ignore_env=True, auth_key="s", encrypt="rot13")


def test_failover_is_negotiated_and_reported_in_stats():
    # Two data streams (the default) on both sides: failover is on, nothing retired yet;
    # REMORA_FAILOVER=off on one side (failover=False) keeps it off for the endpoint.
    for failover, expect in ((None, True), (False, False)):
        options = dict(eager_limit=4096, chunk_bytes=64 * 1024, same_host_pulls=False)
        if failover is not None:
            options["failover"] = failover
        p = Pair(**options)
        try:
            assert p.init_ctx.config()["failover"] is (failover is not False)
            msg = bytes(i % 251 for i in range(1 << 20))
            buf = bytearray(len(msg))
            r = p.target.recv(buf, 1)
            p.init.send(msg, 1).wait(BOUND)
            r.wait(BOUND)
            assert bytes(buf) == msg
            for ep in (p.init, p.target):
                st = ep.stats()
                assert st["failover"] is expect
                assert (st["streams_retired"], st["chunks_resent"]) == (0, 0)
                assert all(r["streams_retired"] == 0 and r["state"] == "up" for r in st["rails"])
        finally:
            p.close()
