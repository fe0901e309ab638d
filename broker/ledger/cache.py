"""The broker entry cache: recent entries in memory so tailing readers skip the bookies.

Owns: a byte-bounded store of recent payloads by position, filled on add completion
(positions arrive in log order, a confirmed batch at a time) and evicted oldest first, or up
to a position (everything every reader has passed). Must not know: cursors' semantics,
bookies.

Layout: one *run* per ledger (the ledgers in insertion order, which is log order): a list of
consecutive entries' payloads starting at ``first_entry_id``, of which those before ``head``
are evicted. A confirmed batch is appended to its run with one ``list.extend`` and its bytes
counted with one ``sum(map(len, ...))``: nothing is done per entry in Python on the add path
but the eviction of older entries once the cache is full (a key tuple and an ordered-dict
insertion per entry cost about 1 us an add). A payload bigger than the whole cache is held
as ``None`` (a miss), so a run stays contiguous.
Invariants: ``size_bytes <= max_bytes`` after every call; ``size_bytes`` and ``len()`` equal
the bytes and number of the held (not evicted, not ``None``) payloads (``check_invariants``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.broker.ledger.position import Position

_COMPACT_MIN = 1024
"""A run's evicted head is cut off its list once it is this long and half the list."""


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    entries: int
    size_bytes: int
    max_bytes: int
    hits: int
    misses: int
    evictions: int


class _Run:
    """Consecutive entries of one ledger: ``payloads[i]`` is entry ``first_entry_id + i``;
    ``payloads[:head]`` are evicted (``None``)."""

    __slots__ = ("first_entry_id", "head", "nbytes", "payloads")

    def __init__(self, first_entry_id: int) -> None:
        self.first_entry_id = first_entry_id
        self.payloads: list[bytes | None] = []
        self.head = 0
        self.nbytes = 0

    def compact(self) -> None:
        head = self.head
        if head >= _COMPACT_MIN and head * 2 >= len(self.payloads):
            del self.payloads[:head]
            self.first_entry_id += head
            self.head = 0


class EntryCache:
    """Payloads by position, bounded in bytes; the API takes ``Position`` or
    (ledger id, entry ids)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._runs: dict[int, _Run] = {}
        self._count = 0
        self.size_bytes = 0
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return self._count

    def put(self, pos: Position, payload: bytes) -> None:
        self.put_entries(pos.ledger_id, pos.entry_id, (payload,))

    def put_entries(self, ledger_id: int, first_entry_id: int, payloads: Sequence[bytes]) -> None:
        """Entries ``first_entry_id``, ``first_entry_id + 1``, ... of one ledger, in order.
        Entries already held are kept; a put that would leave a hole in the ledger's run
        starts the run again (drops what the ledger had)."""
        if not payloads:
            return
        run = self._runs.get(ledger_id)
        if run is not None:
            end = run.first_entry_id + len(run.payloads)
            if first_entry_id < end:  # overlap: keep what is held, add the rest
                payloads = payloads[end - first_entry_id :]
                first_entry_id = end
                if not payloads:
                    return
            elif first_entry_id > end:
                self.evict_ledger(ledger_id)
                run = None
        if run is None:
            run = self._runs[ledger_id] = _Run(first_entry_id)
        nbytes = sum(map(len, payloads))
        max_bytes = self.max_bytes
        if nbytes > max_bytes:  # rare: some payload may be bigger than the whole cache
            payloads = [p if len(p) <= max_bytes else None for p in payloads]  # type: ignore[misc]
            nbytes = sum(len(p) for p in payloads if p is not None)
            self._count -= sum(1 for p in payloads if p is None)
        run.payloads.extend(payloads)
        run.nbytes += nbytes
        self._count += len(payloads)
        self.size_bytes += nbytes
        if self.size_bytes > max_bytes:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        """Evict the oldest entries until ``size_bytes <= max_bytes``."""
        runs = self._runs
        size = self.size_bytes
        max_bytes = self.max_bytes
        evicted = 0
        while size > max_bytes:
            ledger_id = next(iter(runs))
            run = runs[ledger_id]
            payloads = run.payloads
            i = run.head
            n = len(payloads)
            freed = 0
            while i < n and size - freed > max_bytes:
                p = payloads[i]
                if p is not None:
                    freed += len(p)
                    evicted += 1
                    payloads[i] = None
                i += 1
            size -= freed
            run.nbytes -= freed
            run.head = i
            if i == n:
                del runs[ledger_id]
            else:
                run.compact()
        self._count -= evicted
        self.evictions += evicted
        self.size_bytes = size

    def get(self, pos: Position) -> bytes | None:
        run = self._runs.get(pos.ledger_id)
        payload = None
        if run is not None:
            i = pos.entry_id - run.first_entry_id
            if run.head <= i < len(run.payloads):
                payload = run.payloads[i]
        if payload is None:
            self.misses += 1
        else:
            self.hits += 1
        return payload

    def get_range(self, ledger_id: int, first_entry_id: int, last_entry_id: int) -> list[bytes]:
        """The held payloads of entries ``first_entry_id``.. of one ledger, stopping at the
        first one not held or after ``last_entry_id`` (counts one miss if it stops early)."""
        run = self._runs.get(ledger_id)
        out: list[bytes] = []
        if run is not None:
            start = first_entry_id - run.first_entry_id
            if start >= run.head:
                for p in run.payloads[start : last_entry_id - run.first_entry_id + 1]:
                    if p is None:
                        break
                    out.append(p)
        self.hits += len(out)
        if len(out) < last_entry_id - first_entry_id + 1:
            self.misses += 1
        return out

    def evict_before(self, pos: Position) -> None:
        """Drop every entry strictly before ``pos``."""
        runs = self._runs
        for ledger_id in [lid for lid in runs if lid < pos.ledger_id]:
            self.evict_ledger(ledger_id, count_evictions=True)
        run = runs.get(pos.ledger_id)
        if run is None:
            return
        stop = min(pos.entry_id - run.first_entry_id, len(run.payloads))
        if stop <= run.head:
            return
        payloads = run.payloads
        freed = evicted = 0
        for i in range(run.head, stop):
            p = payloads[i]
            if p is not None:
                freed += len(p)
                evicted += 1
                payloads[i] = None
        run.head = stop
        run.nbytes -= freed
        self.size_bytes -= freed
        self._count -= evicted
        self.evictions += evicted
        if stop == len(payloads):
            del runs[pos.ledger_id]
        else:
            run.compact()

    def evict_ledger(self, ledger_id: int, *, count_evictions: bool = False) -> None:
        run = self._runs.pop(ledger_id, None)
        if run is None:
            return
        held = sum(1 for p in run.payloads[run.head :] if p is not None)
        self.size_bytes -= run.nbytes
        self._count -= held
        if count_evictions:
            self.evictions += held

    def clear(self) -> None:
        self._runs.clear()
        self._count = 0
        self.size_bytes = 0

    def statistics(self) -> CacheStatistics:
        return CacheStatistics(
            self._count,
            self.size_bytes,
            self.max_bytes,
            self.hits,
            self.misses,
            self.evictions,
        )

    def check_invariants(self) -> None:
        assert self.size_bytes <= self.max_bytes, (self.size_bytes, self.max_bytes)
        count = nbytes = 0
        for run in self._runs.values():
            assert all(p is None for p in run.payloads[: run.head])
            held = [p for p in run.payloads[run.head :] if p is not None]
            assert run.nbytes == sum(map(len, held)), run.first_entry_id
            count += len(held)
            nbytes += run.nbytes
        assert (count, nbytes) == (self._count, self.size_bytes), (count, nbytes)


__all__ = ["CacheStatistics", "EntryCache"]
