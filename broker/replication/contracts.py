"""What a replicator needs from its topic and from the remote cluster: two small protocols.

Owns:
- ``ReplicationSource``: one topic partition seen through its durable cursor
  ``pulsar.repl.<remote>``: read entries from the read position, mark everything up to a
  position as replicated (mark-delete), rewind to just after the mark-delete position, be
  told when entries are added, and the schema a stored schema version names
  (``source.CursorSource`` over a loaded topic; a fake in the unit tiers).
- ``RemoteCluster`` and ``RemoteProducer``: a producer on the remote cluster's topic of the
  same name that sends stored entries unchanged (``remote.ClientRemoteCluster`` on
  ``magnetar.client``; in-memory fakes in the unit tiers).
- ``ReplicationError``: why the remote refused or could not be reached, kept for stats.
Must not know: how either side is implemented.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from magnetar.broker.ledger.position import Position
from magnetar.broker.replication.republish import Republished
from magnetar.broker.storage.contract import Entry
from magnetar.client.protocol import pb


class ReplicationError(Exception):
    """The remote could not take what the replicator sent (down, refused, timed out);
    ``reason`` is what stats show. Every one is retried after a back-off."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ReplicationSource(Protocol):
    @property
    def topic(self) -> str:
        """The partition's full name (the remote topic has the same name)."""
        ...

    @property
    def mark_delete_position(self) -> Position:
        """Everything up to here is replicated (or needed no replication)."""
        ...

    def backlog(self) -> int:
        """Entries after the mark-delete position (``replicationBacklog``)."""
        ...

    async def read_entries(self, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries from the read position on, in order, advancing it;
        an empty list when there is nothing more now."""
        ...

    async def mark_delete(self, position: Position) -> None:
        """Everything up to ``position`` is replicated: the cursor's backlog shrinks and
        retention may trim the ledgers behind it. Positions only move forward."""
        ...

    def rewind(self) -> None:
        """Read position := the first entry after the mark-delete position."""
        ...

    def add_tail_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the loop) whenever entries are added to the topic."""
        ...

    def remove_tail_listener(self, listener: Callable[[], None]) -> None: ...

    async def schema_for_version(self, version: bytes) -> pb.Schema | None:
        """The topic's schema of that stored version (None if it has none)."""
        ...


class RemoteProducer(Protocol):
    @property
    def connected(self) -> bool: ...

    @property
    def address(self) -> str:
        """Where it is connected (``outboundConnection``), "" if not."""
        ...

    @property
    def last_error(self) -> str:
        """Why its connection last failed ("" if it never did)."""
        ...

    def send(self, entry: Republished) -> asyncio.Future[None]:
        """Queue ``entry`` (in call order); the future completes when the remote stored
        it, or fails with ``ReplicationError``. Never blocks: the replicator bounds what it
        has in flight."""
        ...

    async def schema_version_for(self, schema: pb.Schema) -> bytes:
        """The remote topic's version of ``schema`` (registered there if needed);
        ``ReplicationError`` if the remote refuses it (incompatible)."""
        ...

    async def close(self) -> None:
        """Stop; what is in flight is dropped (the cursor sends it again)."""
        ...


class RemoteCluster(Protocol):
    @property
    def name(self) -> str: ...

    async def create_producer(self, topic: str, producer_name: str) -> RemoteProducer:
        """A producer called ``producer_name`` on the remote ``topic`` (created there if
        needed); ``ReplicationError`` when the remote is down or refuses it."""
        ...


__all__ = ["RemoteCluster", "RemoteProducer", "ReplicationError", "ReplicationSource"]
