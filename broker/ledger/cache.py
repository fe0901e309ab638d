"""The broker entry cache: recent entries in memory so tailing readers skip the bookies.

Owns: ``EntryCacheManager``, ONE byte budget for the whole broker (Pulsar's
``managedLedgerCacheSizeMB``), and the ``EntryCache`` of each managed ledger drawing on it:
payloads by position, filled on add completion (positions arrive in log order, a confirmed
batch at a time). Must not know: cursors' semantics (a cache asks its owner, through the
``needed_from`` callback, from which position an active reader still needs entries),
bookies, topics.

Eviction, as Pulsar's ``EntryCacheManager`` / ``ManagedLedgerImpl.doCacheEviction``:
- a managed ledger evicts what every active reader has passed (``evict_before``) after reads;
- by age: entries older than ``eviction_time_threshold_ms`` go, checked by a timer every
  ``eviction_interval_ms`` at most (and only while something is cached);
- by budget: once an add takes the broker's total over ``max_bytes``, entries are evicted at
  once, down to ``max_bytes * eviction_watermark``: first what no active reader needs (entries
  behind a ledger's slowest active reader; every entry of a ledger without one), then the
  oldest entries of the whole broker, oldest first.
So the budget is never exceeded, not even between two timer ticks.

Layout: one *run* per ledger (the ledgers in insertion order, which is log order): a list of
consecutive entries' payloads starting at ``first_entry_id``, of which those before ``head``
are evicted. A confirmed batch is appended to its run with one ``list.extend`` and its bytes
counted with one ``sum(map(len, ...))``: nothing is done per entry in Python on the add path.
Ages are kept per *batch record* ``(ledger id, end entry id, ms)`` (batches of one ledger
confirmed in the same millisecond share one), and the manager keeps one broker-wide queue of
``(ms, cache)`` in insertion order, so the oldest entries of the broker are found in O(1).
A payload bigger than the whole budget is held as ``None`` (a miss), so a run stays
contiguous.
Invariants: the manager's ``size_bytes <= max_bytes`` after every call and equals the sum of
its caches' ``size_bytes``; a cache's ``size_bytes`` and ``len()`` equal the bytes and number
of its held (not evicted, not ``None``) payloads (``check_invariants``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from magnetar.broker.ledger.position import Position
from magnetar.clock import Clock, SystemClock, TimerHandle

_COMPACT_MIN = 1024
"""A run's evicted head is cut off its list once it is this long and half the list."""
_ORDER_COMPACT_MIN = 4096
"""The manager's age queue drops its stale records once it is this long and twice the size
it had after the last such pass (amortised O(1) per record)."""

NeededFrom = Callable[[], Position | None]
"""The first position an active reader of the cache's ledger still needs; None when the
ledger has no active reader (nothing it holds is needed)."""


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    entries: int
    size_bytes: int
    max_bytes: int
    hits: int
    misses: int
    evictions: int


@dataclass(frozen=True, slots=True)
class CacheManagerStatistics:
    caches: int
    entries: int
    size_bytes: int
    max_bytes: int
    watermark_bytes: int
    hits: int
    misses: int
    evictions: int
    evictions_by_age: int
    budget_evictions: int
    """How many times an add took the broker over its budget (each evicts to the watermark)."""


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


class EntryCacheManager:
    """One byte budget over the entry caches of every managed ledger of a broker."""

    def __init__(
        self,
        max_bytes: int,
        *,
        eviction_watermark: float = 0.9,
        eviction_time_threshold_ms: int = 1000,
        eviction_interval_ms: int = 10,
        clock: Clock | None = None,
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"entry cache size must be >= 0, got {max_bytes}")
        if not 0.0 < eviction_watermark <= 1.0:
            raise ValueError(f"eviction watermark must be in (0, 1], got {eviction_watermark}")
        self.max_bytes = max_bytes
        self.watermark_bytes = int(max_bytes * eviction_watermark)
        self.eviction_time_threshold_ms = eviction_time_threshold_ms
        self.eviction_interval_ms = max(1, eviction_interval_ms)
        self.clock: Clock = clock or SystemClock()
        self.size_bytes = 0
        self._caches: dict[int, EntryCache] = {}
        self._order: collections.deque[tuple[int, EntryCache]] = collections.deque()
        self._order_compacted_len = 0
        self._timer: TimerHandle | None = None
        self._closed = False
        self.evictions_by_age = 0
        self.budget_evictions = 0
        self._released_hits = self._released_misses = self._released_evictions = 0

    def __repr__(self) -> str:
        return (
            f"<EntryCacheManager {self.size_bytes}/{self.max_bytes} bytes "
            f"in {len(self._caches)} caches>"
        )

    def new_cache(self, name: str = "", needed_from: NeededFrom | None = None) -> EntryCache:
        cache = EntryCache(manager=self, name=name, needed_from=needed_from)
        self._caches[id(cache)] = cache
        return cache

    def _release(self, cache: EntryCache) -> None:
        if self._caches.pop(id(cache), None) is not None:
            self._released_hits += cache.hits
            self._released_misses += cache.misses
            self._released_evictions += cache.evictions

    # -- called by the caches ------------------------------------------------------------------
    def _record(self, ms: int, cache: EntryCache) -> None:
        order = self._order
        order.append((ms, cache))
        if len(order) >= _ORDER_COMPACT_MIN and len(order) >= 2 * self._order_compacted_len:
            self._compact_order()
        if self._timer is None and self.eviction_time_threshold_ms > 0 and not self._closed:
            self._schedule(self.eviction_time_threshold_ms)

    def _compact_order(self) -> None:
        """Drop records whose batch is no longer held (evicted by a read, trimmed, closed)."""
        kept: collections.deque[tuple[int, EntryCache]] = collections.deque()
        for ms, cache in self._order:
            oldest = cache.oldest_ms()
            if oldest is not None and ms >= oldest:
                kept.append((ms, cache))
        self._order = kept
        self._order_compacted_len = len(kept)

    # -- eviction ------------------------------------------------------------------------------
    def evict_to_watermark(self) -> None:
        """Down to the watermark: first what no active reader needs, then oldest first."""
        self.budget_evictions += 1
        target = self.watermark_bytes
        for cache in list(self._caches.values()):
            if self.size_bytes <= target:
                return
            if cache.size_bytes:
                cache.evict_unneeded()
        order = self._order
        while self.size_bytes > target and order:
            ms, cache = order[0]
            cache.evict_oldest(self.size_bytes - target, ms)
            oldest = cache.oldest_ms()
            if oldest is None or oldest > ms:
                order.popleft()

    def evict_expired(self) -> None:
        """Evict every entry older than the time threshold (Pulsar's periodic eviction)."""
        threshold = self.eviction_time_threshold_ms
        if threshold <= 0:
            return
        cutoff = int(self.clock.monotonic_ms()) - threshold
        order = self._order
        while order and order[0][0] <= cutoff:
            _, cache = order.popleft()
            self.evictions_by_age += cache.evict_older_than(cutoff)

    def _schedule(self, delay_ms: float) -> None:
        delay_ms = max(float(self.eviction_interval_ms), delay_ms)
        self._timer = self.clock.call_later(delay_ms / 1000.0, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._closed:
            return
        self.evict_expired()
        if self._order:
            due = self._order[0][0] + self.eviction_time_threshold_ms
            self._schedule(due - self.clock.monotonic_ms())

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- observability -------------------------------------------------------------------------
    def statistics(self) -> CacheManagerStatistics:
        caches = list(self._caches.values())
        return CacheManagerStatistics(
            caches=len(caches),
            entries=sum(len(c) for c in caches),
            size_bytes=self.size_bytes,
            max_bytes=self.max_bytes,
            watermark_bytes=self.watermark_bytes,
            hits=self._released_hits + sum(c.hits for c in caches),
            misses=self._released_misses + sum(c.misses for c in caches),
            evictions=self._released_evictions + sum(c.evictions for c in caches),
            evictions_by_age=self.evictions_by_age,
            budget_evictions=self.budget_evictions,
        )

    def check_invariants(self) -> None:
        assert 0 <= self.size_bytes <= self.max_bytes, (self.size_bytes, self.max_bytes)
        total = 0
        for cache in self._caches.values():
            cache.check_own_invariants()
            total += cache.size_bytes
        assert total == self.size_bytes, (total, self.size_bytes)


class EntryCache:
    """Payloads by position of one managed ledger, within its manager's budget; the API
    takes ``Position`` or (ledger id, entry ids). ``EntryCache(max_bytes)`` makes a cache
    with a budget of its own (no age eviction, evicted to exactly ``max_bytes``)."""

    def __init__(
        self,
        max_bytes: int | None = None,
        *,
        manager: EntryCacheManager | None = None,
        name: str = "",
        needed_from: NeededFrom | None = None,
    ) -> None:
        if manager is None:
            if max_bytes is None:
                raise ValueError("EntryCache needs max_bytes or a manager")
            manager = EntryCacheManager(
                max_bytes, eviction_watermark=1.0, eviction_time_threshold_ms=0
            )
            manager._caches[id(self)] = self
        self._mgr = manager
        self.name = name
        self.needed_from = needed_from
        self._runs: dict[int, _Run] = {}
        self._batches: collections.deque[tuple[int, int, int]] = collections.deque()
        """(ledger id, end entry id exclusive, monotonic ms) of held batches, oldest first."""
        self._count = 0
        self.size_bytes = 0
        self.hits = self.misses = self.evictions = 0
        self.closed = False

    def __repr__(self) -> str:
        return f"<EntryCache {self.name} {self._count} entries {self.size_bytes} bytes>"

    def __len__(self) -> int:
        return self._count

    @property
    def max_bytes(self) -> int:
        return self._mgr.max_bytes

    def _add_bytes(self, delta: int) -> None:
        self.size_bytes += delta
        self._mgr.size_bytes += delta

    def put(self, pos: Position, payload: bytes) -> None:
        self.put_entries(pos.ledger_id, pos.entry_id, (payload,))

    def put_entries(self, ledger_id: int, first_entry_id: int, payloads: Sequence[bytes]) -> None:
        """Entries ``first_entry_id``, ``first_entry_id + 1``, ... of one ledger, in order.
        Entries already held are kept; a put that would leave a hole in the ledger's run
        starts the run again (drops what the ledger had)."""
        mgr = self._mgr
        max_bytes = mgr.max_bytes
        if not payloads or max_bytes == 0 or self.closed:
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
        if nbytes > max_bytes:  # rare: some payload may be bigger than the whole budget
            payloads = [p if len(p) <= max_bytes else None for p in payloads]  # type: ignore[misc]
            nbytes = sum(len(p) for p in payloads if p is not None)
            self._count -= sum(1 for p in payloads if p is None)
        run.payloads.extend(payloads)
        run.nbytes += nbytes
        self._count += len(payloads)
        end = first_entry_id + len(payloads)
        ms = int(mgr.clock.monotonic_ms())
        batches = self._batches
        if batches:
            last_ledger, last_end, last_ms = batches[-1]
            if last_ms == ms and last_ledger == ledger_id and last_end == first_entry_id:
                batches[-1] = (ledger_id, end, ms)
                ms = -1
        if ms >= 0:
            batches.append((ledger_id, end, ms))
            mgr._record(ms, self)
        self.size_bytes += nbytes
        mgr.size_bytes += nbytes
        if mgr.size_bytes > max_bytes:
            mgr.evict_to_watermark()

    def holds(self, ledger_id: int, entry_id: int) -> bool:
        """Whether the entry is held (not counted as a hit or a miss)."""
        run = self._runs.get(ledger_id)
        if run is None:
            return False
        i = entry_id - run.first_entry_id
        return run.head <= i < len(run.payloads) and run.payloads[i] is not None

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

    # -- eviction ------------------------------------------------------------------------------
    def _evict_run_until(self, ledger_id: int, stop: int, need_bytes: int) -> tuple[int, bool]:
        """Evict entries of one run from its head up to entry ``stop`` (exclusive), oldest
        first, until ``need_bytes`` are freed; returns (bytes freed, whether it reached
        ``stop`` or the run's end)."""
        run = self._runs[ledger_id]
        payloads = run.payloads
        i = run.head
        n = min(len(payloads), max(i, stop - run.first_entry_id))
        freed = evicted = 0
        while i < n and freed < need_bytes:
            p = payloads[i]
            if p is not None:
                freed += len(p)
                evicted += 1
                payloads[i] = None
            i += 1
        run.head = i
        run.nbytes -= freed
        self._count -= evicted
        self.evictions += evicted
        self._add_bytes(-freed)
        if i == len(payloads):
            del self._runs[ledger_id]
        else:
            run.compact()
        return freed, i >= n

    def evict_oldest(self, need_bytes: int, up_to_ms: int) -> int:
        """Evict this cache's oldest entries, of batches added at ``up_to_ms`` or before,
        until ``need_bytes`` are freed; returns the bytes freed."""
        freed = 0
        batches = self._batches
        while freed < need_bytes and self.oldest_ms() is not None and batches[0][2] <= up_to_ms:
            ledger_id, end, _ = batches[0]
            for lid in list(self._runs):
                if lid > ledger_id or freed >= need_bytes:
                    break
                stop = end if lid == ledger_id else 1 << 62
                got, done = self._evict_run_until(lid, stop, need_bytes - freed)
                freed += got
                if not done:
                    break
        self._prune_batches()
        return freed

    def evict_older_than(self, cutoff_ms: int) -> int:
        """Evict the batches added at ``cutoff_ms`` or before; returns how many entries."""
        before = self.evictions
        batches = self._batches
        while batches and batches[0][2] <= cutoff_ms:
            ledger_id, end, _ = batches.popleft()
            self.evict_before(Position(ledger_id, end))
        return self.evictions - before

    def evict_unneeded(self) -> None:
        """Evict what no active reader needs, as the owner's ``needed_from`` tells."""
        if self.needed_from is None:
            return
        needed = self.needed_from()
        if needed is None:
            for ledger_id in list(self._runs):
                self.evict_ledger(ledger_id, count_evictions=True)
        else:
            self.evict_before(needed)

    def evict_before(self, pos: Position) -> None:
        """Drop every entry strictly before ``pos``."""
        runs = self._runs
        for ledger_id in [lid for lid in runs if lid < pos.ledger_id]:
            self.evict_ledger(ledger_id, count_evictions=True)
        if pos.ledger_id in runs:
            self._evict_run_until(pos.ledger_id, pos.entry_id, 1 << 62)
        self._prune_batches()

    def evict_ledger(self, ledger_id: int, *, count_evictions: bool = False) -> None:
        run = self._runs.pop(ledger_id, None)
        if run is None:
            return
        held = sum(1 for p in run.payloads[run.head :] if p is not None)
        self._add_bytes(-run.nbytes)
        self._count -= held
        if count_evictions:
            self.evictions += held
        self._prune_batches()

    def oldest_ms(self) -> int | None:
        """When the oldest held batch was added (None when nothing is held)."""
        self._prune_batches()
        return self._batches[0][2] if self._batches else None

    def _prune_batches(self) -> None:
        batches = self._batches
        runs = self._runs
        if not runs:
            batches.clear()
            return
        while batches:
            ledger_id, end, _ = batches[0]
            run = runs.get(ledger_id)
            if run is not None and end > run.first_entry_id + run.head:
                return
            if run is None and ledger_id > next(iter(runs)):
                return  # not reachable with puts in log order; keep rather than lose an age
            batches.popleft()

    def clear(self) -> None:
        self._add_bytes(-self.size_bytes)
        self._runs.clear()
        self._batches.clear()
        self._count = 0

    def close(self) -> None:
        """The ledger is closed: drop everything, hold nothing more, leave the manager."""
        self.closed = True
        self.clear()
        self._mgr._release(self)

    # -- observability -------------------------------------------------------------------------
    def statistics(self) -> CacheStatistics:
        return CacheStatistics(
            self._count,
            self.size_bytes,
            self.max_bytes,
            self.hits,
            self.misses,
            self.evictions,
        )

    def check_own_invariants(self) -> None:
        count = nbytes = 0
        for run in self._runs.values():
            assert all(p is None for p in run.payloads[: run.head])
            held = [p for p in run.payloads[run.head :] if p is not None]
            assert run.nbytes == sum(map(len, held)), run.first_entry_id
            count += len(held)
            nbytes += run.nbytes
        assert (count, nbytes) == (self._count, self.size_bytes), (count, nbytes)
        ages = [ms for _, _, ms in self._batches]
        assert ages == sorted(ages), ages
        if self._runs:
            assert self._batches, "held entries without an age"

    def check_invariants(self) -> None:
        self.check_own_invariants()
        self._mgr.check_invariants()


__all__ = [
    "CacheManagerStatistics",
    "CacheStatistics",
    "EntryCache",
    "EntryCacheManager",
    "NeededFrom",
]
