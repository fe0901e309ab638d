"""Metadata: the ``MetadataStore`` interface, its implementations, path layout and recipes,
and the routing of a cluster's paths between its local and the configuration store.

Imports nothing else of Magnetar. Only ``zookeeper.py`` imports kazoo; only ``embedded.py``
imports rocksdict. Open stores with ``open_metadata_store(url)`` (see ``factory.py``).
"""

from magnetar.zk.embedded import EmbeddedMetadataServer
from magnetar.zk.embedded_client import RemoteMetadataStore
from magnetar.zk.errors import (
    AlreadyExists,
    BadVersion,
    ConnectionLoss,
    InvalidPath,
    LockBusy,
    MetadataError,
    NotEmpty,
    NotFound,
    OperationTimeout,
    SessionLost,
    StoreClosed,
)
from magnetar.zk.factory import close_shared_servers, memory_server, open_metadata_store
from magnetar.zk.faults import FaultInjectingStore
from magnetar.zk.memory import MemoryMetadataServer, MemoryMetadataStore
from magnetar.zk.recipes import IdAllocator, LeaderElection, OwnershipLock
from magnetar.zk.routing import PathRouter, RoutingMetadataStore
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
from magnetar.zk.zookeeper import ZooKeeperMetadataStore

__all__ = [
    "CREATE_ONLY",
    "AlreadyExists",
    "BadVersion",
    "ConnectionLoss",
    "EmbeddedMetadataServer",
    "FaultInjectingStore",
    "GetResult",
    "IdAllocator",
    "InvalidPath",
    "LeaderElection",
    "LockBusy",
    "MemoryMetadataServer",
    "MemoryMetadataStore",
    "MetadataError",
    "MetadataStore",
    "NotEmpty",
    "NotFound",
    "Notification",
    "NotificationType",
    "OperationTimeout",
    "OwnershipLock",
    "PathRouter",
    "PutResult",
    "RemoteMetadataStore",
    "RoutingMetadataStore",
    "SessionEvent",
    "SessionLost",
    "Stat",
    "StoreClosed",
    "ZooKeeperMetadataStore",
    "close_shared_servers",
    "memory_server",
    "open_metadata_store",
]
