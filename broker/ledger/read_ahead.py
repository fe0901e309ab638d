"""Read-ahead for a cursor reading behind the entry cache: bookie reads pipelined.

Owns: ``ReadAhead``, the *chunks* (one bookie range read each) issued ahead of one cursor's
read position, and its ``ReadAheadStats``. A cursor whose entries have left the entry cache
reads them from the bookies; one range read at a time makes each dispatch round wait a
whole round trip, which on a broker busy with publishes is several event-loop turns. The
read-ahead keeps the next chunks in flight while the current one is dispatched, so a round
finds its entries already read.

How a read at position ``p`` for ``want`` entries goes (``read``):
- chunks wholly before ``p`` are dropped (they were dispatched);
- if the first chunk does not hold ``p`` (the cursor was rewound, seeked or reset, or this
  is the first read), every chunk is dropped and the window starts again at ``p``;
- the window is topped up: the entries asked for first (``want``, as one read without
  read-ahead would), then chunks of ``want`` entries (at least ``min_chunk_entries``) from
  where the last one ended, while the entries from ``p`` on stay within ``max_entries`` and
  their bytes within ``max_bytes`` (a chunk in flight counts its entries times the ledger's
  average entry size, a landed one its real bytes; a chunk is cut to fit), and at most
  ``max_reads`` chunks are in flight;
- the first chunk is awaited, then the entries from ``p`` on are taken from it and from the
  chunks after it that have already landed, up to ``want``.
Bounds: entries held or in flight <= ``max_entries`` (past the ``want`` asked for); bytes
<= ``max_bytes`` or the ``want`` asked for, whichever is more (estimated before a chunk
lands); reads in flight <= ``max_reads``. Broker-wide, every read-ahead draws the bytes of
its chunks from one ``ReadAheadBudget``: the chunks read *ahead* (past the ``want`` asked
for, or about to be asked for: the top-up after a read) are issued only while the budget
has room, so N backlogged cursors hold at most the
budget between them, not N x ``max_bytes``; a cursor whose read-ahead finds the budget spent
reads what it asks for, one read at a time. A chunk's bytes go back to the budget when the
chunk leaves the window (taken, passed, dropped, or the read-ahead closed).
A read whose window another read of the same cursor moved while it waited is served by a
plain range read (cursors are read by one dispatch round at a time; this only keeps two
readers from dropping each other's window without end).
A chunk whose read failed fails the read that takes it; every chunk is dropped then.
Dropped chunks still in flight are left to finish (their result is discarded); ``close``
cancels them.
Invariants: chunks are in log order, each starting where the previous one ended (or at the
next ledger's first entry); ``check_invariants``.
Must not know: cursors' acknowledgements (the caller filters), topics, dispatch, bookies
(reads and navigation are injected by the managed ledger).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from magnetar.broker.ledger.position import Position


class ReadEntry(Protocol):
    """What a read brings per entry (the managed ledger's ``ManagedEntry``)."""

    @property
    def position(self) -> Position: ...

    @property
    def payload(self) -> bytes: ...


E = TypeVar("E", bound=ReadEntry)

ReadRange = Callable[[int, int, int], Awaitable[list[E]]]
"""(ledger id, first entry id, last entry id) -> the entries, in order."""
NextRange = Callable[[Position, int], tuple[int, int, int] | None]
"""(position, at most n entries) -> the next readable range (ledger id, first, last) at or
after the position, or None when there is nothing confirmed to read there."""
EntryBytes = Callable[[int], int]
"""ledger id -> the average bytes of one of its entries (an estimate for reads in flight)."""


@dataclass(frozen=True, slots=True)
class ReadAheadStats:
    reads_issued: int
    """Chunks (bookie range reads) issued."""
    entries_read: int
    """Entries the landed chunks brought."""
    chunks_dropped: int
    """Chunks dropped before any of their entries was used (the cursor moved elsewhere)."""
    max_reads_in_flight: int
    """The most chunks ever in flight at once (> 1: reads were pipelined)."""
    chunks: int
    in_flight: int


class ReadAheadBudget:
    """The bytes every read-ahead of a broker may hold or have in flight, together."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes <= 0:
            raise ValueError("the read-ahead budget must be > 0 bytes")
        self.capacity = capacity_bytes
        self.held = 0
        self.peak = 0
        self.refused = 0
        """Times a read-ahead wanted a chunk and found the budget spent."""

    def available(self) -> int:
        return max(0, self.capacity - self.held)

    def take(self, nbytes: int) -> None:
        self.held += nbytes
        self.peak = max(self.peak, self.held)

    def give_back(self, nbytes: int) -> None:
        self.held -= nbytes


class _Chunk(Generic[E]):
    __slots__ = ("first", "future", "last", "ledger_id", "nbytes", "reserved", "used")

    future: asyncio.Future[list[E]]

    def __init__(self, ledger_id: int, first: int, last: int, est_bytes: int) -> None:
        self.ledger_id = ledger_id
        self.first = first
        self.last = last
        self.nbytes = est_bytes  # an estimate while in flight, the real size once landed
        self.reserved = 0  # bytes of the budget this chunk holds (0 once it left the window)
        self.used = False

    def holds(self, pos: Position) -> bool:
        return pos.ledger_id == self.ledger_id and self.first <= pos.entry_id <= self.last

    def before(self, pos: Position) -> bool:
        return self.ledger_id < pos.ledger_id or (
            self.ledger_id == pos.ledger_id and self.last < pos.entry_id
        )

    def entries_from(self, pos: Position) -> int:
        if self.ledger_id == pos.ledger_id and self.first <= pos.entry_id:
            return self.last - pos.entry_id + 1
        return self.last - self.first + 1


def _retrieve(fut: asyncio.Future[list[E]]) -> None:
    """A dropped chunk's outcome is retrieved (nobody awaits it any more)."""
    if not fut.cancelled():
        fut.exception()


class ReadAhead(Generic[E]):
    """Pipelined range reads ahead of one cursor (see the module docstring)."""

    def __init__(
        self,
        read_range: ReadRange[E],
        next_range: NextRange,
        entry_bytes: EntryBytes,
        *,
        max_entries: int,
        max_bytes: int,
        max_reads: int = 16,
        min_chunk_entries: int = 1,
        budget: ReadAheadBudget | None = None,
    ) -> None:
        if max_entries <= 0 or max_bytes <= 0 or max_reads <= 0:
            raise ValueError("read-ahead bounds must be > 0")
        self._read_range = read_range
        self._next_range = next_range
        self._entry_bytes = entry_bytes
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_reads = max_reads
        self.min_chunk_entries = max(1, min_chunk_entries)
        self.budget = budget
        self._chunks: collections.deque[_Chunk[E]] = collections.deque()
        self._next: Position | None = None  # where the next chunk starts
        self.reads_issued = 0
        self.entries_read = 0
        self.chunks_dropped = 0
        self.max_reads_in_flight = 0
        self.closed = False

    def __repr__(self) -> str:
        return f"<ReadAhead chunks={len(self._chunks)} next={self._next}>"

    # -- the window ----------------------------------------------------------------------------
    def _in_flight(self) -> int:
        return sum(1 for c in self._chunks if not c.future.done())

    def _fill(self, pos: Position, want: int) -> None:
        chunk_entries = max(want, self.min_chunk_entries)
        ahead = ahead_bytes = 0
        for c in self._chunks:
            n = c.entries_from(pos)
            if n > 0:
                ahead += n
                ahead_bytes += c.nbytes
        in_flight = self._in_flight()
        while self._next is not None and ahead < self.max_entries and in_flight < self.max_reads:
            n = min(chunk_entries, self.max_entries - ahead)
            if ahead:  # reading ahead (the entries asked for are under way): bytes bound it
                room = self.max_bytes - ahead_bytes
                if self.budget is not None:
                    room = min(room, self.budget.available())
                n = min(n, room // self._entry_bytes(self._next.ledger_id))
                if n <= 0:
                    if self.budget is not None and room < self.max_bytes - ahead_bytes:
                        self.budget.refused += 1
                    return
            else:
                n = min(n, want)  # the read asked for: what it asked, as without read-ahead
            got = self._next_range(self._next, n)
            if got is None:
                return  # nothing confirmed there yet: the next read tops up again
            ledger_id, first, last = got
            est = (last - first + 1) * self._entry_bytes(ledger_id)
            chunk: _Chunk[E] = _Chunk(ledger_id, first, last, est)
            if self.budget is not None:
                chunk.reserved = est
                self.budget.take(est)
            chunk.future = asyncio.ensure_future(self._read(chunk))
            self._chunks.append(chunk)
            self.reads_issued += 1
            in_flight += 1
            self.max_reads_in_flight = max(self.max_reads_in_flight, in_flight)
            ahead += last - first + 1
            ahead_bytes += est
            self._next = Position(ledger_id, last + 1)

    async def _read(self, chunk: _Chunk[E]) -> list[E]:
        got = await self._read_range(chunk.ledger_id, chunk.first, chunk.last)
        self.entries_read += len(got)
        chunk.nbytes = sum(len(e.payload) for e in got)  # landed: the real size
        if chunk.reserved and self.budget is not None:  # still in the window
            self.budget.give_back(chunk.reserved)
            chunk.reserved = chunk.nbytes
            self.budget.take(chunk.nbytes)
        return got

    def _release(self, chunk: _Chunk[E]) -> None:
        """The chunk left the window: its bytes go back to the budget."""
        if chunk.reserved and self.budget is not None:
            self.budget.give_back(chunk.reserved)
        chunk.reserved = 0

    def _drop(self, chunk: _Chunk[E]) -> None:
        self._release(chunk)
        if chunk.future.done():
            _retrieve(chunk.future)
        else:
            chunk.future.add_done_callback(_retrieve)

    def clear(self) -> None:
        """Drop every chunk (in-flight reads finish unobserved) and forget the position."""
        for chunk in self._chunks:
            self.chunks_dropped += not chunk.used
            self._drop(chunk)
        self._chunks.clear()
        self._next = None

    # -- reading -------------------------------------------------------------------------------
    async def read(self, pos: Position, want: int) -> list[E]:
        """Entries from ``pos`` on (consecutive, at most ``want``; at least one unless
        nothing is confirmed at ``pos`` or the read-ahead was closed meanwhile). Raises
        what the chunk's read raised."""
        while True:  # one pass (break) or a return
            if self.closed:
                raise RuntimeError("read-ahead closed")
            chunks = self._chunks
            while chunks and chunks[0].before(pos):
                passed = chunks.popleft()  # dispatched, or skipped by a seek forward
                self.chunks_dropped += not passed.used
                self._drop(passed)
            if not chunks or not chunks[0].holds(pos):
                self.clear()
                self._next = pos
            self._fill(pos, want)
            if not chunks:
                return []
            first = chunks[0]
            try:
                got = await first.future
            except BaseException:
                if chunks and chunks[0] is first:
                    self._release(chunks.popleft())
                    self.clear()
                raise
            if chunks and chunks[0] is first:
                break
            if self.closed:
                return []
            # another read moved the window meanwhile: a plain range read, not a fight over
            # the window (each taking it back would drop the other's, without end)
            got_range = self._next_range(pos, want)
            if got_range is None:
                return []
            return list(await self._read_range(*got_range))
        out: list[E] = []
        self._take(first, got, pos, want, out)
        while len(out) < want and len(chunks) > 1:
            nxt = chunks[1]
            fut = nxt.future
            if not fut.done() or fut.cancelled() or fut.exception() is not None:
                break
            self._release(chunks.popleft())
            self._take(nxt, fut.result(), pos, want, out)
        if out:
            last = out[-1].position
            self._fill(Position(last.ledger_id, last.entry_id + 1), want)
        return out

    def _take(
        self,
        chunk: _Chunk[E],
        got: list[E],
        pos: Position,
        want: int,
        out: list[E],
    ) -> None:
        chunk.used = True
        start = pos.entry_id - chunk.first if chunk.ledger_id == pos.ledger_id else 0
        start = max(start, 0)
        room = want - len(out)
        out.extend(got[start : start + room])

    def close(self) -> None:
        """The cursor or its ledger is gone: cancel what is in flight."""
        self.closed = True
        for chunk in self._chunks:
            if not chunk.future.done():
                chunk.future.cancel()
            self._drop(chunk)
        self._chunks.clear()
        self._next = None

    # -- observability -------------------------------------------------------------------------
    def statistics(self) -> ReadAheadStats:
        return ReadAheadStats(
            reads_issued=self.reads_issued,
            entries_read=self.entries_read,
            chunks_dropped=self.chunks_dropped,
            max_reads_in_flight=self.max_reads_in_flight,
            chunks=len(self._chunks),
            in_flight=self._in_flight(),
        )

    def check_invariants(self) -> None:
        prev: _Chunk[E] | None = None
        for c in self._chunks:
            assert c.first <= c.last, (c.first, c.last)
            if prev is not None:
                assert (c.ledger_id, c.first) > (prev.ledger_id, prev.last), (prev, c)
                if c.ledger_id == prev.ledger_id:
                    assert c.first == prev.last + 1, (prev.last, c.first)
            prev = c
        assert self._in_flight() <= self.max_reads


__all__ = [
    "EntryBytes",
    "NextRange",
    "ReadAhead",
    "ReadAheadBudget",
    "ReadAheadStats",
    "ReadEntry",
    "ReadRange",
]
