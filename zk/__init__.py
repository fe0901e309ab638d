"""Metadata: the ``MetadataStore`` interface, its implementations, path layout and recipes.

Imports nothing else of Magnetar. Only ``zookeeper.py`` imports kazoo.
"""

from magnetar.zk.errors import (
    AlreadyExists,
    BadVersion,
    ConnectionLoss,
    InvalidPath,
    MetadataError,
    NotEmpty,
    NotFound,
    OperationTimeout,
    SessionLost,
    StoreClosed,
)
from magnetar.zk.memory import MemoryMetadataServer, MemoryMetadataStore
from magnetar.zk.store import (
    CREATE_ONLY,
    GetResult,
    MetadataStore,
    Notification,
    NotificationType,
    PutResult,
    SessionEvent,
    Stat,
)

__all__ = [
    "CREATE_ONLY",
    "AlreadyExists",
    "BadVersion",
    "ConnectionLoss",
    "GetResult",
    "InvalidPath",
    "MemoryMetadataServer",
    "MemoryMetadataStore",
    "MetadataError",
    "MetadataStore",
    "NotEmpty",
    "NotFound",
    "Notification",
    "NotificationType",
    "OperationTimeout",
    "PutResult",
    "SessionEvent",
    "SessionLost",
    "Stat",
    "StoreClosed",
]
