"""remora's exceptions: one class per C++ StatusCode (include/remora/status.h), all under
remora.Error. Each carries the C++ message as its text and the code's stable name in
``code`` (a class attribute, "peer_failed", ...). The extension raises them."""

from __future__ import annotations

__all__ = [
    "Error", "InProgress", "NoResource", "InvalidArgument", "InvalidKey", "AccessDenied",
    "OutOfRange", "Truncated", "Timeout", "PeerFailed", "Unreachable", "ProtocolError",
    "Unsupported", "Aborted", "InternalError", "DeviceFailed", "DataCorrupt",
]


class Error(Exception):
    """Base of every remora error. ``code`` is the C++ status code's name."""

    code: str = "unknown"


class InProgress(Error):
    """Operation started but not complete (never raised by a finished wait)."""

    code = "in_progress"


class NoResource(Error):
    """Back-pressure or an exhausted budget; retry later or raise the budget."""

    code = "no_resource"


class InvalidArgument(Error, ValueError):
    """The caller passed something malformed (also a ValueError)."""

    code = "invalid_argument"


class InvalidKey(Error):
    """A remote key is forged, stale or unknown."""

    code = "invalid_key"


class AccessDenied(Error):
    """The key lacks the access right the operation needs."""

    code = "access_denied"


class OutOfRange(Error):
    """Offset/length outside what was registered or granted."""

    code = "out_of_range"


class Truncated(Error):
    """A message is larger than the receive buffer posted for it."""

    code = "truncated"


class Timeout(Error, TimeoutError):
    """A bounded wait expired (also the builtin TimeoutError). The operation goes on."""

    code = "timeout"


class PeerFailed(Error):
    """The peer disappeared (EOF, reset) or sent something fatal."""

    code = "peer_failed"


class Unreachable(Error):
    """Could not resolve or connect to the peer."""

    code = "unreachable"


class ProtocolError(Error):
    """Malformed frame, bad handshake or version mismatch."""

    code = "protocol"


class Unsupported(Error):
    """Feature not available here (the message says why)."""

    code = "unsupported"


class Aborted(Error):
    """Cancelled locally (endpoint closed, context destroyed)."""

    code = "aborted"


class InternalError(Error):
    """An invariant broke; please report."""

    code = "internal"


class DeviceFailed(Error):
    """A device (accelerator) copy or registration failed; the message says which."""

    code = "device_failed"


class DataCorrupt(Error):
    """A transfer's bytes failed their end-to-end checksum (REMORA_CHECKSUM=crc32c); the
    message names the operation and the chunk."""

    code = "data_corrupt"


# StatusCode's numeric values, in the order of the C++ enum (checked by the tests
# against the extension's own list of names).
_BY_CODE = {
    1: InProgress, 2: NoResource, 3: InvalidArgument, 4: InvalidKey, 5: AccessDenied,
    6: OutOfRange, 7: Truncated, 8: Timeout, 9: PeerFailed, 10: Unreachable,
    11: ProtocolError, 12: Unsupported, 13: Aborted, 14: InternalError, 15: DeviceFailed,
    16: DataCorrupt,
}
