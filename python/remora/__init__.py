"""remora: RDMA-like memory semantics over plain TCP.

Python bindings of the C++ library (include/remora/*.h): Context (with every
ContextOptions field; AuthKey, ChecksumMode, DevicePathMode), Listener, Endpoint
(send, recv, put, get, put_batch, get_batch, atomics, flush, notifications), Region,
RemoteKey, Pool and Buffer, Request (wait, test, done, await), wait_all and
Communicator (every collective; split, shrink, failed_ranks, epoch), the rendezvous
StoreServer and Store, detect_launch, and config_variables (every REMORA_* variable). Memory is any
buffer-protocol or DLPack object (NumPy arrays, PyTorch tensors on the CPU or a CUDA
device, CuPy arrays, bytearray, ...), used in place; CUDA memory moves through pinned
staging buffers (cuda_empty and cuda_copy serve programs without a framework).
Errors are remora.Error subclasses, one per status code. See docs/python.md.
remora.nixl (and nixl_plugin_path) locate the NIXL backend plugin shipped with the
package (docs/nixl.md).
"""

from __future__ import annotations

from ._errors import *  # noqa: F401,F403
from ._errors import __all__ as _error_names
from ._remora import (  # noqa: F401
    FOREVER,
    WIRE_VERSION,
    Access,
    AuthKey,
    Buffer,
    ChecksumMode,
    Communicator,
    Context,
    DevicePathMode,
    DmabufMemory,
    EncryptMode,
    Endpoint,
    LaunchInfo,
    Listener,
    LogLevel,
    Notification,
    PinMode,
    Pool,
    Region,
    RemoteKey,
    Request,
    Store,
    StoreServer,
    __version__,
    config_variables,
    cuda_copy,
    cuda_empty,
    detect_launch,
    wait_all,
)

__all__ = [
    "FOREVER", "WIRE_VERSION", "Access", "AuthKey", "Buffer", "ChecksumMode", "Communicator", "EncryptMode",
    "Context", "DevicePathMode", "DmabufMemory", "Endpoint", "LaunchInfo", "Listener", "LogLevel", "Notification",
    "PinMode", "Pool", "Region", "RemoteKey", "Request", "Store", "StoreServer", "__version__",
    "config_variables", "cuda_copy", "cuda_empty", "detect_launch", "nixl_plugin_path", "wait_all", *_error_names,
]


def nixl_plugin_path() -> str:
    """The path of ``libplugin_REMORA.so``, the backend plugin for NVIDIA NIXL shipped with
    this package. ``python -m remora.nixl install`` links it into NIXL's plugin folder; see
    :mod:`remora.nixl` and docs/nixl.md."""
    from .nixl import plugin_path

    return plugin_path()
