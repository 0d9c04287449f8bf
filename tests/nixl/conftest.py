"""Fixtures of the NIXL plugin's tests: NIXL agents (NVIDIA's, from the nixl-cu12 wheel)
in processes of their own (agent.py), with the REMORA backend from the INSTALLED remora
package (remora.nixl.plugin_dir() as NIXL_PLUGIN_DIR), over loopback or across two
network namespaces joined by a veth pair (made here; needs root, skipped with the reason
otherwise). scripts/lib/nixl.sh runs them from outside the checkout."""

from __future__ import annotations

import base64
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import remora.nixl

HERE = Path(__file__).resolve().parent
BOUND = 60.0  # seconds: no single step here may take longer; running out is a failure
AUTH = {"REMORA_AUTH_KEY": "nixl-test-secret", "REMORA_CHECKSUM": "crc32c"}
SEALED = {"REMORA_AUTH_KEY": "nixl-test-secret", "REMORA_ENCRYPT": "on"}  # docs/encryption.md


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class AgentError(Exception):
    """A command failed inside the agent: NIXL's exception class and message."""

    def __init__(self, reply: dict):
        super().__init__(f"{reply['error']}: {reply.get('message', '')}\n{reply.get('trace', '')}")
        self.error = reply["error"]


class Agent:
    """A NIXL agent in its own process (agent.py): call(cmd, **args) -> reply dict."""

    def __init__(self, name: str, prefix: list[str], env: dict, backends: str = "REMORA", log_dir: Path | None = None):
        self.name = name
        self.stderr_path = (log_dir or Path("/tmp")) / f"nixl-agent-{name}-{os.getpid()}.log"
        self._stderr = open(self.stderr_path, "w+")
        self.proc = subprocess.Popen([*prefix, sys.executable, str(HERE / "agent.py"), name, backends],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        self._buf = b""
        first = self._reply(BOUND)
        if "error" in first:
            raise AgentError(first)
        self.pid = self.call("pid")["pid"]  # the agent's own (`ip netns exec` runs it as a child)

    def _reply(self, timeout: float) -> dict:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        end = time.monotonic() + timeout
        try:
            while True:
                while b"\n" in self._buf:
                    line, self._buf = self._buf.split(b"\n", 1)
                    if line.startswith(b"@@ "):
                        return json.loads(line[3:])
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"agent {self.name} did not answer within {timeout} s; its log:\n{self.log()}")
                if sel.select(left):
                    chunk = os.read(self.proc.stdout.fileno(), 65536)
                    if not chunk:
                        raise EOFError(f"agent {self.name} exited ({self.proc.poll()}); its log:\n{self.log()}")
                    self._buf += chunk
        finally:
            sel.close()

    def call(self, cmd: str, timeout: float = BOUND, **args) -> dict:
        reply = self.ask(cmd, timeout, **args)
        if "error" in reply:
            raise AgentError(reply)
        return reply

    def ask(self, cmd: str, timeout: float = BOUND, **args) -> dict:
        """call() without raising: a failure comes back as {"error": class name, ...}."""
        self.proc.stdin.write((json.dumps({"cmd": cmd, **args}) + "\n").encode())
        self.proc.stdin.flush()
        return self._reply(timeout)

    def log(self) -> str:
        self._stderr.flush()
        return Path(self.stderr_path).read_text(errors="replace")[-4000:]

    def stop(self):
        """SIGSTOP: the process stays, its sockets stay open, nothing answers. Returns once
        every thread of it is stopped: kill() only queues the signal, and a thread that is
        running (a progress thread polling) may serve what comes next until it takes it."""
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped = True
        deadline = time.monotonic() + BOUND
        while not self._all_threads_stopped():
            if time.monotonic() > deadline:
                raise AssertionError(f"agent {self.name}: not every thread stopped within {BOUND} s of SIGSTOP")
            time.sleep(0.001)

    def _all_threads_stopped(self):
        states = []
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:  # a thread that ended meanwhile
                continue
        return all(state in ("T", "t") for state in states)

    def cont(self):
        os.kill(self.pid, signal.SIGCONT)
        self.stopped = False

    def kill(self):
        """SIGKILL: the kernel closes its sockets."""
        os.kill(self.pid, signal.SIGKILL)
        self.stopped = False
        self.proc.wait(timeout=BOUND)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._stderr.close()


class Netns:
    """Two network namespaces joined by a veth pair, removed on close."""

    def __init__(self):
        tag = os.getpid() % 200 + 20
        self.ns = [f"rnixlt{tag}a", f"rnixlt{tag}b"]
        self.addr = [f"10.194.{tag}.1", f"10.194.{tag}.2"]
        try:
            for n in self.ns:
                subprocess.run(["ip", "netns", "del", n], capture_output=True)
                self._ip("netns", "add", n)
                self._ip("-n", n, "link", "set", "lo", "up")
            self._ip("-n", self.ns[0], "link", "add", "rnt0", "type", "veth", "peer", "name", "rnt1", "netns",
                     self.ns[1])
            for i, dev in enumerate(("rnt0", "rnt1")):
                self._ip("-n", self.ns[i], "addr", "add", self.addr[i] + "/24", "dev", dev)
                self._ip("-n", self.ns[i], "link", "set", dev, "up")
        except (OSError, subprocess.CalledProcessError) as e:
            self.close()
            raise RuntimeError(f"cannot make network namespaces: {e}") from e

    @staticmethod
    def _ip(*args):
        r = subprocess.run(["ip", *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise subprocess.CalledProcessError(r.returncode, ["ip", *args], r.stdout, r.stderr)

    def prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.ns[i]]

    def close(self):
        for n in self.ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def agent_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("REMORA_") or k.startswith("UCX_"):
            del env[k]
    env["NIXL_PLUGIN_DIR"] = remora.nixl.plugin_dir()
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


class World:
    """Makes agents on one side or the other of a topology, and cleans up after the test."""

    def __init__(self, topology: str, tmp: Path):
        self.topology = topology
        self.tmp = tmp
        self.netns = Netns() if topology == "netns" else None
        self.agents: list[Agent] = []

    def agent(self, name: str, side: int = 0, env: dict | None = None, backends: str = "REMORA") -> Agent:
        prefix = self.netns.prefix(side) if self.netns else []
        a = Agent(name, prefix, agent_env(env), backends, self.tmp)
        self.agents.append(a)
        return a

    def pair(self, env: dict | None = None, names=("A", "B")) -> tuple[Agent, Agent]:
        """Two agents, one on each side of the topology (exchange() then shares their
        metadata, registrations included: register first)."""
        return self.agent(names[0], 0, env), self.agent(names[1], 1, env)

    def close(self):
        for a in self.agents:
            if getattr(a, "stopped", False):
                a.cont()
            a.close()
        if self.netns:
            self.netns.close()


def exchange(a: Agent, b: Agent):
    """Each agent loads the other's metadata (its connection info and registrations so
    far), so that either may start transfers and send notifications."""
    a.call("load", md=b.call("metadata")["md"])
    b.call("load", md=a.call("metadata")["md"])


def make_world(topology: str, tmp: Path) -> World:
    if topology == "netns":
        if os.geteuid() != 0:
            pytest.skip("network namespaces need root")
        try:
            return World(topology, tmp)
        except RuntimeError as e:
            pytest.skip(str(e))
    return World(topology, tmp)


@pytest.fixture(params=["loopback", "netns"])
def world(request, tmp_path):
    w = make_world(request.param, tmp_path)
    yield w
    w.close()


@pytest.fixture
def loopback(tmp_path):
    w = make_world("loopback", tmp_path)
    yield w
    w.close()
