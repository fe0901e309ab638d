"""A topic partition as its replicator reads it: the ``ReplicationSource`` over a real topic.

Owns: ``CursorSource``, the ``contracts.ReplicationSource`` of one loaded persistent topic and
its durable cursor ``pulsar.repl.<remote>`` (opened by ``topic_replication``): reads from the
cursor's read position, mark-delete (the backlog kept for the remote shrinks, retention may
trim behind it), rewind, the topic's tail notifications, and the topic's schema of a stored
version (from the schema registry, in wire form).
Must not know: the remote cluster, the replicator's states.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import Entry, TopicCursor
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.client.protocol import pb

SchemaLookup = Callable[[bytes], Awaitable[pb.Schema | None]]
"""The topic's schema of a stored version (None: none under that version)."""


class CursorSource:
    """``ReplicationSource`` over ``topic`` and its replicator cursor ``cursor``."""

    def __init__(
        self, topic: PersistentTopic, cursor: TopicCursor, schema_of: SchemaLookup
    ) -> None:
        self._topic = topic
        self._cursor = cursor
        self._schema_of = schema_of

    def __repr__(self) -> str:
        return f"<CursorSource {self._topic.full_name} {self._cursor.name}>"

    @property
    def topic(self) -> str:
        return self._topic.full_name

    @property
    def cursor_name(self) -> str:
        return self._cursor.name

    @property
    def mark_delete_position(self) -> Position:
        return self._cursor.mark_delete_position

    def backlog(self) -> int:
        return self._cursor.backlog()

    async def read_entries(self, max_entries: int) -> list[Entry]:
        return await self._cursor.read_entries(max_entries)

    async def mark_delete(self, position: Position) -> None:
        if position > self._cursor.mark_delete_position:
            await self._cursor.ack_cumulative(position)

    def rewind(self) -> None:
        self._cursor.rewind()

    def add_tail_listener(self, listener: Callable[[], None]) -> None:
        self._topic.ledger.add_tail_listener(listener)

    def remove_tail_listener(self, listener: Callable[[], None]) -> None:
        self._topic.ledger.remove_tail_listener(listener)

    async def schema_for_version(self, version: bytes) -> pb.Schema | None:
        return await self._schema_of(version)


__all__ = ["CursorSource", "SchemaLookup"]
