"""Fixtures of the remora package's tests. They run against the INSTALLED package
(scripts/lib/python.sh runs pytest from outside the checkout), over real loopback
sockets; peers that must die or run collectives are real processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import remora

HERE = Path(__file__).resolve().parent
BOUND = 30.0  # seconds: no single wait here may take longer; running out is a failure


class Pair:
    """Two contexts in this process: `init` connected to `target` (accepted)."""

    def __init__(self, **options):
        options.setdefault("ignore_env", True)
        self.target_ctx = remora.Context(**options)
        self.init_ctx = remora.Context(**options)
        self.listener = self.target_ctx.listen("127.0.0.1:0")
        self.init = self.init_ctx.connect(self.listener.address, BOUND)
        self.target = self.listener.accept(BOUND)

    def close(self):
        self.init.close()
        self.target.close()
        self.init_ctx.close()
        self.target_ctx.close()


@pytest.fixture
def pair():
    p = Pair(eager_limit=4096, chunk_bytes=64 * 1024)
    yield p
    p.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_peer(*args: str) -> subprocess.Popen:
    """Starts tests/python/peer.py with `args`; its stdout is a pipe of lines."""
    return subprocess.Popen([sys.executable, str(HERE / "peer.py"), *args], stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True, env=dict(os.environ))
