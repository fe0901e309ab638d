"""The bookie storage node: implements ``BookieStorage`` over journal + ledger storage.

Owns: per-ledger state (master key, fenced bit, LAC seen on adds, explicit LAC), synchronous
validation of adds (read-only, master key -> UNAUTHORIZED, fence -> FENCED unless recovery,
size -> ENTRY_TOO_LARGE, crc32c -> CORRUPT), the add path (``submit_packed``, the only one: a
batch in the packed layout of ``wire.py`` as it came off the wire, admitted in one pass into
the write cache, then one journal record per batch and one future per batch resolved after
the group's fdatasync), reads, LAC long polls,
fencing (journaled and synced before returning), checkpoints (periodic and on cache full),
start-up replay, read-only mode on disk errors or low free space, and GC entry points.

Invariants:
- An add is acknowledged (status 0) only after the journal group holding it is synced.
- A fence returns only after its journal record is synced; the fenced bit is never cleared.
- Every acknowledged entry is in the synced journal after the last checkpoint mark, or in a
  synced entry log with a committed index location (the checkpoint commits the mark in the
  same index batch as the locations it covers).
- Reads verify crc32c (entry log) or serve bytes verified on receipt (write cache).
- No ``await`` between a validation and the state change it guards.
Must not know: gRPC, ZooKeeper, protobuf messages. (It does know the packed entry layout of
``wire.py``: its entry header is the journal's, which is why a valid batch is journaled as it
arrived.)
"""

from __future__ import annotations

import asyncio
import logging
import struct as _struct
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

import crc32c as _crc32c

from magnetar.bookie import gc as _gc
from magnetar.bookie.api import BookieInfo, Entry
from magnetar.bookie.errors import (
    BookieIOError,
    NoEntry,
    NoLedger,
    ReadOnly,
    StatusCode,
    Unauthorized,
)
from magnetar.bookie.files import FileSystem, OsFileSystem
from magnetar.bookie.index import LedgerRecord
from magnetar.bookie.journal import (
    ENTRIES_PREFIX,
    ENTRY_HEADER_LEN,
    RECORD_HEADER,
    TYPE_ENTRIES,
    TYPE_FENCE,
    TYPE_LAC,
    TYPE_MASTER_KEY,
    ZERO_MARK,
    Journal,
    JournalFailed,
    JournalMark,
    ReplayedEntry,
    ReplayStats,
    decode_body,
    encode_fence,
    encode_lac,
    encode_master_key,
    frame,
    replay,
)
from magnetar.bookie.ledger_storage import LedgerStorage
from magnetar.bookie.wire import ENTRY_HEADER as _WIRE_HEADER
from magnetar.bookie.wire import MalformedBatch
from magnetar.bookie.write_cache import Buffer, CachedValue, Half
from magnetar.clock import Clock, SystemClock, TimerHandle

log = logging.getLogger(__name__)

_crc = _crc32c.crc32c
_OK = int(StatusCode.OK)
_UNAUTHORIZED = int(StatusCode.UNAUTHORIZED)
_FENCED = int(StatusCode.FENCED)
_TOO_LARGE = int(StatusCode.ENTRY_TOO_LARGE)
_CORRUPT = int(StatusCode.CORRUPT)
_READ_ONLY = int(StatusCode.READ_ONLY)
_TOO_MANY = int(StatusCode.TOO_MANY_REQUESTS)
_BAD_REQUEST = int(StatusCode.BAD_REQUEST)


@dataclass(frozen=True, slots=True)
class BookieConfig:
    journal_dir: str
    ledger_dir: str
    index_dir: str | None = None  # default <ledger_dir>/index
    bookie_id: str = "bookie"
    journal_max_group_wait_ms: float = 1.0
    journal_flush_when_idle: bool = True  # don't wait for company when no sync is running
    journal_group_bytes_max: int = 512 * 1024
    journal_file_size_max: int = 256 * 1024 * 1024
    journal_preallocate_bytes: int = 16 * 1024 * 1024  # 0: every append extends the file
    write_cache_bytes_max: int = 128 * 1024 * 1024  # two halves
    read_cache_bytes_max: int = 64 * 1024 * 1024
    entry_log_size_max: int = 512 * 1024 * 1024
    entry_size_max: int = 5 * 1024 * 1024 + 64 * 1024  # 5 MiB payload + framing overhead
    checkpoint_interval_ms: int = 10_000
    max_throttle_ms: int = 1_000  # back-pressure wait when both cache halves are full
    disk_usage_threshold: float = 0.95  # read-only above this used fraction
    disk_free_bytes_min: int = 0  # and/or below this many free bytes
    readahead_entries: int = 100
    readahead_bytes: int = 1024 * 1024
    compaction_threshold: float = 0.5  # compact logs whose live fraction is below this
    compaction_rate_bytes_per_s: int = 64 * 1024 * 1024

    @property
    def index_path(self) -> str:
        return self.index_dir or f"{self.ledger_dir}/index"


class _LedgerState:
    __slots__ = (
        "explicit_lac",
        "fence_future",
        "fenced",
        "lac",
        "lac_known",
        "ledger_id",
        "master_key",
    )

    def __init__(self, ledger_id: int, master_key: bytes) -> None:
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.fenced = False
        self.explicit_lac = -1
        self.lac = -1  # highest LAC piggybacked on an add
        self.lac_known = True  # False after restart until derived from the last entry
        self.fence_future: asyncio.Future[None] | None = None

    def record(self) -> LedgerRecord:
        return LedgerRecord(self.ledger_id, self.master_key, self.fenced, self.explicit_lac)


@dataclass(frozen=True, slots=True)
class BookieStatistics:
    ledgers: int
    read_only: bool
    read_only_reason: str
    checkpoints: int
    last_checkpoint_mark: JournalMark
    replayed_records: int
    replay_corrupt_tails: int
    throttled_batches: int
    rejected_too_many: int


_LENGTH = _struct.Struct(">I")
_first = itemgetter(0)


def _count_packed(buf: bytes, first: int, stop: int) -> int:
    """Entries in ``buf[first:stop]``, or ``MalformedBatch`` (checked before any state
    changes)."""
    if stop <= first:
        raise MalformedBatch("empty batch")
    pos = first
    count = 0
    length_at = _LENGTH.unpack_from
    while pos < stop:
        if stop - pos < ENTRY_HEADER_LEN:
            raise MalformedBatch(f"truncated entry header at offset {pos - first}")
        pos += ENTRY_HEADER_LEN + length_at(buf, pos + 28)[0]
        count += 1
    if pos != stop:
        raise MalformedBatch(f"last entry runs {pos - stop} bytes past the end")
    return count


class _AdmittedBatch:
    """What admitting one packed batch decided: the accepted entries' (header, payload) as
    cached, one status per entry when any was refused (None: all accepted), the master-key
    records of ledgers seen for the first time (journaled before the entries) and the
    ledgers the batch touched (their LAC waiters are woken)."""

    __slots__ = ("accepted", "metas", "statuses", "touched")

    def __init__(self) -> None:
        self.accepted: list[CachedValue] = []
        self.statuses: list[int] | None = None
        self.metas: list[bytes] = []
        self.touched: list[int] = []


_VIEW_MIN_BYTES = 8192
"""Payloads at least this large are kept as ``memoryview`` slices of the received message;
smaller ones are copied (a bytes slice of 1 KiB costs less than a memoryview, which is also
tracked by the GC; measured with ``bench/storage_perf.py --packed``)."""


def _ready(loop: asyncio.AbstractEventLoop, value: list[int]) -> asyncio.Future[list[int]]:
    fut: asyncio.Future[list[int]] = loop.create_future()
    fut.set_result(value)
    return fut


class Bookie:
    """The storage engine of one bookie (``BookieStorage``)."""

    def __init__(
        self,
        config: BookieConfig,
        *,
        fs: FileSystem | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.fs: FileSystem = fs if fs is not None else OsFileSystem()
        self._clock: Clock = clock if clock is not None else SystemClock()
        self.storage = LedgerStorage(
            self.fs,
            config.ledger_dir,
            config.index_path,
            write_cache_half_bytes=max(
                config.write_cache_bytes_max // 2, 2 * config.entry_size_max
            ),
            read_cache_bytes=config.read_cache_bytes_max,
            entry_log_size_max=config.entry_log_size_max,
            readahead_entries=config.readahead_entries,
            readahead_bytes=config.readahead_bytes,
        )
        self.journal = Journal(
            self.fs,
            config.journal_dir,
            max_group_wait_ms=config.journal_max_group_wait_ms,
            group_bytes_max=config.journal_group_bytes_max,
            file_size_max=config.journal_file_size_max,
            on_failure=self._on_journal_failure,
            flush_when_idle=config.journal_flush_when_idle,
            preallocate_bytes=config.journal_preallocate_bytes,
        )
        self._cache = self.storage.write_cache
        self._ledgers: dict[int, _LedgerState] = {}
        self._dirty: set[int] = set()
        self._lac_waiters: dict[int, list[tuple[int, asyncio.Future[int]]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._read_only = False
        self._read_only_reason = ""
        self._io_failed = False
        self._closing = False
        self._started = False
        self._ckpt_task: asyncio.Task[None] | None = None
        self._flush_done = asyncio.Event()
        self._maintenance = asyncio.Lock()
        self._gc_active = False
        self._periodic: asyncio.Task[None] | None = None
        self._checkpoints = 0
        self._last_mark = ZERO_MARK
        self._replay_stats = ReplayStats()
        self._throttled = 0
        self._rejected_too_many = 0
        self._entry_size_max = config.entry_size_max

    def __repr__(self) -> str:
        return (
            f"<Bookie {self.config.bookie_id} ledgers={len(self._ledgers)} "
            f"read_only={self._read_only}>"
        )

    # -- lifecycle --

    async def start(self) -> None:
        """Open storage, replay the journal from the last checkpoint mark, checkpoint, serve."""
        self._loop = asyncio.get_running_loop()
        self._flush_done = asyncio.Event()
        self._maintenance = asyncio.Lock()
        self.fs.makedirs(self.config.journal_dir)
        self.fs.makedirs(self.config.ledger_dir)
        await asyncio.to_thread(self.storage.open)
        index = self.storage.index
        assert index is not None
        for record in index.ledgers():
            st = _LedgerState(record.ledger_id, record.master_key)
            st.fenced = record.fenced
            st.explicit_lac = record.explicit_lac
            st.lac_known = False
            self._ledgers[record.ledger_id] = st
        raw_mark = index.get_mark()
        mark = JournalMark.unpack(raw_mark) if raw_mark else ZERO_MARK
        self._last_mark = mark
        await asyncio.to_thread(self._replay, mark)
        self.journal.start(self._loop)
        self._started = True
        self._update_disk_state()
        # Everything replayed goes to the entry log now; older journals are trimmed.
        task = self._begin_checkpoint()
        if task is not None:
            await task
        self._periodic = self._loop.create_task(self._periodic_loop())
        log.info(
            "bookie %s started: %d ledgers, replayed %d journal records from %s",
            self.config.bookie_id,
            len(self._ledgers),
            self._replay_stats.records,
            mark,
        )

    def _replay(self, mark: JournalMark) -> None:
        """Re-apply journal records after ``mark`` (worker thread, before serving)."""
        cache = self._cache
        for position, body in replay(self.fs, self.config.journal_dir, mark, self._replay_stats):
            for rec in decode_body(body):
                if isinstance(rec, ReplayedEntry):
                    st = self._ledgers.get(rec.ledger_id)
                    if st is None:
                        log.warning("journal replay: entry of unknown ledger %d", rec.ledger_id)
                        st = self._ledgers[rec.ledger_id] = _LedgerState(rec.ledger_id, b"")
                        self._dirty.add(rec.ledger_id)
                    cache.put(rec.ledger_id, rec.entry_id, rec.header, rec.payload)
                    st.lac = max(st.lac, rec.lac)
                    continue
                st = self._ledgers.get(rec.ledger_id)
                if rec.kind == TYPE_MASTER_KEY:
                    if st is None:
                        self._ledgers[rec.ledger_id] = _LedgerState(rec.ledger_id, rec.master_key)
                    elif not st.master_key:
                        st.master_key = rec.master_key
                    self._dirty.add(rec.ledger_id)
                    continue
                if st is None:
                    st = self._ledgers[rec.ledger_id] = _LedgerState(rec.ledger_id, b"")
                if rec.kind == TYPE_FENCE:
                    st.fenced = True
                elif rec.kind == TYPE_LAC:
                    st.explicit_lac = max(st.explicit_lac, rec.lac)
                self._dirty.add(rec.ledger_id)
            if cache.is_full:  # bound memory during a long replay: checkpoint at this record
                half = cache.swap()
                records = self._take_dirty()
                self.storage.flush_half(half, records, position.pack())
                cache.release_flushed()

    async def close(self) -> None:
        """Graceful stop: no new adds, sync the journal, final checkpoint, close files."""
        if not self._started:
            return
        self._closing = True
        if self._periodic is not None:
            self._periodic.cancel()
            try:
                await self._periodic
            except asyncio.CancelledError:
                pass
            self._periodic = None
        if not self.journal.failed:
            try:
                await self.journal.barrier()
            except JournalFailed:
                pass
        if self._ckpt_task is not None:
            await asyncio.shield(self._ckpt_task)
        task = self._begin_checkpoint(force=True)
        if task is not None:
            await task
        await self.journal.close()
        self._fail_waiters()
        await asyncio.to_thread(self.storage.close)
        self._started = False

    async def halt(self) -> None:
        """Stop as a crash would (tests): no checkpoint; unsynced journal groups are dropped."""
        self._closing = True
        if self._periodic is not None:
            self._periodic.cancel()
            self._periodic = None
        if self._ckpt_task is not None:
            try:
                await asyncio.shield(self._ckpt_task)
            except Exception:
                pass
        self.journal._pending = None  # never written: as if the process died now
        await self.journal.close()
        self._fail_waiters()
        await asyncio.to_thread(self.storage.close)
        self._started = False

    def _fail_waiters(self) -> None:
        for waiters in self._lac_waiters.values():
            for _, fut in waiters:
                if not fut.done():
                    fut.cancel()
        self._lac_waiters.clear()

    # -- add path --

    def _hold_if_full(
        self, count: int, add: Callable[[], Awaitable[list[int]]]
    ) -> asyncio.Task[list[int]] | None:
        """None while the write cache's active half has room; else (a checkpoint started)
        the task that runs ``add`` once it has."""
        cache = self._cache
        if cache.active_bytes < cache.half_bytes_max:
            return None
        if not cache.flushing:
            self._begin_checkpoint()
        if cache.active_bytes < cache.half_bytes_max:
            return None
        self._throttled += 1
        assert self._loop is not None
        return self._loop.create_task(self._add_throttled(count, add))

    def _admit_ledger(
        self, lid: int, key: bytes, metas: list[bytes], touched: list[int]
    ) -> _LedgerState:
        """The state of ledger ``lid`` (>= 0) for an add batch, noted in ``touched``. On the
        ledger's first add it is created with ``key`` and its master-key record goes into
        ``metas``, to be journaled before the batch's entries. The caller checks key and fence."""
        st = self._ledgers.get(lid)
        if st is None:
            st = self._ledgers[lid] = _LedgerState(lid, key)
            metas.append(encode_master_key(lid, key))
            self._dirty.add(lid)
        touched.append(lid)
        return st

    async def _add_throttled(
        self, count: int, add_now: Callable[[], Awaitable[list[int]]]
    ) -> list[int]:
        """Both cache halves are full: wait (bounded) for the flush, then add or reject."""
        deadline = self._clock.monotonic_ms() + self.config.max_throttle_ms
        cache = self._cache
        while cache.active_bytes >= cache.half_bytes_max:
            if self._read_only or self._closing:
                return [_READ_ONLY] * count
            if not cache.flushing:
                self._begin_checkpoint()
                if cache.flushing:
                    continue  # swapped: the active half is empty now
                # A checkpoint is finishing (or GC runs): wait for it below.
            remaining_ms = deadline - self._clock.monotonic_ms()
            if remaining_ms <= 0:
                self._rejected_too_many += 1
                return [_TOO_MANY] * count
            event = self._flush_done
            try:
                await asyncio.wait_for(event.wait(), remaining_ms / 1000.0)
            except TimeoutError:
                continue
            if self._read_only:
                return [_READ_ONLY] * count
        if self._read_only or self._closing:
            return [_READ_ONLY] * count
        return await add_now()

    # -- packed add path (the gRPC fast path) --

    def submit_packed(
        self,
        buf: bytes,
        master_key: bytes = b"",
        recovery: bool = False,
        first: int = 0,
        stop: int | None = None,
    ) -> tuple[Awaitable[list[int]], int, int]:
        """Add every entry of one ``AddBatch.packed`` buffer, ``buf[first:stop]`` (layout:
        ``wire.py``; the service passes the whole received message and packed's bounds),
        with the batch's master key and recovery flag. Returns (future of one status per
        entry, resolved after the journal fsync; entry count; bytes put into the write cache).
        Raises ``MalformedBatch`` before touching any state if the buffer does not hold whole
        entries. ``buf`` must not change afterwards: the journal writes it as it is, and the
        write cache keeps views of its large payloads (no copy of them on the add path)."""
        stop = len(buf) if stop is None else stop
        count = _count_packed(buf, first, stop)
        loop = self._loop
        assert loop is not None, "start() first"
        if self._read_only or self._closing:
            return _ready(loop, [_READ_ONLY] * count), count, 0
        held = self._hold_if_full(
            count, lambda: self._add_packed(buf, first, stop, count, master_key, recovery)[0]
        )
        if held is not None:
            return held, count, stop - first
        fut, nbytes = self._add_packed(buf, first, stop, count, master_key, recovery)
        return fut, count, nbytes

    def _add_packed(  # noqa: PLR0917
        self,
        buf: bytes,
        first: int,
        stop: int,
        n: int,
        key: bytes,
        recovery: bool,
    ) -> tuple[asyncio.Future[list[int]], int]:
        """``submit_packed`` after the structure check: admit the entries (one pass), then
        journal what was accepted. Returns (future of the statuses, bytes cached)."""
        loop = self._loop
        assert loop is not None
        batch = self._admit_packed(buf, first, n, key, recovery)
        journal = self.journal
        for meta in batch.metas:
            journal.append(*frame(meta))
        statuses = batch.statuses or [_OK] * n
        if not batch.accepted:
            return _ready(loop, statuses), 0
        group, nbytes = self._journal_packed(buf, first, stop, batch)
        if self._lac_waiters:
            for lid in batch.touched:
                self._wake_lac(lid)
        return self._when_synced(group, statuses, loop), nbytes

    def _admit_packed(
        self, buf: bytes, first: int, n: int, key: bytes, recovery: bool
    ) -> _AdmittedBatch:
        """Check every entry of ``buf[first:]`` (ids, size, key, fence, checksum), put the
        accepted ones into the write cache and raise the ledgers' piggybacked LACs; nothing
        is journaled yet and nothing here awaits."""
        view: memoryview | None = None
        cache = self._cache
        batch = _AdmittedBatch()
        accepted = batch.accepted
        append = accepted.append
        statuses: list[int] | None = None
        unpack = _WIRE_HEADER.unpack_from
        crc = _crc
        size_max = self._entry_size_max
        cur_lid = -1
        st: _LedgerState | None = None
        d: dict[int, CachedValue] = {}
        refused = 0  # the current ledger's refusal status (key, fence), 0 = accepted
        max_lac = -1
        pos = first
        # Per entry: one unpack, two slices (header, payload: a view when large), one crc32c
        # (C), one tuple, one append, one dict store. Ledger state, key and fence are checked
        # when the ledger changes.
        for i in range(n):
            lid, eid, lac, c, length = unpack(buf, pos)
            start = pos + ENTRY_HEADER_LEN
            end = start + length
            if lid != cur_lid:
                if st is not None and max_lac > st.lac:
                    st.lac = max_lac
                cur_lid = lid
                if lid < 0:
                    st = None
                    refused = _BAD_REQUEST
                else:
                    st = self._admit_ledger(lid, key, batch.metas, batch.touched)
                    if st.master_key != key:
                        refused = _UNAUTHORIZED
                    elif st.fenced and not recovery:
                        refused = _FENCED
                    else:
                        refused = 0
                    max_lac = st.lac
                    d = cache.ledger(lid)
            if refused or eid < 0 or length > size_max:
                statuses = statuses or [_OK] * n
                statuses[i] = refused or (_BAD_REQUEST if eid < 0 else _TOO_LARGE)
                pos = end
                continue
            if length < _VIEW_MIN_BYTES:
                payload: Buffer = buf[start:end]
            else:
                if view is None:
                    view = memoryview(buf)
                payload = view[start:end]
            if crc(payload) != c:
                statuses = statuses or [_OK] * n
                statuses[i] = _CORRUPT
                pos = end
                continue
            d[eid] = value = (buf[pos:start], payload)
            append(value)
            if lac > max_lac:  # noqa: PLR1730 (a max() call costs more per entry)
                max_lac = lac
            pos = end
        if st is not None and max_lac > st.lac:
            st.lac = max_lac
        batch.statuses = statuses
        return batch

    def _journal_packed(
        self, buf: bytes, first: int, stop: int, batch: _AdmittedBatch
    ) -> tuple[asyncio.Future[None], int]:
        """One journal record of the accepted entries: the received bytes themselves when
        every entry was accepted (their headers are the journal's: ids >= 0), else the
        accepted headers and payloads. Returns (its group's future, bytes cached)."""
        accepted = batch.accepted
        if batch.statuses is None:
            nbytes = stop - first
        else:
            nbytes = ENTRY_HEADER_LEN * len(accepted) + sum(len(v[1]) for v in accepted)
        self._cache.account(nbytes)
        prefix = ENTRIES_PREFIX.pack(TYPE_ENTRIES, len(accepted))
        # Journal record checksum (version 2): prefix and entry headers only; each payload is
        # covered by the crc32c in its header, just verified.
        body_bytes = ENTRIES_PREFIX.size + nbytes
        checksum = _crc(b"".join(map(_first, accepted)), _crc(prefix))
        body: list[Buffer]
        if batch.statuses is None:
            whole = buf if first == 0 and stop == len(buf) else memoryview(buf)[first:stop]
            body = [prefix, whole]
        else:
            body = [prefix, *chain.from_iterable(accepted)]
        header = RECORD_HEADER.pack(body_bytes, checksum)
        return self.journal.append_parts(header, body, body_bytes), nbytes

    @staticmethod
    def _when_synced(
        group: asyncio.Future[None], result: list[int], loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[list[int]]:
        """A future resolving to ``result`` once ``group`` is synced (failed: READ_ONLY)."""
        out: asyncio.Future[list[int]] = loop.create_future()

        def done(f: asyncio.Future[None]) -> None:
            if out.done():
                return
            if f.cancelled() or f.exception() is not None:
                out.set_result([s or _READ_ONLY for s in result])
            else:
                out.set_result(result)

        group.add_done_callback(done)
        return out

    # -- reads --

    def _state(self, ledger_id: int) -> _LedgerState:
        st = self._ledgers.get(ledger_id)
        if st is None:
            raise NoLedger(f"ledger {ledger_id} not on this bookie")
        return st

    def _last_entry_id(self, ledger_id: int) -> int:
        return self.storage.last_entry_id(ledger_id)

    async def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        self._state(ledger_id)
        if entry_id == -1:
            entry_id = self._last_entry_id(ledger_id)
            if entry_id < 0:
                raise NoEntry(f"ledger {ledger_id} has no entries")
        got = self.storage.get_entry(ledger_id, entry_id)
        if got is None:
            raise NoEntry(f"entry {ledger_id}:{entry_id} not found")
        lac, crc, payload = got
        return Entry(ledger_id, entry_id, lac, crc, payload)

    async def read_range(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int
    ) -> list[Entry]:
        self._state(ledger_id)
        out: list[Entry] = []
        size = 0
        get = self.storage.get_entry
        for entry_id in range(first_entry_id, last_entry_id + 1):
            got = get(ledger_id, entry_id)
            if got is None:
                break
            lac, crc, payload = got
            size += len(payload)
            if out and size > max_bytes:
                break
            out.append(Entry(ledger_id, entry_id, lac, crc, payload))
        if not out and first_entry_id <= last_entry_id:
            raise NoEntry(f"entry {ledger_id}:{first_entry_id} not found")
        return out

    async def read_packed(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int
    ) -> tuple[list[bytes | memoryview], int]:
        self._state(ledger_id)
        parts, count = self.storage.read_packed(ledger_id, first_entry_id, last_entry_id, max_bytes)
        if not count and first_entry_id <= last_entry_id:
            raise NoEntry(f"entry {ledger_id}:{first_entry_id} not found")
        return parts, count

    def _current_lac(self, st: _LedgerState) -> int:
        if not st.lac_known:
            st.lac_known = True
            last = self._last_entry_id(st.ledger_id)
            if last >= 0:
                got = self.storage.get_entry(st.ledger_id, last)
                if got is not None and got[0] > st.lac:
                    st.lac = got[0]
        return max(st.lac, st.explicit_lac)

    def read_lac(self, ledger_id: int) -> int:
        """Highest LAC known (adds' piggyback, explicit LAC); raises ``NoLedger`` if unknown."""
        return self._current_lac(self._state(ledger_id))

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_ms: int) -> int:
        st = self._ledgers.get(ledger_id)
        current = self._current_lac(st) if st is not None else -1
        if current > previous_lac or timeout_ms <= 0:
            return current
        loop = self._loop
        assert loop is not None
        fut: asyncio.Future[int] = loop.create_future()
        waiter = (previous_lac, fut)
        self._lac_waiters.setdefault(ledger_id, []).append(waiter)

        def expire() -> None:
            if not fut.done():
                s = self._ledgers.get(ledger_id)
                fut.set_result(self._current_lac(s) if s is not None else -1)

        handle: TimerHandle = self._clock.call_later(timeout_ms / 1000.0, expire)
        try:
            return await fut
        finally:
            handle.cancel()
            waiters = self._lac_waiters.get(ledger_id)
            if waiters is not None:
                try:
                    waiters.remove(waiter)
                except ValueError:
                    pass
                if not waiters:
                    del self._lac_waiters[ledger_id]

    def _wake_lac(self, ledger_id: int) -> None:
        waiters = self._lac_waiters.get(ledger_id)
        if not waiters:
            return
        st = self._ledgers.get(ledger_id)
        if st is None:
            return
        current = self._current_lac(st)
        for previous, fut in waiters:
            if current > previous and not fut.done():
                fut.set_result(current)

    # -- fencing, explicit LAC, force --

    def _ledger_for_write(self, ledger_id: int, master_key: bytes) -> _LedgerState:
        """The ledger's state, created (master key journaled) on first sight; checks the key."""
        st = self._ledgers.get(ledger_id)
        if st is None:
            st = self._ledgers[ledger_id] = _LedgerState(ledger_id, master_key)
            self._dirty.add(ledger_id)
            self.journal.append(*frame(encode_master_key(ledger_id, master_key)))
        elif st.master_key != master_key:
            raise Unauthorized(f"master key mismatch for ledger {ledger_id}")
        return st

    def _check_journal(self) -> None:
        if self.journal.failed or self._closing or not self._started:
            raise ReadOnly("bookie journal is not writable")

    async def fence(self, ledger_id: int, master_key: bytes) -> int:
        self._check_journal()
        st = self._ledger_for_write(ledger_id, master_key)
        fut: asyncio.Future[None] | None
        if not st.fenced:
            st.fenced = True
            self._dirty.add(ledger_id)
            fut = st.fence_future = self.journal.append(*frame(encode_fence(ledger_id)))
            log.info("ledger %d fenced", ledger_id)
        else:
            fut = st.fence_future
        if fut is not None and not fut.done():
            await self._durable(asyncio.shield(fut))
        elif fut is not None and fut.exception() is not None:
            raise BookieIOError(f"fence of ledger {ledger_id} not durable")
        return self._last_entry_id(ledger_id)

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        self._check_journal()
        st = self._ledger_for_write(ledger_id, master_key)
        if lac > st.explicit_lac:
            st.explicit_lac = lac
            self._dirty.add(ledger_id)
        fut = self.journal.append(*frame(encode_lac(ledger_id, lac)))
        self._wake_lac(ledger_id)
        await self._durable(fut)

    async def force_ledger(self, ledger_id: int) -> None:
        if self.journal.failed:
            raise BookieIOError("journal failed")
        await self._durable(self.journal.barrier())

    @staticmethod
    async def _durable(fut: Awaitable[None]) -> None:
        try:
            await fut
        except JournalFailed as exc:
            raise BookieIOError(str(exc)) from exc

    # -- checkpoint --

    def _take_dirty(self) -> list[LedgerRecord]:
        records = [self._ledgers[lid].record() for lid in self._dirty if lid in self._ledgers]
        self._dirty.clear()
        return records

    def _begin_checkpoint(self, *, force: bool = False) -> asyncio.Task[None] | None:
        """Capture the mark and dirty ledgers and swap the cache now; flush in a thread."""
        if self._ckpt_task is not None and not self._ckpt_task.done():
            return self._ckpt_task
        if self._gc_active or self._cache.flushing:
            return None
        if self._io_failed and not force:
            return None
        if not self._cache.active_bytes and not self._dirty and not force:
            mark = self.journal.current_mark()
            if mark == self._last_mark:
                return None
        loop = self._loop
        assert loop is not None
        mark = self.journal.current_mark()
        records = self._take_dirty()
        half = self._cache.swap()
        self._ckpt_task = loop.create_task(self._run_checkpoint(half, records, mark))
        return self._ckpt_task

    async def _run_checkpoint(
        self, half: Half, records: list[LedgerRecord], mark: JournalMark
    ) -> None:
        try:
            async with self._maintenance:
                # GC may have dropped ledgers while this waited for the lock.
                records = [r for r in records if r.ledger_id in self._ledgers]
                try:
                    await asyncio.to_thread(self.storage.flush_half, half, records, mark.pack())
                except (OSError, BookieIOError) as exc:
                    self._cache.unswap()
                    self._dirty.update(r.ledger_id for r in records)
                    self._io_failed = True
                    self._go_read_only(f"checkpoint failed: {exc}")
                    return
                self._cache.release_flushed()
                self._checkpoints += 1
                self._last_mark = mark
                try:
                    removed = await asyncio.to_thread(self.journal.trim, mark)
                except OSError as exc:
                    log.warning("journal trim failed: %s", exc)
                    removed = []
                if removed:
                    log.debug("trimmed journals %s", [f"{i:x}" for i in removed])
        finally:
            event, self._flush_done = self._flush_done, asyncio.Event()
            event.set()

    async def checkpoint(self) -> None:
        """Run a checkpoint now (waits for a running one first)."""
        if self._ckpt_task is not None and not self._ckpt_task.done():
            await asyncio.shield(self._ckpt_task)
        task = self._begin_checkpoint(force=True)
        if task is not None:
            await asyncio.shield(task)

    async def _periodic_loop(self) -> None:
        interval_s = self.config.checkpoint_interval_ms / 1000.0
        while True:
            await self._clock.sleep(interval_s)
            self._update_disk_state()
            try:
                task = self._begin_checkpoint()  # nothing when idle or after an I/O failure
                if task is not None:
                    await asyncio.shield(task)
            except Exception:
                log.exception("periodic checkpoint failed")

    # -- read-only --

    def _on_journal_failure(self, exc: OSError) -> None:
        self._io_failed = True
        self._go_read_only(f"journal I/O error: {exc}")

    def _go_read_only(self, reason: str) -> None:
        if not self._read_only:
            log.error("bookie %s is now READ-ONLY: %s", self.config.bookie_id, reason)
        self._read_only = True
        self._read_only_reason = reason
        if self._loop is not None:
            event, self._flush_done = self._flush_done, asyncio.Event()
            event.set()

    def _update_disk_state(self) -> None:
        if self._io_failed:
            return
        try:
            usage = self.fs.disk_usage(self.config.ledger_dir)
        except OSError as exc:
            self._go_read_only(f"cannot stat disk: {exc}")
            return
        used = 1.0 - usage.free_bytes / usage.total_bytes if usage.total_bytes else 0.0
        low = usage.free_bytes < self.config.disk_free_bytes_min or (
            used > self.config.disk_usage_threshold
        )
        if low:
            self._go_read_only(
                f"disk almost full: {usage.free_bytes} bytes free of {usage.total_bytes}"
            )
        elif self._read_only:
            log.warning("bookie %s is writable again: disk space recovered", self.config.bookie_id)
            self._read_only = False
            self._read_only_reason = ""

    def check_disk(self) -> bool:
        """Re-evaluate free space now; returns read_only."""
        self._update_disk_state()
        return self._read_only

    @property
    def read_only(self) -> bool:
        return self._read_only

    def info(self) -> BookieInfo:
        try:
            usage = self.fs.disk_usage(self.config.ledger_dir)
            total, free = usage.total_bytes, usage.free_bytes
        except OSError:
            total, free = 0, 0
        return BookieInfo(
            bookie_id=self.config.bookie_id,
            read_only=self._read_only,
            total_disk_bytes=total,
            free_disk_bytes=free,
            journal_lag_bytes=self.journal.lag_bytes,
        )

    # -- GC --

    def local_ledger_ids(self) -> set[int]:
        """Ledgers this bookie holds. Read this BEFORE reading the live set from metadata and
        pass it as ``candidates`` to ``collect_garbage``, so a ledger created meanwhile is safe."""
        return set(self._ledgers)

    async def collect_garbage(
        self, live_ledger_ids: Collection[int], candidates: Collection[int] | None = None
    ) -> _gc.GcResult:
        """Drop ledgers not in ``live_ledger_ids`` (among ``candidates``), delete dead entry
        logs, compact sparse ones. Returns what was reclaimed."""
        live = set(live_ledger_ids)
        pool = set(candidates) if candidates is not None else set(self._ledgers)
        dead = {lid for lid in pool if lid not in live and lid in self._ledgers}
        # Flush first so the journal mark moves past the dead ledgers' records.
        await self.checkpoint()
        async with self._maintenance:
            self._gc_active = True
            try:
                for lid in dead:
                    self._ledgers.pop(lid, None)
                    self._dirty.discard(lid)
                    self._cache.drop_ledger(lid)
                    self.storage.read_cache.drop_ledger(lid)
                collector = _gc.GarbageCollector(
                    self.storage,
                    compaction_threshold=self.config.compaction_threshold,
                    rate_bytes_per_s=self.config.compaction_rate_bytes_per_s,
                )
                result = await asyncio.to_thread(collector.collect, dead)
                reclaimed = 0
                for log_id in result.logs_to_delete:
                    try:
                        reclaimed += self.storage.entry_logger.delete(log_id)
                    except OSError as exc:
                        log.warning("cannot delete entry log %x: %s", log_id, exc)
                self.storage.read_cache.clear()
                return _gc.GcResult(
                    deleted_ledgers=tuple(sorted(dead)),
                    deleted_logs=result.logs_to_delete,
                    compacted_logs=result.compacted_logs,
                    reclaimed_bytes=reclaimed - result.written_bytes,
                    written_bytes=result.written_bytes,
                )
            finally:
                self._gc_active = False
                event, self._flush_done = self._flush_done, asyncio.Event()
                event.set()

    def statistics(self) -> BookieStatistics:
        return BookieStatistics(
            ledgers=len(self._ledgers),
            read_only=self._read_only,
            read_only_reason=self._read_only_reason,
            checkpoints=self._checkpoints,
            last_checkpoint_mark=self._last_mark,
            replayed_records=self._replay_stats.records,
            replay_corrupt_tails=len(self._replay_stats.corrupt_tails),
            throttled_batches=self._throttled,
            rejected_too_many=self._rejected_too_many,
        )


__all__ = ["Bookie", "BookieConfig", "BookieStatistics"]
