"""The ``remora`` backend of ``torch.distributed``.

Collectives and point-to-point messages of a process group run on a remora
Communicator (RDMA-like memory semantics over TCP); the ranks meet through the
store that ``init_process_group`` hands the backend (torchrun's rendezvous).

With PyTorch >= 2.15 the installed package registers itself when a process group
names it (entry point ``torch.distributed.backends``)::

    torch.distributed.init_process_group("remora")

With older PyTorch, ``import remora_torch`` first. CPU tensors only, but in the
one-sided windows of PyTorch 2.15 (``torch.distributed._new_window``: put, signal,
wait_signal), which take CUDA tensors where remora finds a CUDA driver;
``_C.has_windows`` says whether this build has them (the PyTorch it was built
against declares them).

Environment: ``REMORA_HOST`` sets the address this rank listens on (default: the
local address of the route to ``MASTER_ADDR``, or 127.0.0.1 when every rank is on
this host); remora's ``REMORA_*`` variables apply (docs/configuration.md).
"""

from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist

from . import _C

__all__ = ["register", "allreduce_algorithm"]

BACKEND_NAME = "remora"


def _listen_host() -> str:
    """The address other ranks can reach this one at."""
    host = os.environ.get("REMORA_HOST")
    if host:
        return host
    master = os.environ.get("MASTER_ADDR")
    local = os.environ.get("LOCAL_WORLD_SIZE")
    world = os.environ.get("WORLD_SIZE")
    if local is not None and local == world:
        return "127.0.0.1"  # every rank on this host
    if master:
        # The local address of the route to the rendezvous host (no packet is sent).
        family = socket.AF_INET6 if ":" in master else socket.AF_INET
        try:
            infos = socket.getaddrinfo(master, 1, family, socket.SOCK_DGRAM)
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(infos[0][4])
                return s.getsockname()[0]
        except OSError:
            pass
    return socket.gethostbyname(socket.gethostname())


def _create(store, rank: int, size: int, timeout: datetime.timedelta):
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return _C.create_backend(store, rank, size, timeout.total_seconds(), _listen_host(), local_size)


def register() -> None:
    """Registers the ``remora`` backend with torch.distributed (idempotent)."""
    if getattr(dist.Backend, BACKEND_NAME.upper(), None) == BACKEND_NAME and BACKEND_NAME.upper() in getattr(
        dist.Backend, "_plugins", {}
    ):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu"])


def allreduce_algorithm(nbytes: int, group=None) -> str:
    """The algorithm remora runs for an allreduce of ``nbytes`` in ``group``."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _C.allreduce_algorithm(pg._get_backend(torch.device("cpu")), nbytes)


def connections(group=None) -> dict:
    """What this rank's remora backend holds to reach the other ranks of ``group``:
    ``peers`` (ranks it has an endpoint to), ``sockets``, ``sealed_peers`` (of those
    ranks, the ones whose connections are sealed: ``REMORA_ENCRYPT``), ``segment_ranks``
    (ranks that map this rank's shared segment, itself included; 0: none) and
    ``no_segment`` (why it has none)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return _C.connections(pg._get_backend(torch.device("cpu")))


register()
