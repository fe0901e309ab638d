"""A managed ledger's reads: entries forward from a position, from the cache or the bookies.

Owns: ``ManagedEntry`` and ``LedgerReads``: the read handles of the ledgers (the current
writer, closed ledgers' ``ReadHandle``s opened on first read, an offloaded ledger's handle
on the object store when tiered storage says its reads go there: ``StoreRoutes``), range
reads through the
entry cache, the one forward read loop (``read_from``: up to N entries from a position,
skipping what a reader acknowledged, through its read-ahead when it reads behind the cache;
it returns where the reader is to go on, and moves nobody), publish-time search, and the
tailing readers waiting for new entries.
Invariants: never reads past the last confirmed entry (``LedgerList.next_range`` is the
one stop rule); a read that finds nothing returns the position it started from (made
valid); entries come back in log order.
Must not know: cursors' persistence, topics, message formats (publish time comes from a
callback), bookies (a ledger is a ``ReadHandle``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, Protocol

from magnetar.broker.bookkeeper.client import LedgerClient
from magnetar.broker.bookkeeper.errors import LedgerError, LedgerNotFound
from magnetar.broker.bookkeeper.read_handle import ReadHandle
from magnetar.broker.ledger.cache import EntryCache
from magnetar.broker.ledger.config import ManagedLedgerConfig
from magnetar.broker.ledger.ledger_list import LedgerList
from magnetar.broker.ledger.position import Position
from magnetar.broker.ledger.read_ahead import ReadAhead, ReadAheadBudget
from magnetar.broker.ledger.states import ManagedLedgerState


class ManagedEntry(NamedTuple):
    """An entry of the managed ledger (a named tuple: one is made per entry read)."""

    position: Position
    payload: bytes


_new_tuple = tuple.__new__


class StoreRoutes(Protocol):
    """Where an offloaded ledger is read (the managed ledger's ``Offloading``)."""

    def routes_to_store(self, ledger_id: int) -> bool: ...

    def has_copy(self, ledger_id: int) -> bool: ...

    def bookie_copy_gone(self, ledger_id: int) -> None: ...

    async def reader(self, ledger_id: int) -> ReadHandle: ...


class ReadsHost(Protocol):
    """What reads need of their managed ledger (``ManagedLedger`` is one)."""

    @property
    def config(self) -> ManagedLedgerConfig: ...

    @property
    def ledgers(self) -> LedgerList: ...

    @property
    def ledger_client(self) -> LedgerClient: ...

    @property
    def state(self) -> ManagedLedgerState: ...

    @property
    def offloading(self) -> StoreRoutes: ...

    def state_error(self) -> LedgerError: ...


class Acknowledged(Protocol):
    """What a forward read skips: a reader's acknowledgements (a cursor's)."""

    def is_acknowledged(self, pos: Position) -> bool: ...

    def none_acknowledged_from(self, pos: Position) -> bool: ...


READ_AHEAD_READS_MAX = 16
"""Bookie range reads one cursor's read-ahead keeps in flight at most."""


class LedgerReads:
    """The read side of one managed ledger."""

    def __init__(self, host: ReadsHost, cache: EntryCache, budget: ReadAheadBudget) -> None:
        self._host = host
        self.cache = cache
        self._budget = budget
        self._readers: dict[int, ReadHandle] = {}
        self._waiters: list[asyncio.Future[None]] = []

    def __repr__(self) -> str:
        return f"<LedgerReads readers={sorted(self._readers)} waiters={len(self._waiters)}>"

    # -- ledgers' read handles ------------------------------------------------------------------
    def add_reader(self, handle: ReadHandle) -> None:
        """A closed ledger's handle (recovered at open, or the writer after rollover)."""
        self._readers[handle.ledger_id] = handle

    def forget_ledger(self, ledger_id: int) -> None:
        """The ledger is deleted: its handle and cached entries go."""
        self._readers.pop(ledger_id, None)
        self.cache.evict_ledger(ledger_id)

    def drop_bookie_reader(self, ledger_id: int) -> None:
        """The ledger's bookie copy is about to go: later reads open its store copy."""
        self._readers.pop(ledger_id, None)

    async def bookie_reader(self, ledger_id: int) -> ReadHandle:
        """The ledger's handle over the bookies, whatever tiered storage says (what an
        offload reads from)."""
        current = self._host.ledgers.current
        if current is not None and ledger_id == current.ledger_id:
            return current
        handle = self._readers.get(ledger_id)
        if handle is None:
            handle = await self._host.ledger_client.open_ledger(ledger_id, recovery=False)
            self._readers[ledger_id] = handle
        return handle

    async def _reader(self, ledger_id: int) -> ReadHandle:
        store = self._host.offloading
        if store.routes_to_store(ledger_id):
            return await store.reader(ledger_id)
        try:
            return await self.bookie_reader(ledger_id)
        except LedgerNotFound:
            if not store.has_copy(ledger_id):
                raise
            # offloaded, and its bookie copy deleted by a run that stopped before saying so
            store.bookie_copy_gone(ledger_id)
            return await store.reader(ledger_id)

    # -- reading --------------------------------------------------------------------------------
    async def read_range(self, ledger_id: int, first: int, last: int) -> list[ManagedEntry]:
        """Entries first..last of one ledger (from the cache when possible)."""
        new = _new_tuple
        cached = [
            new(ManagedEntry, (Position(ledger_id, e), payload))
            for e, payload in enumerate(self.cache.get_range(ledger_id, first, last), first)
        ]
        if len(cached) == last - first + 1:
            return cached
        handle = await self._reader(ledger_id)
        got = await handle.read(first + len(cached), last)
        return cached + [
            new(ManagedEntry, (Position(ledger_id, g.entry_id), g.payload)) for g in got
        ]

    async def read_from(
        self,
        start: Position,
        max_entries: int,
        acknowledged: Acknowledged | None = None,
        read_ahead: ReadAhead[ManagedEntry] | None = None,
    ) -> tuple[list[ManagedEntry], Position]:
        """Up to ``max_entries`` entries from ``start`` on, leaving out those
        ``acknowledged`` says are, through ``read_ahead`` if given; returns them and the
        position after the last one read (``start`` made valid if none)."""
        ledgers = self._host.ledgers
        next_valid, after = ledgers.next_valid_position, ledgers.position_after
        out: list[ManagedEntry] = []
        pos = next_valid(start)
        while len(out) < max_entries:
            want = max_entries - len(out)
            if read_ahead is not None:
                if pos > ledgers.last_confirmed:
                    break
                got = await read_ahead.read(pos, want)
            else:
                span = ledgers.next_range(pos, want)
                if span is None:
                    break
                got = await self.read_range(*span)
            if not got:
                break
            out += got if acknowledged is None else _unacknowledged(got, acknowledged)
            pos = next_valid(after(got[-1].position))
        return out, pos

    def behind_cache(self, pos: Position) -> bool:
        """Whether a read at ``pos`` goes to the bookies (and read-ahead is on)."""
        return (
            self._host.config.read_ahead_entries > 0
            and pos <= self._host.ledgers.last_confirmed
            and not self.cache.holds(pos.ledger_id, pos.entry_id)
        )

    def new_read_ahead(self) -> ReadAhead[ManagedEntry]:
        """A read-ahead for one reader (its owner closes it)."""
        cfg = self._host.config
        ledgers = self._host.ledgers
        return ReadAhead(
            self.read_range,
            ledgers.next_range,
            ledgers.average_entry_bytes,
            max_entries=cfg.read_ahead_entries,
            max_bytes=max(1, cfg.read_ahead_bytes),
            max_reads=READ_AHEAD_READS_MAX,
            min_chunk_entries=cfg.read_ahead_entries // READ_AHEAD_READS_MAX,
            budget=self._budget,
        )

    def read_done(self) -> None:
        """A reader moved on: entries every active reader has read past may go."""
        self.cache.evict_unneeded()

    async def find_by_publish_time(
        self, publish_time_ms: int, extract: Callable[[bytes], int]
    ) -> Position | None:
        """The first position whose entry's publish time is >= ``publish_time_ms``."""
        return await find_by_publish_time(
            self._host.ledgers.sizes(), self.read_range, publish_time_ms, extract
        )

    # -- tailing --------------------------------------------------------------------------------
    async def wait_for_entries(self, has_more: Callable[[], bool], timeout_s: float) -> bool:
        """Tailing: wait until ``has_more()`` (checked when entries are confirmed); False at
        the timeout."""
        if has_more():
            return True
        if self._host.state in (ManagedLedgerState.CLOSED, ManagedLedgerState.FENCED):
            raise self._host.state_error()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return has_more()
        return has_more()

    @property
    def waiting(self) -> bool:
        return bool(self._waiters)

    def wake(self) -> None:
        """Entries were confirmed: tailing readers look again."""
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)


class HasPayload(Protocol):
    @property
    def payload(self) -> bytes: ...


async def find_by_publish_time(
    sizes: list[tuple[int, int, int]],
    read_range: Callable[[int, int, int], Awaitable[Sequence[HasPayload]]],
    publish_time_ms: int,
    extract: Callable[[bytes], int],
) -> Position | None:
    """Binary search over the entries of ledgers ``sizes`` (id, entries, bytes), read with
    ``read_range``, for the first whose publish time (``extract``) is >= the target: about
    log2(entries) single-entry reads. None when every entry is older."""
    spans = [(lid, n) for lid, n, _ in sizes if n > 0]
    total = sum(n for _, n in spans)

    def at(index: int) -> Position:
        for lid, n in spans:
            if index < n:
                return Position(lid, index)
            index -= n
        raise IndexError(index)

    lo, hi = 0, total
    while lo < hi:
        mid = (lo + hi) // 2
        pos = at(mid)
        (entry,) = await read_range(pos.ledger_id, pos.entry_id, pos.entry_id)
        if extract(entry.payload) >= publish_time_ms:
            hi = mid
        else:
            lo = mid + 1
    return at(lo) if lo < total else None


def _unacknowledged(got: list[ManagedEntry], acknowledged: Acknowledged) -> list[ManagedEntry]:
    first = got[0].position
    if got[-1].position.ledger_id == first.ledger_id and acknowledged.none_acknowledged_from(first):
        return got
    is_acked = acknowledged.is_acknowledged
    return [e for e in got if not is_acked(e.position)]


__all__ = [
    "READ_AHEAD_READS_MAX",
    "Acknowledged",
    "LedgerReads",
    "ManagedEntry",
    "find_by_publish_time",
]
