"""The delayed-delivery index of one subscription: persisted, with bounded memory.

Owns: ``DelayedDeliveryIndex`` — which held entries (``deliver_at_time`` in the future)
are due when, for the Shared and Key_Shared dispatchers. A disk-backed two-level timing
wheel:

- **near wheel** (``NearWheel``): every known record due before ``near_end_ms`` (about
  ``now + horizon_ms``), 24 bytes a record; ``pop_due`` takes from it only.
- **unsealed tail**: every record added since the last seal (compact arrays). Sealed when it
  reaches ``seal_max_entries`` or ``seal_interval_ms`` of age: sorted by (deliver_at, ledger,
  entry), cut into chunks of ``chunk_records`` (``codec.encode_chunk``), appended to the store,
  then a snapshot naming the new run is appended.
- **sealed runs**: each run is sorted by due time and its chunks are contiguous in time, so a
  run is read front to back: a chunk is read ``prefetch_ms`` before it enters the horizon and
  its records enter the near wheel when ``near_end_ms`` passes them. Far-future records live
  only on storage (a run costs its chunk descriptors: a few dozen bytes per 4,096 records).

Invariants (``check_invariants``): the near wheel holds exactly the known pending records
due before ``near_end_ms``; ``near_end_ms`` never passes a chunk that is not read yet, so
``pop_due`` returns records in due order and never one whose time has not come.

Persistence and recovery (brokers are stateless). The snapshot records the runs and
``scanned_through``: the highest position the dispatcher had handed to ``add`` when the
last sealed tail was cut. Adds arrive in position order (the dispatcher calls ``add`` for
entries it reads from the cursor), so every entry at or before ``scanned_through`` whose
due time was in the future when added is in a sealed run. A crash loses only the unsealed
tail. ``recover`` reads the last snapshot and sets ``recovered_at_ms`` = max(now, the
snapshot's time); records due at or before it are dropped from the runs, because after a
restart the dispatcher re-reads the topic from the mark-delete position and then ``add``
answers, for a position already seen (at or before ``scanned_through``, or added earlier
in this life):
- due in the future: held (a recovered run, or the tail, owns it and delivers it once);
- due now: "deliver now" (it became due while no broker served the subscription, or it was
  delivered and not acknowledged, or it is a replay of a delivered entry: never swallowed);
  if the index may still hold it (due at or after the last popped due time and after
  ``recovered_at_ms``) the index remembers not to hand it out again.
A position after it (the lost tail) is added again like any new entry.
So a restart neither loses a pending entry, nor delivers one early, nor twice.
Dead records (runs whose every record is due and moved to the near wheel, old snapshots,
orphans of a seal interrupted by a crash) are released to the store, which trims them.

Must not know: consumers, permits, the wire protocol, message formats (the caller extracts
``deliver_at_time``), the managed ledger (only the ``SegmentStore`` protocol).
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import heapq
import itertools
import logging
from array import array
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from magnetar.broker.delayed.codec import (
    SNAPSHOT,
    ChunkRef,
    RunRef,
    Snapshot,
    decode_chunk,
    encode_chunk,
)
from magnetar.broker.delayed.store import SegmentStore
from magnetar.broker.delayed.wheel import NearWheel
from magnetar.broker.ledger.errors import LedgerError, ManagedLedgerClosed, ManagedLedgerFenced
from magnetar.broker.ledger.position import Position
from magnetar.clock import Clock, TimerHandle
from magnetar.zk.errors import MetadataError

log = logging.getLogger(__name__)

INF = 1 << 62
_SORT_SLICE = 8_192
_SUPPRESS_MAX = 100_000


class DelayedIndexError(Exception):
    retriable = False


def _retriable(exc: Exception) -> bool:
    """May storing be tried again after ``exc``? Our error trees say (``retriable``);
    anything else (an I/O hiccup of a store) is tried again."""
    if isinstance(exc, (LedgerError, MetadataError, DelayedIndexError)):
        return exc.retriable
    return True


class DelayedIndexClosed(DelayedIndexError):
    pass


class IndexState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    FAILED = "failed"  # storage refused for good (fenced): memory only until closed
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class DelayedDeliveryConfig:
    horizon_ms: int = 120_000
    """The near wheel holds records due within this much of now."""
    prefetch_ms: int = 60_000
    """A chunk is read this long before its first record enters the horizon."""
    advance_interval_ms: int = 1_000
    """Least time between two housekeeping ticks (horizon moves, seal by age, drops)."""
    near_max_entries: int = 250_000
    """Soft bound of the near wheel: the horizon stops moving forward while it is reached
    (records already due always enter)."""
    seal_max_entries: int = 50_000
    seal_interval_ms: int = 60_000
    chunk_records: int = 4_096
    slot_ms: int = 100
    max_unsealed_entries: int = 200_000
    """Above this many unsealed records (storage slow or down) ``should_pause`` is True: the
    dispatcher stops reading new entries until seals catch up."""


@dataclass(frozen=True, slots=True)
class DelayedIndexStatistics:
    state: str
    pending: int
    near: int
    unsealed: int
    sealing: int
    runs: int
    chunks: int
    near_end_ms: int
    next_due_ms: int | None
    added: int
    delivered: int
    seals: int
    snapshots: int
    chunks_loaded: int
    memory_bytes: int
    scanned_through: str
    recovered_at_ms: int


def _take(a: array[int], lo: int, hi: int) -> array[int]:
    return a[lo:hi]


class _Tail:
    """Records added since the last seal (arrival order)."""

    __slots__ = ("at", "created_ms", "eid", "far_count", "far_min", "lid")

    def __init__(self, now_ms: int) -> None:
        self.at: array[int] = array("q")
        self.lid: array[int] = array("q")
        self.eid: array[int] = array("q")
        self.far_min = INF  # earliest record not in the near wheel
        self.far_count = 0
        self.created_ms = now_ms

    def __len__(self) -> int:
        return len(self.at)

    def append(self, at: int, lid: int, eid: int, in_near: bool) -> None:
        self.at.append(at)
        self.lid.append(lid)
        self.eid.append(eid)
        if not in_near:
            self.far_count += 1
            self.far_min = min(self.far_min, at)

    def move(self, lo: int, hi: int, near: NearWheel) -> None:
        """Records due in [lo, hi) enter the near wheel."""
        if self.far_min >= hi:
            return
        at, lid, eid = self.at, self.lid, self.eid
        new_min = INF
        for i in range(len(at)):
            a = at[i]
            if a < lo:
                continue
            if a < hi:
                near.add(a, lid[i], eid[i])
                self.far_count -= 1
            elif a < new_min:
                new_min = a
        self.far_min = new_min

    def nbytes(self) -> int:
        return 3 * (self.at.buffer_info()[1] * 8) + 200


class _Run:
    """A sealed run in memory: chunk descriptors + the decoded records not yet moved."""

    __slots__ = (
        "at",
        "eid",
        "lid",
        "loading",
        "next_chunk",
        "offset",
        "ref",
        "skip_before",
        "skipped",
    )

    def __init__(
        self, ref: RunRef, next_chunk: int, skip_before: int = 0, skipped: int = 0
    ) -> None:
        self.ref = ref
        self.next_chunk = next_chunk  # chunks[next_chunk:] are not read yet
        # records of chunks[next_chunk] due before skip_before are in the near wheel already
        self.skip_before = skip_before
        self.skipped = skipped
        self.at: array[int] = array("q")
        self.lid: array[int] = array("q")
        self.eid: array[int] = array("q")
        self.offset = 0
        self.loading = False

    def __repr__(self) -> str:
        return (
            f"<run {self.ref.run_id} chunks={len(self.ref.chunks)} next={self.next_chunk} "
            f"head={len(self.at) - self.offset}>"
        )

    def attach(self, at: array[int], lid: array[int], eid: array[int], skip_before: int) -> None:
        k = bisect.bisect_left(at, skip_before) if skip_before > 0 else 0
        o = self.offset
        self.at = self.at[o:] + at[k:]
        self.lid = self.lid[o:] + lid[k:]
        self.eid = self.eid[o:] + eid[k:]
        self.offset = 0

    def cap_ms(self) -> int:
        """Due time of the first record not read yet (the horizon may not pass it)."""
        chunks = self.ref.chunks
        if self.next_chunk >= len(chunks):
            return INF
        return max(chunks[self.next_chunk].first_at_ms, self.skip_before)

    def head_at_ms(self) -> int:
        return self.at[self.offset] if self.offset < len(self.at) else INF

    def move(self, hi: int, near: NearWheel) -> None:
        at, o, n = self.at, self.offset, len(self.at)
        while o < n and at[o] < hi:
            near.add(at[o], self.lid[o], self.eid[o])
            o += 1
        self.offset = o
        if o == n and n:
            self.at, self.lid, self.eid, self.offset = array("q"), array("q"), array("q"), 0

    @property
    def pending(self) -> int:
        later = sum(c.count for c in self.ref.chunks[self.next_chunk :])
        return len(self.at) - self.offset + later - self.skipped

    @property
    def exhausted(self) -> bool:
        return self.offset >= len(self.at) and self.next_chunk >= len(self.ref.chunks)

    def nbytes(self) -> int:
        return 24 * len(self.at) + 64 * len(self.ref.chunks) + 300


class DelayedDeliveryIndex:
    """See the module docstring. All time comes from ``clock`` (wall milliseconds)."""

    def __init__(
        self,
        store: SegmentStore,
        clock: Clock,
        config: DelayedDeliveryConfig | None = None,
        *,
        on_due: Callable[[], None] | None = None,
        name: str = "delayed-index",
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = cfg = config or DelayedDeliveryConfig()
        if cfg.chunk_records <= 0 or cfg.seal_max_entries <= 0 or cfg.horizon_ms <= 0:
            raise ValueError(f"bad delayed-delivery config {cfg}")
        self.on_due = on_due
        self.name = name
        self.state = IndexState.NEW
        self._near = NearWheel(cfg.slot_ms)
        self._near_end_ms = 0
        self._tail = _Tail(0)
        self._sealing: list[tuple[_Tail, Position | None]] = []
        self._runs: list[_Run] = []
        self._scanned_through: Position | None = None
        self._high_seen: Position | None = None
        self._recovered_at_ms = 0
        self._next_run_id = 0
        self._snapshot_pos: Position | None = None
        self._to_release: list[Position] = []
        self._dirty = False
        self._epoch = 0
        self._io_lock = asyncio.Lock()
        self._maint_task: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Future[None]] = set()
        self._tick: TimerHandle | None = None
        self._tick_at = INF
        self._due: TimerHandle | None = None
        self._due_at = INF
        self._suppressed: dict[Position, int] = {}  # handed out already: skip when popped
        self._popped_through_ms = 0
        self.added = 0
        self.delivered = 0
        self.seals = 0
        self.snapshots = 0
        self.chunks_loaded = 0
        self.last_error: BaseException | None = None

    def __repr__(self) -> str:
        return (
            f"<DelayedDeliveryIndex {self.name} {self.state.value} near={len(self._near)} "
            f"tail={len(self._tail)} runs={len(self._runs)}>"
        )

    # -- recovery --------------------------------------------------------------------------------
    async def recover(self) -> None:
        """Open the store and rebuild from the last snapshot (see the module docstring)."""
        if self.state is not IndexState.NEW:
            raise DelayedIndexError(f"{self.name}: recover() on a {self.state.value} index")
        await self.store.open()
        positions = self.store.stored_positions()
        snap: Snapshot | None = None
        snap_pos: Position | None = None
        for pos in reversed(positions):
            data = await self.store.read(pos)
            if data[:1] == SNAPSHOT:
                snap, snap_pos = Snapshot.from_bytes(data), pos
                break
        now = self.clock.now_ms()
        recovered_at = max(now, snap.written_at_ms) if snap else now
        live: set[Position] = set()
        runs: list[_Run] = []
        if snap is not None:
            for ref in snap.runs:
                if not ref.chunks or ref.last_at_ms <= recovered_at:
                    continue  # everything due: the topic re-read delivers what is unacked
                k = next(i for i, c in enumerate(ref.chunks) if c.last_at_ms > recovered_at)
                kept = RunRef(ref.run_id, ref.chunks[k:])
                if kept.chunks[0].first_at_ms > recovered_at:
                    run = _Run(kept, 0)  # read when due, like any sealed chunk
                else:  # the chunk straddles recovered_at: decode it to skip its due part
                    run = _Run(kept, 1)
                    at, lid, eid = decode_chunk(await self.store.read(kept.chunks[0].position))
                    run.attach(at, lid, eid, recovered_at + 1)
                    self.chunks_loaded += 1
                runs.append(run)
                live.update(c.position for c in kept.chunks)
            self._scanned_through = self._high_seen = snap.scanned_through
            self._next_run_id = snap.next_run_id
        self._runs = runs
        self._recovered_at_ms = self._popped_through_ms = recovered_at
        self._near_end_ms = recovered_at + 1
        self._tail = _Tail(now)
        self._to_release = [p for p in positions if p not in live and p != snap_pos]
        self._snapshot_pos = snap_pos
        self._dirty = bool(self._to_release) or snap is None
        self.state = IndexState.OPEN
        self._advance(now)
        if self._dirty:
            await self._run_maintenance()
        self._after_change()
        log.debug(
            "%s: recovered %d runs (%d pending) at %d, scanned through %s",
            self.name,
            len(runs),
            self.size(),
            recovered_at,
            self._scanned_through,
        )

    # -- the dispatcher's API ---------------------------------------------------------------------
    def add(self, position: Position, deliver_at_ms: int) -> bool:
        """An entry read from the cursor: True if the index holds it (do not dispatch now)."""
        if self.state is IndexState.NEW or self.state is IndexState.CLOSED:
            raise DelayedIndexClosed(f"{self.name} is {self.state.value}")
        if deliver_at_ms <= 0:
            return False
        now = self.clock.now_ms()
        hs = self._high_seen
        if hs is not None and position <= hs:
            # seen before (a re-read after a restart, a replay of a delivered entry): a future
            # entry was added then (or is in a recovered run); a due one goes out now, and if
            # the index may still hold it, the index will not hand it out a second time
            if deliver_at_ms > now:
                return True
            if deliver_at_ms >= self._popped_through_ms and deliver_at_ms > self._recovered_at_ms:
                self._suppress(position, deliver_at_ms)
            return False
        self._high_seen = position
        if deliver_at_ms <= now:
            return False
        in_near = deliver_at_ms < self._near_end_ms
        if in_near:
            self._near.add(deliver_at_ms, position.ledger_id, position.entry_id)
        tail = self._tail
        if not len(tail):
            tail.created_ms = now
        tail.append(deliver_at_ms, position.ledger_id, position.entry_id, in_near)
        self.added += 1
        if len(tail) >= self.config.seal_max_entries:
            self._seal_tail(now)
        if in_near:
            self._rearm_due(now)
        elif deliver_at_ms - self.config.horizon_ms < self._tick_at or len(tail) == 1:
            self._schedule_tick(now)
        return True

    def next_due_ms(self) -> int | None:
        """The earliest due time of a held entry (None when nothing is held)."""
        got = self._near.peek_at_ms()
        if got is not None:
            return got
        far = self._far_min()
        return None if far >= INF else far

    def pop_due(self, now_ms: int, max_n: int) -> list[Position]:
        """Up to ``max_n`` held entries due at ``now_ms``, in due order; they leave the index."""
        if self.state is IndexState.NEW or self.state is IndexState.CLOSED:
            return []
        self._advance(now_ms)
        recs = self._near.pop_due(now_ms, max_n)
        out = [Position(lid, eid) for _, lid, eid in recs]
        if recs:
            # pops leave in due order: nothing due before this is held any more
            self._popped_through_ms = max(self._popped_through_ms, recs[-1][0])
        if self._suppressed:
            pop = self._suppressed.pop
            out = [p for p in out if pop(p, None) is None]
        self.delivered += len(recs)
        self._rearm_due(self.clock.now_ms())
        return out

    def on_acked(self, positions: Iterable[Position]) -> None:
        """Entries acknowledged before they were due (by id): do not hand them out. Optional:
        the dispatcher's replay read skips acknowledged entries anyway. Bounded filter."""
        for p in positions:
            self._suppress(p, INF)

    def _suppress(self, position: Position, deliver_at_ms: int) -> None:
        sup = self._suppressed
        if len(sup) >= _SUPPRESS_MAX:
            w = self._popped_through_ms
            for p in [p for p, at in sup.items() if at < w]:
                del sup[p]  # due before what was popped: not held any more
            if len(sup) >= _SUPPRESS_MAX:
                sup.clear()  # degrade to a possible duplicate (at least once), never a loss
        sup[position] = deliver_at_ms

    def size(self) -> int:
        """Entries held (not yet handed out by ``pop_due``)."""
        n = len(self._near) + self._tail.far_count + sum(t.far_count for t, _ in self._sealing)
        return n + sum(r.pending for r in self._runs)

    @property
    def should_pause(self) -> bool:
        """True while too many records wait to be sealed: stop reading new entries."""
        unsealed = len(self._tail) + sum(len(t) for t, _ in self._sealing)
        return unsealed >= self.config.max_unsealed_entries

    def memory_bytes(self) -> int:
        n = self._near.nbytes() + self._tail.nbytes() + sum(t.nbytes() for t, _ in self._sealing)
        return n + sum(r.nbytes() for r in self._runs) + 100 * len(self._suppressed)

    def statistics(self) -> DelayedIndexStatistics:
        return DelayedIndexStatistics(
            state=self.state.value,
            pending=self.size(),
            near=len(self._near),
            unsealed=len(self._tail),
            sealing=sum(len(t) for t, _ in self._sealing),
            runs=len(self._runs),
            chunks=sum(len(r.ref.chunks) for r in self._runs),
            near_end_ms=self._near_end_ms,
            next_due_ms=self.next_due_ms(),
            added=self.added,
            delivered=self.delivered,
            seals=self.seals,
            snapshots=self.snapshots,
            chunks_loaded=self.chunks_loaded,
            memory_bytes=self.memory_bytes(),
            scanned_through=str(self._scanned_through),
            recovered_at_ms=self._recovered_at_ms,
        )

    async def flush(self) -> None:
        """Seal the unsealed tail now and wait until it and a snapshot are stored."""
        if self.state is not IndexState.OPEN:
            return
        self._seal_tail(self.clock.now_ms())
        await self._run_maintenance()

    async def clear(self) -> None:
        """Forget every held entry (cursor reset / seek: the dispatcher re-reads)."""
        if self.state is not IndexState.OPEN:
            return
        now = self.clock.now_ms()
        self._epoch += 1
        for r in self._runs:
            self._to_release.extend(c.position for c in r.ref.chunks)
        self._runs = []
        self._sealing = []
        self._tail = _Tail(now)
        self._near.clear()
        self._suppressed.clear()
        self._popped_through_ms = now
        self._scanned_through = self._high_seen = None
        self._recovered_at_ms = now
        self._near_end_ms = now + 1
        self._dirty = True
        self._cancel_timers()
        await self._run_maintenance()

    async def close(self) -> None:
        """Seal what is unsealed, store a snapshot, close the store."""
        if self.state is IndexState.CLOSED:
            return
        if self.state is IndexState.OPEN:
            try:
                await self.flush()
            except Exception:
                log.warning("%s: final flush failed", self.name, exc_info=True)
        self._stop()
        await self.store.close()

    async def delete(self) -> None:
        """Drop the index and its storage (unsubscribe, topic deletion)."""
        self._stop()
        await self.store.delete()

    def abandon(self) -> None:
        """Stop at once without any I/O, as a crash would (tests)."""
        self._stop()

    async def wait_idle(self) -> None:
        """Until no load, seal or snapshot is in flight (tests, benchmarks)."""
        while True:
            pending = [t for t in self._tasks if not t.done()]
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)

    def check_invariants(self) -> None:
        end = self._near_end_ms
        near = self._near
        for arr in near._slots.values():
            assert all(arr[i] < end for i in range(0, len(arr), 3)), end
        assert all(r[0] < end for r in near._cur[near._ci :]), end
        for t in [self._tail, *(t for t, _ in self._sealing)]:
            far = [a for a in t.at if a >= end]
            assert len(far) == t.far_count, (len(far), t.far_count)
            assert t.far_min <= min(far, default=INF), (t.far_min, far[:3])
        for r in self._runs:
            assert r.cap_ms() >= end, (r, end)
            head = list(r.at[r.offset :])
            assert all(a >= end for a in head), (r, end)
            assert head == sorted(head), r

    # -- the horizon ------------------------------------------------------------------------------
    def _far_min(self) -> int:
        far = self._tail.far_min
        for t, _ in self._sealing:
            far = min(far, t.far_min)
        for r in self._runs:
            far = min(far, r.head_at_ms(), r.cap_ms())
        return far

    def _advance(self, now: int) -> None:
        """Move the horizon towards ``now + horizon_ms`` (synchronous; starts chunk reads)."""
        if self.state is not IndexState.OPEN and self.state is not IndexState.FAILED:
            return
        cfg = self.config
        cap = min((r.cap_ms() for r in self._runs), default=INF)
        new_end = min(now + cfg.horizon_ms, cap)
        room = cfg.near_max_entries - len(self._near)
        if new_end > self._near_end_ms and self._head_count_below(new_end) > room:
            # the near wheel would outgrow its bound: move only as far as it has room for
            # (records already due always move; the unsealed tail may add its few on top)
            lo, hi = max(self._near_end_ms, min(now + 1, new_end)), new_end
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._head_count_below(mid) <= room:
                    lo = mid
                else:
                    hi = mid - 1
            new_end = lo
        lo = self._near_end_ms
        if new_end > lo:
            near = self._near
            self._tail.move(lo, new_end, near)
            for t, _ in self._sealing:
                t.move(lo, new_end, near)
            for r in self._runs:
                r.move(new_end, near)
            self._near_end_ms = new_end
        limit = now + cfg.horizon_ms + cfg.prefetch_ms
        has_room = len(self._near) < cfg.near_max_entries
        for r in self._runs:
            if r.loading or r.next_chunk >= len(r.ref.chunks):
                continue
            if len(r.at) - r.offset >= cfg.chunk_records:
                continue  # at most about two chunks of a run are decoded at a time
            first = r.ref.chunks[r.next_chunk].first_at_ms
            if first < limit and (has_room or first <= now):
                r.loading = True
                self._spawn(self._load(r, self._epoch))

    def _head_count_below(self, end: int) -> int:
        """Decoded run records due before ``end`` (not yet in the near wheel)."""
        return sum(bisect.bisect_left(r.at, end, r.offset) - r.offset for r in self._runs)

    async def _load(self, run: _Run, epoch: int) -> None:
        ref = run.ref.chunks[run.next_chunk]
        try:
            data = await self.store.read(ref.position)
            at, lid, eid = decode_chunk(data)
        except Exception as exc:
            run.loading = False
            self.last_error = exc
            log.warning("%s: reading chunk %s failed: %r", self.name, ref.position, exc)
            self._schedule_tick(self.clock.now_ms(), retry=True)
            return
        run.loading = False
        if epoch != self._epoch or run not in self._runs:
            return
        run.attach(at, lid, eid, run.skip_before)
        run.next_chunk += 1
        run.skip_before = run.skipped = 0
        self.chunks_loaded += 1
        self._advance(self.clock.now_ms())
        self._after_change()

    # -- timers -----------------------------------------------------------------------------------
    def _after_change(self) -> None:
        now = self.clock.now_ms()
        self._rearm_due(now)
        self._schedule_tick(now)

    def _rearm_due(self, now: int) -> None:
        if self.on_due is None:
            return
        nd = self._near.peek_at_ms()
        if nd is None:
            nd = self._far_min()  # a chunk read is late: wake when it should be due
            if nd >= INF:
                return
        if self._due is not None and self._due_at <= nd:
            return
        if self._due is not None:
            self._due.cancel()
        self._due_at = nd
        self._due = self.clock.call_later(max(0.0, (nd - now) / 1000.0), self._fire_due)

    def _fire_due(self) -> None:
        self._due, self._due_at = None, INF
        if self.state is not IndexState.OPEN and self.state is not IndexState.FAILED:
            return
        if self.on_due is not None:
            self.on_due()

    def _schedule_tick(self, now: int, *, retry: bool = False) -> None:
        if self.state is not IndexState.OPEN and self.state is not IndexState.FAILED:
            return
        cfg = self.config
        cands: list[int] = []
        if len(self._tail):
            cands.append(self._tail.created_ms + cfg.seal_interval_ms)
        far = min([self._tail.far_min, *(t.far_min for t, _ in self._sealing)])
        cap = INF
        for r in self._runs:
            far = min(far, r.head_at_ms())
            cap = min(cap, r.cap_ms())
            if r.exhausted:
                cands.append(r.ref.last_at_ms)  # dropped from the snapshot then
            elif (
                not r.loading
                and r.next_chunk < len(r.ref.chunks)
                and len(r.at) - r.offset < cfg.chunk_records
            ):
                cands.append(r.cap_ms() - cfg.horizon_ms - cfg.prefetch_ms)
        # a tick cannot move the horizon past a chunk being read (its completion does) nor
        # fill a full near wheel (pops do): only wake for moves it can make
        if far < cap and len(self._near) < cfg.near_max_entries:
            cands.append(far - cfg.horizon_ms)
        idle = self._maint_task is None or self._maint_task.done()
        if retry or ((self._sealing or self._dirty) and idle):
            cands.append(now)
        if not cands:
            return
        at = max(now + cfg.advance_interval_ms, min(cands))
        if self._tick is not None:
            if self._tick_at <= at:
                return
            self._tick.cancel()
        self._tick_at = at
        self._tick = self.clock.call_later((at - now) / 1000.0, self._on_tick)

    def _on_tick(self) -> None:
        self._tick, self._tick_at = None, INF
        if self.state is not IndexState.OPEN and self.state is not IndexState.FAILED:
            return
        now = self.clock.now_ms()
        self._advance(now)
        if len(self._tail) and now - self._tail.created_ms >= self.config.seal_interval_ms:
            self._seal_tail(now)
        dead = [r for r in self._runs if r.exhausted and r.ref.last_at_ms <= now]
        if dead:
            # every record is due: a crash from here on re-reads them from the topic
            self._runs = [r for r in self._runs if not (r.exhausted and r.ref.last_at_ms <= now)]
            for r in dead:
                self._to_release.extend(c.position for c in r.ref.chunks)
            self._dirty = True
        if (self._sealing or self._dirty) and self.state is IndexState.OPEN:
            self._kick()
        self._after_change()

    def _cancel_timers(self) -> None:
        for h in (self._tick, self._due):
            if h is not None:
                h.cancel()
        self._tick = self._due = None
        self._tick_at = self._due_at = INF

    def _stop(self) -> None:
        self._epoch += 1
        self.state = IndexState.CLOSED
        self._cancel_timers()
        for t in self._tasks:
            t.cancel()

    # -- storage ----------------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _seal_tail(self, now: int) -> None:
        tail = self._tail
        if not len(tail):
            return
        self._tail = _Tail(now)
        self._sealing.append((tail, self._high_seen))
        if self.state is IndexState.OPEN:
            self._kick()

    def _kick(self) -> None:
        if self._maint_task is None or self._maint_task.done():
            self._maint_task = self._spawn(self._maintain())

    async def _run_maintenance(self) -> None:
        self._kick()
        task = self._maint_task
        if task is not None:
            await asyncio.shield(task)
        if self.last_error is not None and (self._sealing or self._dirty):
            raise self.last_error

    async def _maintain(self) -> None:
        async with self._io_lock:
            while self.state is IndexState.OPEN:
                try:
                    if self._sealing:
                        await self._write_run()
                    elif self._dirty:
                        await self._write_snapshot()
                    else:
                        self.last_error = None
                        self._after_change()
                        return
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.last_error = exc
                    if not _retriable(exc) or isinstance(
                        exc, (ManagedLedgerFenced, ManagedLedgerClosed)
                    ):
                        log.error("%s: storage refused (%r): memory only now", self.name, exc)
                        self.state = IndexState.FAILED
                    else:
                        log.warning("%s: storing failed (%r); will retry", self.name, exc)
                        self._schedule_tick(self.clock.now_ms(), retry=True)
                    return

    async def _write_run(self) -> None:
        tail, through = self._sealing[0]
        epoch = self._epoch
        n = len(tail)
        t_at, t_lid, t_eid = tail.at, tail.lid, tail.eid
        # by due time; equal due times keep arrival (= position) order (stable sort and merge).
        # Sorted in slices, then merged chunk by chunk, yielding between: no long loop stall
        key = t_at.__getitem__
        pieces: list[list[int]] = []
        for s in range(0, n, _SORT_SLICE):
            pieces.append(sorted(range(s, min(n, s + _SORT_SLICE)), key=key))
            await asyncio.sleep(0)
        merged = heapq.merge(*pieces, key=key)
        size = self.config.chunk_records
        refs: list[ChunkRef] = []
        at: array[int] = array("q")
        lid: array[int] = array("q")
        eid: array[int] = array("q")
        while len(at) < n:
            idx = list(itertools.islice(merged, size))
            c_at = array("q", map(key, idx))
            c_lid = array("q", map(t_lid.__getitem__, idx))
            c_eid = array("q", map(t_eid.__getitem__, idx))
            pos = await self.store.append(encode_chunk(c_at, c_lid, c_eid))
            refs.append(ChunkRef(pos, c_at[0], c_at[-1], len(idx)))
            at += c_at
            lid += c_lid
            eid += c_eid
        del pieces, merged
        if epoch != self._epoch:  # cleared meanwhile
            self._to_release.extend(r.position for r in refs)
            return
        # install synchronously: records due before near_end are in the near wheel already
        ref = RunRef(self._next_run_id, tuple(refs))
        self._next_run_id += 1
        k = bisect.bisect_left(at, self._near_end_ms)
        ci = k // size
        now = self.clock.now_ms()
        if k >= n:
            run = _Run(ref, len(refs))  # every record is in the near wheel
        elif at[k] < now + self.config.horizon_ms + self.config.prefetch_ms:
            stop = min(n, (ci + 1) * size)  # needed soon: keep it instead of reading it back
            run = _Run(ref, ci + 1)
            run.attach(at[k:stop], lid[k:stop], eid[k:stop], 0)
        else:  # far: only descriptors stay in memory; chunk ci is read when due
            run = _Run(ref, ci, self._near_end_ms, k - ci * size)
        self._runs.append(run)
        self._sealing.pop(0)
        if through is not None and (
            self._scanned_through is None or through > self._scanned_through
        ):
            self._scanned_through = through
        self.seals += 1
        self._dirty = True
        self._after_change()

    async def _write_snapshot(self) -> None:
        snap = Snapshot(
            self.clock.now_ms(),
            self._scanned_through,
            tuple(r.ref for r in self._runs),
            self._next_run_id,
        )
        self._dirty = False
        releases, self._to_release = self._to_release, []
        try:
            pos = await self.store.append(snap.to_bytes())
        except BaseException:
            self._dirty = True
            self._to_release = releases + self._to_release
            raise
        old, self._snapshot_pos = self._snapshot_pos, pos
        self.snapshots += 1
        if old is not None:
            releases.append(old)
        try:
            await self.store.release(releases)
        except Exception:
            # garbage only: the next recovery releases whatever no snapshot names
            log.debug("%s: releasing %d records failed", self.name, len(releases), exc_info=True)


__all__ = [
    "DelayedDeliveryConfig",
    "DelayedDeliveryIndex",
    "DelayedIndexClosed",
    "DelayedIndexError",
    "DelayedIndexStatistics",
    "IndexState",
]
