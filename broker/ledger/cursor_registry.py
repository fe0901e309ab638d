"""A managed ledger's cursors: which exist, and what the ledger needs to know of them.

Owns: ``CursorRegistry``: the durable cursors (created with a create-only znode, recovered
at open, deleted with their state), concurrent opens of one new cursor sharing its creation,
the non-durable cursors (readers), and the questions the managed ledger asks of them all:
the slowest durable mark-delete (trimming never passes it) and the slowest active reader
(the entry cache keeps what it has not read). A cursor that moves or goes tells the
registry (``moved``, ``forget``); the registry passes a move on (``on_moved``: trimming).
Must not know: how a cursor persists its acknowledgements, topics.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Protocol

from magnetar.broker.bookkeeper.errors import LedgerError
from magnetar.broker.ledger.ackstate import AckState
from magnetar.broker.ledger.cursor import CursorLedger, ManagedCursor
from magnetar.broker.ledger.cursor_log import CursorInfo
from magnetar.broker.ledger.position import EARLIEST, LATEST, Position
from magnetar.broker.ledger.states import ManagedLedgerState
from magnetar.zk import paths

log = logging.getLogger(__name__)

_GONE = (ManagedLedgerState.CLOSED, ManagedLedgerState.FENCED)


class CursorHost(CursorLedger, Protocol):
    """What the registry needs of its managed ledger: what its cursors need, and the error
    its state answers with."""

    def state_error(self) -> LedgerError: ...


class CursorRegistry:
    """The cursors of one managed ledger."""

    def __init__(self, host: CursorHost, on_moved: Callable[[], None]) -> None:
        self._host = host
        self._on_moved = on_moved
        self._durable: dict[str, ManagedCursor] = {}
        self._opening: dict[str, asyncio.Future[ManagedCursor]] = {}
        self._non_durable: list[ManagedCursor] = []

    def __repr__(self) -> str:
        return f"<CursorRegistry durable={sorted(self._durable)} readers={len(self._non_durable)}>"

    # -- the durable cursors, as a read-only mapping --------------------------------------------
    def __len__(self) -> int:
        return len(self._durable)

    def __iter__(self) -> Iterator[str]:
        return iter(self._durable)

    def __contains__(self, name: object) -> bool:
        return name in self._durable

    def __getitem__(self, name: str) -> ManagedCursor:
        return self._durable[name]

    def keys(self) -> list[str]:
        return list(self._durable)

    def get(self, name: str) -> ManagedCursor | None:
        return self._durable.get(name)

    def values(self) -> list[ManagedCursor]:
        return list(self._durable.values())

    def items(self) -> list[tuple[str, ManagedCursor]]:
        return list(self._durable.items())

    @property
    def readers(self) -> list[ManagedCursor]:
        """The non-durable cursors."""
        return list(self._non_durable)

    # -- opening, recovering, deleting ------------------------------------------------------------
    async def open(self, name: str, initial_position: Position = LATEST) -> ManagedCursor:
        """A durable cursor; an existing one keeps its state (``initial_position`` ignored)."""
        cursor = self._durable.get(name)
        if cursor is not None:
            return cursor
        if self._host.state in _GONE:
            raise self._host.state_error()
        opening = self._opening.get(name)
        if opening is not None:  # concurrent opens of one new cursor share its creation
            return await asyncio.shield(opening)
        fut = asyncio.ensure_future(self._create(name, initial_position))
        self._opening[name] = fut
        fut.add_done_callback(lambda _: self._opening.pop(name, None))
        return await asyncio.shield(fut)

    async def _create(self, name: str, initial_position: Position) -> ManagedCursor:
        md = self._initial_mark_delete(initial_position)
        cursor = await ManagedCursor.create(self._host, name, md)
        self._durable[name] = cursor
        return cursor

    async def recover(self) -> None:
        """Load every durable cursor stored under the managed ledger (at open)."""
        store, path = self._host.store, paths.managed_ledger(self._host.name)
        for child in await store.children(path):
            got = await store.get(f"{path}/{child}")
            try:
                CursorInfo.from_bytes(got.value if got is not None else b"")
            except (ValueError, KeyError, TypeError):
                # not a cursor: a managed ledger whose name extends ours (names must be
                # URL-encoded so this cannot happen), or a corrupt node: never guess
                log.error("%s: child %r is not a cursor; ignored", self._host.name, child)
                continue
            name = paths.decode_cursor_name(child)
            self._durable[name] = await ManagedCursor.recover(self._host, name)

    def new_non_durable(self, start: Position = LATEST, name: str = "") -> ManagedCursor:
        """A reader's cursor: starts at ``start`` (inclusive), never persisted, never trims."""
        if start == LATEST:
            md = self._host.ledgers.last_confirmed
        elif start == EARLIEST:
            md = self._initial_mark_delete(EARLIEST)
        else:
            md = Position(start.ledger_id, start.entry_id - 1)
        cursor = ManagedCursor(
            self._host, name or f"reader-{len(self._non_durable)}", AckState(md), durable=False
        )
        self._non_durable.append(cursor)
        return cursor

    def _initial_mark_delete(self, initial: Position) -> Position:
        if initial == EARLIEST:
            first = self._host.ledgers.first_position
            return Position(first.ledger_id, first.entry_id - 1)
        if initial == LATEST:
            return self._host.ledgers.last_confirmed
        return Position(initial.ledger_id, initial.entry_id - 1)

    async def delete(self, name: str) -> None:
        cursor = self._durable.pop(name, None)
        if cursor is not None:
            cursor.close_read_ahead()
            await cursor.delete_durable_state()
            self._on_moved()

    async def close(self) -> None:
        """The managed ledger closes: every reader stops reading ahead, every durable cursor
        makes its acknowledgements durable and closes."""
        for cursor in (*self._durable.values(), *self._non_durable):
            cursor.close_read_ahead()
        for cursor in list(self._durable.values()):
            await cursor.close()

    # -- what cursors tell -----------------------------------------------------------------------
    def moved(self, cursor: ManagedCursor) -> None:
        self._on_moved()

    def forget(self, cursor: ManagedCursor) -> None:
        """A non-durable cursor closed."""
        cursor.close_read_ahead()
        if cursor in self._non_durable:
            self._non_durable.remove(cursor)

    # -- what the managed ledger asks ------------------------------------------------------------
    def slowest_mark_delete(self) -> Position | None:
        """The slowest durable mark-delete (None: no durable cursor)."""
        if not self._durable:
            return None
        return min(c.durable_mark_delete_position for c in self._durable.values())

    def cache_needed_from(self) -> Position | None:
        """The slowest active reader's read position. A cursor ``cursor_backlogged_threshold``
        entries or more behind is not active for caching (Pulsar's
        ``managedLedgerCursorBackloggedThreshold``): it does not hold entries for itself
        against an active reader. With no active reader, the slowest cursor's position: as
        Pulsar's cache eviction, which evicts by position only before an active reader, the
        entries a backlogged reader has not read yet are left to the age and budget
        evictions (they were evicted at every read, so a consumer that fell
        ``cursor_backlogged_threshold`` entries behind read every entry from the bookies
        from then on, and fell further behind). None: no cursor at all."""
        threshold = self._host.config.cursor_backlogged_threshold
        entries_from = self._host.ledgers.entries_from
        slowest: Position | None = None
        slowest_any: Position | None = None
        for cursor in (*self._durable.values(), *self._non_durable):
            pos = cursor.read_position
            if slowest_any is None or pos < slowest_any:
                slowest_any = pos
            if slowest is not None and pos >= slowest:
                continue
            if entries_from(pos, threshold) < threshold:
                slowest = pos
        return slowest if slowest is not None else slowest_any

    def check_invariants(self) -> None:
        last = self._host.ledgers.last_confirmed
        for cursor in self._durable.values():
            assert cursor.mark_delete_position <= last or (
                cursor.mark_delete_position.entry_id == -1
            ), (cursor, last)


__all__ = ["CursorHost", "CursorRegistry"]
