"""Where the delayed-delivery index keeps its records: an append-only log of byte records.

Owns: the ``SegmentStore`` protocol, ``MemorySegmentStore`` (non-durable subscriptions and
tests) and ``ManagedLedgerSegmentStore``: a dedicated managed ledger per subscription,
named ``delayed_index_ledger_name(topic ledger, subscription)`` =
``<topic ledger name>/<subscription>/__delayed_index`` (its metadata node sits under the
subscription's cursor node, so deleting the topic recursively deletes it; a subscription
must delete its index *before* its cursor, whose node delete is not recursive). Dead
records are acknowledged on the ledger's own durable cursor ``index`` so the managed ledger
trims whole ledgers once nothing live remains in them.
Must not know: what the records mean (the index's codec does), topics, dispatch.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from magnetar.broker.ledger.config import ManagedLedgerConfig
from magnetar.broker.ledger.cursor import ManagedCursor
from magnetar.broker.ledger.managed_ledger import ManagedLedger, ManagedLedgerFactory
from magnetar.broker.ledger.position import EARLIEST, Position
from magnetar.zk import paths

INDEX_SUFFIX = "__delayed_index"
INDEX_CURSOR = "index"


def delayed_index_ledger_name(topic_ledger_name: str, subscription: str) -> str:
    return f"{topic_ledger_name}/{paths.encode_cursor_name(subscription)}/{INDEX_SUFFIX}"


class SegmentStore(Protocol):
    async def open(self) -> None: ...

    def stored_positions(self) -> list[Position]:
        """Positions of every record not yet released, in log order."""
        ...

    async def append(self, data: bytes) -> Position: ...

    async def read(self, position: Position) -> bytes: ...

    async def release(self, positions: list[Position]) -> None:
        """These records are dead: the store may reclaim them."""
        ...

    async def close(self) -> None: ...

    async def delete(self) -> None: ...


class MemorySegmentStore:
    """In-process store: survives ``close``/``open`` of an index (not a process restart)."""

    def __init__(self) -> None:
        self.records: dict[Position, bytes] = {}
        self._next = 0
        self.appends = 0

    async def open(self) -> None:
        return None

    def stored_positions(self) -> list[Position]:
        return sorted(self.records)

    async def append(self, data: bytes) -> Position:
        pos = Position(0, self._next)
        self._next += 1
        self.records[pos] = bytes(data)
        self.appends += 1
        return pos

    async def read(self, position: Position) -> bytes:
        return self.records[position]

    async def release(self, positions: list[Position]) -> None:
        for p in positions:
            self.records.pop(p, None)

    def stored_bytes(self) -> int:
        return sum(len(v) for v in self.records.values())

    async def close(self) -> None:
        return None

    async def delete(self) -> None:
        self.records.clear()


def index_ledger_config(base: ManagedLedgerConfig) -> ManagedLedgerConfig:
    """The topic's ledger settings, but no retention (dead index records are trimmed at once)
    and a small entry cache (chunks are read once, just before they are due)."""
    return dataclasses.replace(
        base, retention_time_ms=0, retention_size_bytes=0, entry_cache_bytes=1 << 20
    )


class ManagedLedgerSegmentStore:
    def __init__(
        self, factory: ManagedLedgerFactory, name: str, config: ManagedLedgerConfig | None = None
    ) -> None:
        self.factory = factory
        self.name = name
        self.config = config or index_ledger_config(factory.config)
        self.ml: ManagedLedger | None = None
        self.cursor: ManagedCursor | None = None

    def __repr__(self) -> str:
        return f"<ManagedLedgerSegmentStore {self.name}>"

    async def open(self) -> None:
        self.ml = await self.factory.open(self.name, self.config)
        self.cursor = self.ml.cursors.get(INDEX_CURSOR)
        if self.cursor is None:
            self.cursor = await self.ml.open_cursor(INDEX_CURSOR, EARLIEST)

    def _parts(self) -> tuple[ManagedLedger, ManagedCursor]:
        if self.ml is None or self.cursor is None:
            raise RuntimeError(f"{self.name}: store not open")
        return self.ml, self.cursor

    def stored_positions(self) -> list[Position]:
        ml, cursor = self._parts()
        out = []
        for ledger_id, entries, _ in ml.ledger_sizes():
            for e in range(entries):
                pos = Position(ledger_id, e)
                if not cursor.is_acknowledged(pos):
                    out.append(pos)
        return out

    async def append(self, data: bytes) -> Position:
        ml, _ = self._parts()
        return await ml.add(data)

    async def read(self, position: Position) -> bytes:
        ml, _ = self._parts()
        (entry,) = await ml.read_range(position.ledger_id, position.entry_id, position.entry_id)
        return entry.payload

    async def release(self, positions: list[Position]) -> None:
        if positions:
            _, cursor = self._parts()
            await cursor.delete(positions)

    async def close(self) -> None:
        if self.ml is not None:
            await self.ml.close()

    async def delete(self) -> None:
        if self.ml is None:
            self.ml = await self.factory.open(self.name, self.config)
        await self.ml.delete()
        self.ml = self.cursor = None


__all__ = [
    "INDEX_CURSOR",
    "INDEX_SUFFIX",
    "ManagedLedgerSegmentStore",
    "MemorySegmentStore",
    "SegmentStore",
    "delayed_index_ledger_name",
    "index_ledger_config",
]
