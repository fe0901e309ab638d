"""Typed errors of the metadata store.

Owns: the one exception tree that every ``MetadataStore`` implementation raises. kazoo,
rocksdict and socket exceptions are translated into these at the module that wraps them
and never escape it. Must not know: which implementation raised.
"""

from __future__ import annotations


class MetadataError(Exception):
    """Base of every metadata-store error; ``retriable``: the same call may succeed later."""

    retriable: bool = False

    def __init__(self, message: str = "", *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message} [{path}]" if path else message)


class NotFound(MetadataError):
    """The node does not exist (or, for ``put`` with an expected version, no longer exists)."""


class BadVersion(MetadataError):
    """Compare-and-set failed: the node's version is not the expected one."""


class AlreadyExists(MetadataError):
    """Create-only ``put`` on a path that exists."""


class LockBusy(AlreadyExists):
    """An ``OwnershipLock`` is held by another session; ``owner_value`` is what it wrote."""

    def __init__(self, message: str = "", *, path: str | None = None, owner_value: bytes = b""):
        super().__init__(message, path=path)
        self.owner_value = owner_value


class NotEmpty(MetadataError):
    """``delete`` of a node that still has children."""


class InvalidPath(MetadataError):
    """The path is not absolute, has empty segments, or ends with '/'."""


class ConnectionLoss(MetadataError):
    """The connection to the metadata service is down; the session may still be alive."""

    retriable = True


class SessionLost(MetadataError):
    """The session expired: its ephemeral nodes are gone and the store must be reopened."""


class StoreClosed(MetadataError):
    """The store was closed by its owner."""


class OperationTimeout(MetadataError):
    """The operation did not complete within its time limit."""

    retriable = True


__all__ = [
    "AlreadyExists",
    "BadVersion",
    "ConnectionLoss",
    "InvalidPath",
    "LockBusy",
    "MetadataError",
    "NotEmpty",
    "NotFound",
    "OperationTimeout",
    "SessionLost",
    "StoreClosed",
]
