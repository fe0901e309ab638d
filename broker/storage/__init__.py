"""The storage contract topics are written against (re-exported here), and its
implementations: in memory (``memory``, for the fast unit tier) and over the managed ledger
(``managed_adapter``).

Owns: the narrow interface between topics and ledgers.
Must not know: topics, dispatch, policies or the protocol.
"""

from magnetar.broker.storage.contract import (
    AddedCallback,
    Entry,
    IndexHome,
    StorageFailures,
    StorageMemory,
    TopicCursor,
    TopicLedger,
    TopicStorageFactory,
)

__all__ = [
    "AddedCallback",
    "Entry",
    "IndexHome",
    "StorageFailures",
    "StorageMemory",
    "TopicCursor",
    "TopicLedger",
    "TopicStorageFactory",
]
