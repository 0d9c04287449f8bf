"""tests/nixl/agent.py — one NIXL agent in a process of its own, driven by the tests
(conftest.Agent) with one JSON command per line on stdin. Each answer is one line
"@@ <json>" on stdout (NIXL writes its own log lines there too).

The agent is NVIDIA's, from the nixl-cu12 wheel; its backend the REMORA plugin the remora
package ships (NIXL_PLUGIN_DIR, set by the tests). Memory is NumPy arrays filled with a
pattern that both processes compute from a seed, so each side checks every byte of what
the other wrote without the bytes travelling twice.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import signal
import sys
import time
import traceback

import numpy as np

from nixl_cu12 import nixl_agent, nixl_agent_config

PERIOD = 1048573  # a prime: a block landing at a wrong offset never matches by accident


def pattern(seed: int, n: int) -> np.ndarray:
    base = np.random.default_rng(seed).integers(0, 256, PERIOD, dtype=np.uint8)
    return np.tile(base, n // PERIOD + 1)[:n]


def device_pointer(array) -> int:
    """The address of a remora.cuda_empty array, from its DLPack capsule."""
    cap = array.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return ctypes.c_void_p.from_address(get(cap, b"dltensor")).value  # DLManagedTensor.dl_tensor.data


class Worker:
    def __init__(self, name: str, backends: list[str]):
        self.name = name
        self.agent = nixl_agent(name, nixl_agent_config(backends=backends))
        self.bufs: dict[str, np.ndarray] = {}
        self.seeds: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.regs: dict[str, object] = {}
        self.handles: dict[str, object] = {}
        self.received: dict[str, list[bytes]] = {}

    # --- memory -------------------------------------------------------------------------

    def alloc(self, id: str, size: int, seed: int, mem: str = "DRAM"):
        """A buffer of `size` bytes filled with pattern(seed): a NumPy array (DRAM), or CUDA
        memory from remora.cuda_empty (VRAM: the driver REMORA_CUDA_DRIVER names)."""
        if mem == "VRAM":
            import remora

            self.bufs[id] = remora.cuda_empty(size)
            remora.cuda_copy(self.bufs[id], pattern(seed, size))
        else:
            self.bufs[id] = pattern(seed, size).copy()
        self.seeds[id] = seed
        self.sizes[id] = size
        return {"addr": self._addr(id)}

    def _addr(self, id: str) -> int:
        b = self.bufs[id]
        return int(b.ctypes.data) if isinstance(b, np.ndarray) else device_pointer(b)

    def _host(self, id: str) -> np.ndarray:
        b = self.bufs[id]
        if isinstance(b, np.ndarray):
            return b
        import remora

        out = np.empty(self.sizes[id], np.uint8)
        remora.cuda_copy(out, b)
        return out

    def fill(self, id: str, seed: int):
        b = self.bufs[id]
        if isinstance(b, np.ndarray):
            b[:] = pattern(seed, b.size)
        else:
            import remora

            remora.cuda_copy(b, pattern(seed, self.sizes[id]))
        self.seeds[id] = seed
        return {}

    def register(self, id: str, mem: str = "DRAM", offset: int = 0, length: int = -1):
        n = self.sizes[id] - offset if length < 0 else length
        key = id if offset == 0 and length < 0 else f"{id}@{offset}+{n}"
        self.regs[key] = self.agent.register_memory([(self._addr(id) + offset, n, 0, "")], mem)
        return {"reg": key}

    def deregister(self, reg: str):
        self.agent.deregister_memory(self.regs.pop(reg))
        return {}

    def check(self, id: str, segments: list = (), fill_seed: int | None = None, ignore: list = ()):
        """Every byte of buffer `id`: each segment [offset, length, seed, src_offset] holds
        pattern(seed)[src_offset:src_offset+length] (another buffer's bytes); every other
        byte still holds the buffer's own pattern (or pattern(fill_seed)), but those in an
        `ignore` range [offset, length] (what a transfer cut short may have left)."""
        b = self._host(id)
        expected = pattern(self.seeds[id] if fill_seed is None else fill_seed, b.size)
        ends: dict[int, int] = {}
        for _, n, seed, src in segments:
            ends[seed] = max(ends.get(seed, 0), src + n)
        sources = {seed: pattern(seed, end) for seed, end in ends.items()}
        for off, n, seed, src in segments:
            expected[off:off + n] = sources[seed][src:src + n]
        differs = b != expected
        for off, n in ignore:
            differs[off:off + n] = False
        diff = np.flatnonzero(differs)
        return {"mismatches": int(diff.size), "first": int(diff[0]) if diff.size else -1}

    # --- metadata -------------------------------------------------------------------------

    def metadata(self):
        return {"md": base64.b64encode(self.agent.get_agent_metadata()).decode()}

    def load(self, md: str):
        name = self.agent.add_remote_agent(base64.b64decode(md))
        return {"name": name.decode() if isinstance(name, bytes) else name}

    def remove(self, name: str):
        self.agent.remove_remote_agent(name)
        return {}

    def connect(self, name: str):
        self.agent.make_connection(name)
        return {}

    # --- transfers --------------------------------------------------------------------------

    def _descs(self, local: list, remote: list, mem: str, remote_mem: str | None):
        ld = [(self._addr(i) + off, n, 0) for i, off, n in local]
        rd = [(addr, n, 0) for addr, n in remote]
        return self.agent.get_xfer_descs(ld, mem), self.agent.get_xfer_descs(rd, remote_mem or mem)

    def prep(self, h: str, op: str, local: list, remote: list, agent: str, notif: str | None = None,
             mem: str = "DRAM", prepped: bool = False, backends: list[str] = (), remote_mem: str | None = None):
        """Creates transfer `h`: WRITE or READ between local (buffer id, offset, length)
        triples and remote (address, length) pairs of `agent`. prepped: through
        prep_xfer_dlist + make_prepped_xfer (vLLM's way) instead of initialize_xfer.
        backends: the ones NIXL may choose from (default: any). mem, remote_mem: the memory
        types of the two lists (remote_mem defaults to mem)."""
        msg = base64.b64decode(notif) if notif is not None else b""
        ld, rd = self._descs(local, remote, mem, remote_mem)
        if prepped:
            lp = self.agent.prep_xfer_dlist("NIXL_INIT_AGENT", ld, backends=list(backends))
            rp = self.agent.prep_xfer_dlist(agent, rd, backends=list(backends))
            idx = list(range(len(local)))
            self.handles[h] = self.agent.make_prepped_xfer(op, lp, idx, rp, idx, msg, backends=list(backends))
        else:
            self.handles[h] = self.agent.initialize_xfer(op, ld, rd, agent, msg, backends=list(backends))
        return {}

    def post(self, h: str, notif: str | None = None):
        t0 = time.monotonic()
        args = () if notif is None else (base64.b64decode(notif),)
        state = self.agent.transfer(self.handles[h], *args)
        return {"state": state, "seconds": time.monotonic() - t0}

    def wait(self, h: str, timeout: float = 60.0):
        """Polls until the transfer leaves PROC; the state, or the exception NIXL raised."""
        end = time.monotonic() + timeout
        state = "PROC"
        while state == "PROC":
            state = self.agent.check_xfer_state(self.handles[h])
            if time.monotonic() > end:
                return {"state": "TIMEOUT"}
        return {"state": state}

    def release(self, h: str):
        t0 = time.monotonic()
        self.agent.release_xfer_handle(self.handles.pop(h))
        return {"seconds": time.monotonic() - t0}

    # --- notifications -----------------------------------------------------------------------

    def notifs(self, count: int = 0, timeout: float = 30.0):
        """Every notification so far; waits until at least `count` have come (all agents)."""
        end = time.monotonic() + timeout
        while True:
            for k, v in self.agent.get_new_notifs().items():
                self.received.setdefault(k, []).extend(v)
            have = sum(len(v) for v in self.received.values())
            if have >= count or time.monotonic() > end:
                break
        out = {k: [base64.b64encode(m).decode() for m in v] for k, v in self.received.items()}
        self.received = {}
        return {"notifs": out}

    def send_notif(self, agent: str, msg: str):
        self.agent.send_notif(agent, base64.b64decode(msg))
        return {}

    # --- the process ----------------------------------------------------------------------------

    def pid(self):
        return {"pid": os.getpid()}

    def close(self):
        del self.agent
        return {}


def main():
    name, backends = sys.argv[1], sys.argv[2].split(",")
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        w = Worker(name, backends)
    except Exception as e:  # the agent could not be made: say why on the answer line
        print("@@ " + json.dumps({"error": type(e).__name__, "message": str(e)}), flush=True)
        return
    print("@@ " + json.dumps({"ready": name}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("cmd")
        if op == "exit":
            os._exit(0)  # skip the interpreter's teardown (NIXL's exit handlers are not ours to test)
        try:
            reply = getattr(w, op)(**cmd)
        except Exception as e:  # NIXL's status comes as an exception class: name it
            reply = {"error": type(e).__name__, "message": str(e), "trace": traceback.format_exc(limit=3)}
        print("@@ " + json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
