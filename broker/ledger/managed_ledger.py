"""Managed ledgers: an append-only log made of a list of ledgers, with named cursors.

Owns: ``ManagedLedgerFactory`` (opens managed ledgers over one ``LedgerClient`` and one
metadata store session) and ``ManagedLedger`` (add with ordered completions, rollover,
reads and tailing, the entry cache, trimming under retention, cursors' registry).
Metadata: ``zk.paths.managed_ledger(name)`` holds JSON ``{ledgers: [{id, entries, size,
ts}], properties}``, changed only by CAS; a lost CAS means another owner: FENCED.
Open: read the list, recover (fence + close) the last ledger, drop it if empty, create a
new ledger, CAS the list, recover the cursors. Only then adds are accepted.
Rollover: when the current ledger reaches ``max_entries_per_ledger`` /
``max_size_per_ledger_bytes`` / ``max_ledger_rollover_time_ms`` (never before
``min_ledger_rollover_time_ms``), or its handle failed: close it, create the next one, CAS;
adds arriving meanwhile queue (bounded) and go to the new ledger in order. A handle that
failed for want of bookies hands its unconfirmed adds back first (they go to the new ledger
ahead of the queue, their futures resolve to their new positions) and closes at its LAC.
Trimming: ledgers wholly before the slowest durable cursor's mark-delete and outside the
retention policy are removed from the list (CAS), then their ledger metadata is deleted;
bookies reclaim the space in GC. The current ledger is never trimmed.
Invariants: positions of completed adds only grow; readers never see past last_confirmed;
ledger ids strictly increase along the list (positions compare by ledger id first, so
cursors, backlog, trimming, publish-time search and everything above rely on it): a new
ledger is asked for above the largest id this managed ledger has had, and one that is not
is refused with ``LedgerOutOfOrder`` (never appended); a stored list out of order is
refused at open.
Must not know: topics, producers, subscriptions, message formats, the wire protocol.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from magnetar.broker.bookkeeper.client import LedgerClient, LedgerClientConfig
from magnetar.broker.bookkeeper.errors import (
    LedgerError,
    LedgerFenced,
    LedgerNotFound,
    NotEnoughBookies,
    TooManyPendingAdds,
)
from magnetar.broker.bookkeeper.placement import BookieClientFactory
from magnetar.broker.bookkeeper.read_handle import ReadHandle
from magnetar.broker.bookkeeper.states import HandleState
from magnetar.broker.bookkeeper.write_handle import WriteHandle
from magnetar.broker.ledger.ackstate import AckState
from magnetar.broker.ledger.cache import CacheStatistics, EntryCacheManager
from magnetar.broker.ledger.cursor import CursorInfo, ManagedCursor
from magnetar.broker.ledger.errors import (
    CursorAlreadyExists,
    LedgerOutOfOrder,
    ManagedLedgerClosed,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
)
from magnetar.broker.ledger.position import EARLIEST, LATEST, Position
from magnetar.broker.ledger.read_ahead import ReadAhead, ReadAheadBudget, ReadAheadStats
from magnetar.broker.ledger.states import MANAGED_LEDGER_FSM, ManagedLedgerEvent, ManagedLedgerState
from magnetar.clock import Clock, SystemClock
from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, BadVersion, MetadataError, NotFound
from magnetar.zk.store import CREATE_ONLY, MetadataStore, SessionEvent

log = logging.getLogger(__name__)

_S = ManagedLedgerState
_E = ManagedLedgerEvent
_LEDGER_OPENED = ManagedLedgerState.LEDGER_OPENED
"""As a module constant: an Enum member lookup costs ~0.2 us (Python 3.11), once per add."""


@dataclass(frozen=True, slots=True)
class ManagedLedgerConfig:
    ensemble_size: int = 2
    write_quorum: int = 2
    ack_quorum: int = 2
    max_entries_per_ledger: int = 50_000
    max_size_per_ledger_bytes: int = 2 << 30
    max_ledger_rollover_time_ms: int = 240 * 60_000
    min_ledger_rollover_time_ms: int = 10 * 60_000
    rollover_check_interval_ms: int = 60_000
    retention_time_ms: int = 0
    """How long consumed ledgers are kept; -1 = forever, 0 = not at all."""
    retention_size_bytes: int = 0
    """How many bytes of consumed ledgers are kept; -1 = no limit, 0 = none."""
    entry_cache_bytes: int = 64 << 20
    """The broker-wide entry cache budget (the factory's config sets it; per-ledger configs
    do not: every managed ledger of a factory shares one ``EntryCacheManager``)."""
    entry_cache_eviction_watermark: float = 0.9
    """Over budget, evict down to this fraction of it (factory-wide)."""
    entry_cache_eviction_time_threshold_ms: int = 1000
    """Entries older than this are evicted (0 = no age eviction; factory-wide)."""
    entry_cache_eviction_interval_ms: int = 10
    """The age eviction runs at most this often (factory-wide)."""
    read_ahead_entries: int = 10_000
    """A cursor reading behind the entry cache keeps bookie reads in flight for up to this
    many entries past its read position (``ReadAhead``); 0 = one read at a time."""
    read_ahead_bytes: int = 4 << 20
    """... and for up to this many bytes (estimated from the ledger's average entry)."""
    read_ahead_total_bytes: int = 64 << 20
    """Every cursor's read-ahead of a factory together holds at most this many bytes
    (``ReadAheadBudget``; the factory's config sets it, as ``entry_cache_bytes``)."""
    cursor_backlogged_threshold: int = 1000
    """A cursor this many entries or more behind the last confirmed entry is not an active
    reader for caching: the cache does not keep entries for it."""
    max_pending_adds: int = 100_000
    cursor_snapshot_min_bytes: int = 1 << 20
    """A new cursor snapshot (and cursor ledger) once the deltas since the last one exceed
    this or the snapshot's own size, whichever is larger: bounds replay on recovery."""
    cursor_max_entries_per_ledger: int = 50_000
    snapshot_chunk_bytes: int = 1 << 20
    add_timeout_ms: int = 3_000
    ensemble_change_timeout_ms: int = 10_000
    quarantine_ms: int = 30_000
    password: bytes = b""

    def ledger_client_config(self) -> LedgerClientConfig:
        return LedgerClientConfig(
            ensemble_size=self.ensemble_size,
            write_quorum=self.write_quorum,
            ack_quorum=self.ack_quorum,
            password=self.password,
            add_timeout_ms=self.add_timeout_ms,
            ensemble_change_timeout_ms=self.ensemble_change_timeout_ms,
            max_pending_adds=self.max_pending_adds,
            quarantine_ms=self.quarantine_ms,
        )


@dataclass(slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp_ms: int = 0
    """Creation time, then close time once closed: retention counts from the close, as in
    Pulsar (a ledger written for hours is not expired by the age of its first entry)."""


class ManagedEntry(NamedTuple):
    """An entry of the managed ledger (a named tuple: one is made per entry read)."""

    position: Position
    payload: bytes


_new_tuple = tuple.__new__


@dataclass(frozen=True, slots=True)
class ManagedLedgerStatistics:
    name: str
    state: str
    ledgers: int
    current_ledger_id: int
    entries: int
    size_bytes: int
    last_confirmed: Position
    pending_adds: int
    queued_adds: int
    cursors: int
    cache: CacheStatistics


@dataclass(slots=True)
class _Info:
    ledgers: list[LedgerInfo] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "ledgers": [
                    {"id": i.ledger_id, "entries": i.entries, "size": i.size, "ts": i.timestamp_ms}
                    for i in self.ledgers
                ],
                "properties": self.properties,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> _Info:
        if not data:
            return cls()
        doc = json.loads(data)
        return cls(
            [
                LedgerInfo(int(d["id"]), int(d["entries"]), int(d["size"]), int(d["ts"]))
                for d in doc["ledgers"]
            ],
            dict(doc.get("properties", {})),
        )


class ManagedLedgerFactory:
    """Opens managed ledgers; one per broker process (shares the bookie clients)."""

    def __init__(
        self,
        store: MetadataStore,
        bookie_client_factory: BookieClientFactory,
        config: ManagedLedgerConfig | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.config = config or ManagedLedgerConfig()
        self.clock: Clock = clock or SystemClock()
        self.ledger_client = LedgerClient(
            store,
            bookie_client_factory,
            self.config.ledger_client_config(),
            clock=self.clock,
            rng=rng,
        )
        self.entry_cache = EntryCacheManager(
            self.config.entry_cache_bytes,
            eviction_watermark=self.config.entry_cache_eviction_watermark,
            eviction_time_threshold_ms=self.config.entry_cache_eviction_time_threshold_ms,
            eviction_interval_ms=self.config.entry_cache_eviction_interval_ms,
            clock=self.clock,
        )
        self.read_ahead_budget = ReadAheadBudget(max(1, self.config.read_ahead_total_bytes))
        self.ledgers_given_up = 0
        """Ledgers closed at their LAC for want of bookies (their adds moved on)."""
        self.adds_moved = 0
        """Unconfirmed adds of such ledgers, re-added to the next ledger."""
        self._open: dict[str, ManagedLedger] = {}
        self._opening: dict[str, asyncio.Future[ManagedLedger]] = {}
        store.add_session_listener(self._on_session_event)

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.LOST:
            log.warning("metadata session lost: fencing %d managed ledgers", len(self._open))
            for ml in list(self._open.values()):
                ml.fence("metadata session lost")

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        """Open (recovering it) or return the already open managed ledger ``name``."""
        ml = self._open.get(name)
        if ml is not None and ml.state not in (_S.CLOSED, _S.FENCED):
            return ml
        opening = self._opening.get(name)
        if opening is None:
            opening = asyncio.ensure_future(self._do_open(name, config or self.config))
            self._opening[name] = opening
            opening.add_done_callback(lambda _: self._opening.pop(name, None))
        return await asyncio.shield(opening)

    async def _do_open(self, name: str, config: ManagedLedgerConfig) -> ManagedLedger:
        ml = ManagedLedger(self, name, config)
        await ml._initialize()
        self._open[name] = ml
        return ml

    def forget(self, ml: ManagedLedger) -> None:
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]

    async def delete(self, name: str) -> None:
        ml = await self.open(name)
        await ml.delete()

    async def close(self) -> None:
        for ml in list(self._open.values()):
            try:
                await ml.close()
            except LedgerError:
                log.debug("closing %s failed", ml.name, exc_info=True)
        self.entry_cache.close()
        await self.ledger_client.close()


def _retrieve(fut: asyncio.Future[None]) -> None:
    """Mark a shielded write's outcome retrieved (its caller may have gone)."""
    if not fut.cancelled():
        fut.exception()


class ManagedLedger:
    def __init__(
        self, factory: ManagedLedgerFactory, name: str, config: ManagedLedgerConfig
    ) -> None:
        self.factory = factory
        self.name = name
        self.config = config
        self.store = factory.store
        self.clock = factory.clock
        self.ledger_client = factory.ledger_client
        self.state = _S.CREATING_LEDGER
        self._path = paths.managed_ledger(name)
        self._info = _Info()
        self._version = -1
        self._info_lock = asyncio.Lock()
        self._current: WriteHandle | None = None
        self._current_created_ms = 0.0
        self._roll_check_at = 1
        self._issued_entries = 0
        self._issued_bytes = 0
        self._closing = False
        self._queued: collections.deque[tuple[bytes, asyncio.Future[Position]]] = (
            collections.deque()
        )
        self._rollover_task: asyncio.Task[None] | None = None
        self._trim_task: asyncio.Task[list[int]] | None = None
        self._trim_again = False
        self._abort_task: asyncio.Future[None] | None = None
        self._cursors: dict[str, ManagedCursor] = {}
        self._opening_cursors: dict[str, asyncio.Future[ManagedCursor]] = {}
        self._non_durable: list[ManagedCursor] = []
        self._readers: dict[int, ReadHandle] = {}
        self._read_aheads: dict[ManagedCursor, ReadAhead[ManagedEntry]] = {}
        self._cache = factory.entry_cache.new_cache(name, self._cache_needed_from)
        self._waiters: list[asyncio.Future[None]] = []
        self.last_confirmed = Position(-1, -1)
        self._max_ledger_id = -1
        """The largest ledger id this managed ledger has had (dropped empty ledgers too)."""
        self._timer = None
        self._fence_reason = ""
        jitter = 1.0 + factory.ledger_client.rng.random() * 0.05
        self._max_rollover_ms = config.max_ledger_rollover_time_ms * jitter
        self._max_size_per_ledger_bytes = config.max_size_per_ledger_bytes

    def __repr__(self) -> str:
        return f"<ManagedLedger {self.name} {self.state.value} last={self.last_confirmed}>"

    # -- open -----------------------------------------------------------------------------------
    async def _initialize(self) -> None:
        got = await self.store.get(self._path)
        if got is None:
            try:
                created = await self.store.put(
                    self._path, _Info().to_bytes(), expected_version=CREATE_ONLY
                )
                self._version = created.stat.version
            except AlreadyExists:
                got = await self.store.get(self._path)
        if got is not None:
            self._info = _Info.from_bytes(got.value)
            self._version = got.stat.version
        ledgers = self._info.ledgers
        ids = [i.ledger_id for i in ledgers]
        if any(a >= b for a, b in itertools.pairwise(ids)):
            log.error("%s: stored ledger ids are not increasing: %s", self.name, ids)
            raise LedgerOutOfOrder(
                f"{self.name}: stored ledger ids {ids} are not increasing; positions would "
                "misorder (written by a version without per-managed-ledger ordering)"
            )
        self._max_ledger_id = max(ids, default=-1)
        empty_last: int | None = None
        """The previous owner's last ledger when it holds nothing: dropped from the list, and
        deleted only once the list without it is stored (deleted first, an opener stopped in
        between would leave a list naming a ledger that no longer exists)."""
        if ledgers:
            last = ledgers[-1]
            try:
                handle: ReadHandle | None = await self.ledger_client.open_ledger(
                    last.ledger_id, recovery=True
                )
            except LedgerNotFound:
                # listed but gone: only an empty last ledger is ever deleted while listed (by
                # an opener of an older version stopped between the delete and the write)
                log.warning("%s: last ledger %d has no metadata: empty", self.name, last.ledger_id)
                handle = None
            if handle is None or handle.last_add_confirmed < 0:
                ledgers.pop()
                empty_last = last.ledger_id
            else:
                last.entries = handle.last_add_confirmed + 1
                last.size = handle.length
                last.timestamp_ms = self.clock.now_ms()  # closed by this recovery
                self._readers[last.ledger_id] = handle
        if ledgers:
            self.last_confirmed = Position(ledgers[-1].ledger_id, ledgers[-1].entries - 1)
        if "terminated" in self._info.properties:
            await self._write_info()  # CAS: claims ownership, fences a concurrent opener
            await self._delete_dropped(empty_last)
            self.state = MANAGED_LEDGER_FSM.next(self.state, _E.TERMINATE)
            await self._recover_cursors()
            return
        current = await self._create_ledger()
        try:
            self._append_ledger(current.ledger_id)
            await self._write_info()
        except (ManagedLedgerFenced, LedgerOutOfOrder):
            await current.abort()
            await self.ledger_client.delete_ledger(current.ledger_id)
            raise
        await self._delete_dropped(empty_last)
        self._install(current)
        if self.last_confirmed.ledger_id < 0:
            self.last_confirmed = Position(current.ledger_id, -1)
        self.state = MANAGED_LEDGER_FSM.next(self.state, _E.LEDGER_CREATED)
        await self._recover_cursors()
        self._schedule_timer()

    async def _recover_cursors(self) -> None:
        for child in await self.store.children(self._path):
            got = await self.store.get(f"{self._path}/{child}")
            try:
                CursorInfo.from_bytes(got.value if got is not None else b"")
            except (ValueError, KeyError, TypeError):
                # not a cursor: a managed ledger whose name extends ours (names must be
                # URL-encoded so this cannot happen), or a corrupt node: never guess
                log.error("%s: child %r is not a cursor; ignored", self.name, child)
                continue
            name = paths.decode_cursor_name(child)
            self._cursors[name] = await ManagedCursor.recover(self, name)

    async def _create_ledger(self) -> WriteHandle:
        return await self.ledger_client.create_ledger(
            custom={"managed-ledger": self.name}, min_ledger_id=self._max_ledger_id
        )

    def _append_ledger(self, ledger_id: int) -> None:
        """Append a new ledger to the list; refuses one that would not sort after every
        ledger this managed ledger has had (``LedgerOutOfOrder``, logged as an error)."""
        if ledger_id <= self._max_ledger_id:
            log.error(
                "%s: refusing new ledger %d: not above ledger %d",
                self.name,
                ledger_id,
                self._max_ledger_id,
            )
            raise LedgerOutOfOrder(
                f"{self.name}: new ledger {ledger_id} is not above ledger "
                f"{self._max_ledger_id}; its entries would sort before older ones"
            )
        self._max_ledger_id = ledger_id
        self._info.ledgers.append(LedgerInfo(ledger_id, 0, 0, self.clock.now_ms()))

    async def _delete_dropped(self, ledger_id: int | None) -> None:
        """Delete an empty ledger the stored list no longer names."""
        if ledger_id is not None:
            await self.ledger_client.delete_ledger(ledger_id)

    async def _write_info(self) -> None:
        """Store the whole current info (CAS on the version the previous write got).

        The write runs in a task of its own, shielded from the caller's cancellation: a
        caller cancelled mid-write (its connection closed) must not leave the store ahead of
        ``_version``, or the next write of this owner would lose its CAS and fence it."""
        write = asyncio.ensure_future(self._write_info_now())
        write.add_done_callback(_retrieve)
        await asyncio.shield(write)

    async def _write_info_now(self) -> None:
        # one write at a time: each writes the whole current info with the version the
        # previous write got, so two writers of this owner never fail each other's CAS
        async with self._info_lock:
            try:
                result = await self.store.put(
                    self._path, self._info.to_bytes(), expected_version=self._version
                )
            except (BadVersion, NotFound):
                self.fence("managed ledger metadata changed by another owner")
                raise ManagedLedgerFenced(f"{self.name}: metadata CAS lost") from None
            self._version = result.stat.version

    @property
    def properties(self) -> dict[str, str]:
        """A copy of the managed ledger's properties (Pulsar's ``getProperties``)."""
        return dict(self._info.properties)

    async def set_property(self, key: str, value: str) -> None:
        """Pulsar's ``asyncSetProperty``: durable in the managed ledger's metadata."""
        if self.state in (_S.CLOSED, _S.FENCED):
            raise self._state_error()
        self._info.properties[key] = value
        await self._write_info()

    def _install(self, handle: WriteHandle) -> None:
        ledger_id = handle.ledger_id
        handle.on_confirmed = functools.partial(self._on_confirmed, ledger_id)
        handle.on_failed = functools.partial(self._on_handle_failed, handle)
        handle.fenced_error = ManagedLedgerFenced
        handle.result_factory = Position
        self._current = handle
        self._current_created_ms = self.clock.monotonic_ms()
        self._issued_entries = 0
        self._issued_bytes = 0
        self._roll_check_at = 1

    # -- add path -------------------------------------------------------------------------------
    def add_nowait(self, payload: bytes) -> asyncio.Future[Position]:
        """Queue an add; the future resolves to its position. Completions are in order:
        when an add's future is done, every earlier add's future is done too (so a caller
        with many adds may wait for the last one only, then read each one's outcome)."""
        state = self.state
        if state is _LEDGER_OPENED:
            # the hot path of every add: the current ledger's handle makes the Position
            handle = self._current
            assert handle is not None
            try:
                fut: asyncio.Future[Position] = handle.add_nowait(payload)
            except LedgerError as exc:
                return self._add_refused(handle, payload, exc)
            self._issued_entries += 1
            self._issued_bytes += len(payload)
            if (
                self._issued_entries >= self._roll_check_at
                or self._issued_bytes >= self._max_size_per_ledger_bytes
            ) and self._should_roll():
                self._start_rollover()
            return fut
        if state in (_S.CLOSING_LEDGER, _S.CREATING_LEDGER):
            if len(self._queued) >= self.config.max_pending_adds:
                raise TooManyPendingAdds(f"{self.name}: {len(self._queued)} adds queued")
            fut = asyncio.get_running_loop().create_future()
            self._queued.append((payload, fut))
            return fut
        raise self._state_error()

    def add_many_nowait(self, payloads: list[bytes]) -> list[asyncio.Future[Position]]:
        """``add_nowait`` of each payload, in order; the adds go to the bookies when this
        returns (one batch per bookie, no loop callback of their own). All or none: when
        the pending adds have no room for every payload, ``TooManyPendingAdds`` is raised
        before any is added (a caller failing the whole batch must not leave part of it
        stored)."""
        pending = (
            self._current.pending_adds
            if self.state is _LEDGER_OPENED and self._current is not None
            else len(self._queued)
        )
        if pending + len(payloads) > self.config.max_pending_adds:
            raise TooManyPendingAdds(
                f"{self.name}: {pending} adds pending, no room for {len(payloads)} more"
            )
        handle = self._current if self.state is _LEDGER_OPENED else None
        if handle is None or not handle.hold_flush():
            return [self.add_nowait(p) for p in payloads]
        try:
            return [self.add_nowait(p) for p in payloads]
        finally:
            handle.release_flush()

    async def add(self, payload: bytes) -> Position:
        return await self.add_nowait(payload)

    def _add_refused(
        self, handle: WriteHandle, payload: bytes, exc: LedgerError
    ) -> asyncio.Future[Position]:
        if isinstance(exc, LedgerFenced):
            self.fence("ledger fenced")
            raise ManagedLedgerFenced(f"{self.name} was taken over by another owner") from None
        if handle.state is HandleState.ERRORED:
            self._start_rollover()
            return self.add_nowait(payload)
        raise exc

    def _on_confirmed(self, ledger_id: int, last_entry_id: int, payloads: list[bytes]) -> None:
        """Batch hook from the current handle: entries confirmed in order."""
        self._cache.put_entries(ledger_id, last_entry_id - len(payloads) + 1, payloads)
        last = self.last_confirmed
        if ledger_id > last.ledger_id or (
            ledger_id == last.ledger_id and last_entry_id > last.entry_id
        ):
            self.last_confirmed = Position(ledger_id, last_entry_id)
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def _on_handle_failed(self, handle: WriteHandle, error: LedgerError) -> None:
        if handle is not self._current:
            return
        if isinstance(error, LedgerFenced):
            self.fence("ledger fenced by another writer")
            return
        if self.state not in (_S.LEDGER_OPENED, _S.CLOSING_LEDGER) or not isinstance(
            error, NotEnoughBookies
        ):
            return
        # a failed ledger (no bookies for too long): its unconfirmed adds go to the next
        # ledger, ahead of those queued since, in their order; the rollover closes it at its
        # last confirmed entry, so none of them is in it (Pulsar re-sends them so too)
        unconfirmed = handle.take_unconfirmed()
        self.factory.ledgers_given_up += 1
        self.factory.adds_moved += len(unconfirmed)
        if unconfirmed:
            log.warning(
                "%s: ledger %d failed (%s); %d unconfirmed adds go to the next ledger",
                self.name,
                handle.ledger_id,
                error,
                len(unconfirmed),
            )
            self._queued.extendleft(reversed(unconfirmed))
        if self.state is _S.LEDGER_OPENED:
            asyncio.get_running_loop().call_soon(self._start_rollover)

    def _should_roll(self) -> bool:
        age_ms = self.clock.monotonic_ms() - self._current_created_ms
        # the time checks are cheap but not free: re-check every 64 adds at most
        self._roll_check_at = self._issued_entries + 64
        if age_ms < self.config.min_ledger_rollover_time_ms or self._issued_entries == 0:
            return False
        if self._issued_entries + 64 > self.config.max_entries_per_ledger:
            self._roll_check_at = self._issued_entries + 1
        return (
            self._issued_entries >= self.config.max_entries_per_ledger
            or self._issued_bytes >= self.config.max_size_per_ledger_bytes
            or age_ms >= self._max_rollover_ms
        )

    def _start_rollover(self) -> None:
        if self.state is not _S.LEDGER_OPENED:
            return
        self.state = MANAGED_LEDGER_FSM.next(self.state, _E.ROLLOVER)
        self._rollover_task = asyncio.ensure_future(self._rollover())

    async def _rollover(self) -> None:
        old = self._current
        assert old is not None
        try:
            try:
                await old.close()
                reader: ReadHandle = old
            except LedgerFenced:
                self.fence("ledger fenced during rollover")
                return
            except LedgerError:
                # the handle failed (no bookies): recover it to fix its end, then move on
                await old.abort()
                reader = await self._retry(lambda: self.ledger_client.open_ledger(old.ledger_id))
            if self.state is not _S.CLOSING_LEDGER:
                return
            info = self._info.ledgers[-1]
            info.entries = reader.last_add_confirmed + 1
            info.size = reader.length
            info.timestamp_ms = self.clock.now_ms()
            self.state = MANAGED_LEDGER_FSM.next(self.state, _E.LEDGER_CLOSED)
            new = await self._retry(self._create_ledger)
            if self.state is not _S.CREATING_LEDGER:
                await new.abort()
                return
            try:
                self._append_ledger(new.ledger_id)
            except LedgerOutOfOrder as exc:
                await new.abort()
                await self.ledger_client.delete_ledger(new.ledger_id)
                self.fence(str(exc))  # the topic unloads; the next open starts afresh
                return
            dropped = None
            if info.entries == 0:
                dropped = self._info.ledgers.pop(-2)
            else:
                self._readers[old.ledger_id] = reader
            await self._write_info()
            if dropped is not None:
                await self.ledger_client.delete_ledger(dropped.ledger_id)
            self._install(new)
            if self.last_confirmed.entry_id < 0:
                self.last_confirmed = Position(new.ledger_id, -1)
            self.state = MANAGED_LEDGER_FSM.next(self.state, _E.LEDGER_CREATED)
            log.info("%s: rolled over to ledger %d", self.name, new.ledger_id)
        except ManagedLedgerFenced:
            pass
        except Exception as exc:
            if self._closing:
                log.warning("%s: closed while rolling over: %r", self.name, exc)
            else:
                log.exception("%s: rollover failed", self.name)
            self._fail_queued(exc)
            return
        finally:
            if self.state is not _S.LEDGER_OPENED and self.state is not _S.CLOSING_LEDGER:
                self._fail_queued(self._state_error())
        queued, self._queued = self._queued, collections.deque()
        for payload, fut in queued:
            if fut.done():
                continue
            try:
                inner = self.add_nowait(payload)
            except LedgerError as exc:
                fut.set_exception(exc)
                continue
            inner.add_done_callback(functools.partial(_chain, fut))
        self.trim_soon()

    async def _retry(self, op: Callable[[], object]) -> WriteHandle:
        delay = 0.1
        while True:
            try:
                return await op()  # type: ignore[misc, no-any-return]
            except (NotEnoughBookies, LedgerError, MetadataError) as exc:
                if (
                    self.state in (_S.CLOSED, _S.FENCED)
                    or self._closing
                    or isinstance(exc, LedgerFenced)
                ):
                    raise
                log.warning("%s: retrying after %r", self.name, exc)
                await self.clock.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _fail_queued(self, exc: BaseException) -> None:
        queued, self._queued = self._queued, collections.deque()
        for _, fut in queued:
            if not fut.done():
                fut.set_exception(exc)

    def _schedule_timer(self) -> None:
        interval_s = self.config.rollover_check_interval_ms / 1000.0
        self._timer = self.clock.call_later(interval_s, self._on_timer)  # type: ignore[assignment]

    def _on_timer(self) -> None:
        if self.state in (_S.CLOSED, _S.FENCED):
            return
        if self.state is _S.LEDGER_OPENED and self._should_roll():
            self._start_rollover()
        self.trim_soon()
        self._schedule_timer()

    # -- state ------------------------------------------------------------------------------------
    def _state_error(self) -> LedgerError:
        if self.state is _S.FENCED:
            return ManagedLedgerFenced(f"{self.name} fenced: {self._fence_reason}")
        if self.state is _S.TERMINATED:
            return ManagedLedgerTerminated(f"{self.name} is terminated")
        return ManagedLedgerClosed(f"{self.name} is {self.state.value}")

    def fence(self, reason: str) -> None:
        """Another owner took over (or our session died): stop writing, fail what is pending."""
        if self.state in (_S.FENCED, _S.CLOSED):
            return
        log.warning("%s fenced: %s", self.name, reason)
        self._fence_reason = reason
        self.state = MANAGED_LEDGER_FSM.next(self.state, _E.FENCE)
        self._fail_queued(self._state_error())
        if self._current is not None:
            self._abort_task = asyncio.ensure_future(self._current.abort())
        if self._timer is not None:
            self._timer.cancel()
        self._cache.close()
        self.factory.forget(self)

    async def close(self) -> None:
        if self.state in (_S.CLOSED, _S.FENCED):
            return
        # a rollover waiting for bookies gives up at its next retry (what it holds fails):
        # a close (an unload, a shutdown) must not wait for bookies that may never return
        self._closing = True
        if self._rollover_task is not None and not self._rollover_task.done():
            await asyncio.wait([self._rollover_task])
        self.state = MANAGED_LEDGER_FSM.next(self.state, _E.CLOSE)
        if self._timer is not None:
            self._timer.cancel()
        for ra in self._read_aheads.values():
            ra.close()
        self._read_aheads.clear()
        for cursor in list(self._cursors.values()):
            await cursor.close()
        if self._current is not None:
            try:
                await self._current.close()
            except LedgerError:
                log.warning("%s: closing the current ledger failed", self.name, exc_info=True)
        self._fail_queued(self._state_error())
        self._cache.close()
        self.factory.forget(self)

    async def terminate(self) -> Position:
        """No more adds, ever (reads continue); returns the last position."""
        if self.state is _S.TERMINATED:
            return self.last_confirmed
        if self._rollover_task is not None and not self._rollover_task.done():
            await asyncio.wait([self._rollover_task])
        self.state = MANAGED_LEDGER_FSM.next(self.state, _E.TERMINATE)
        if self._current is not None:
            await self._current.close()
        self._info.properties["terminated"] = str(self.last_confirmed)
        await self._write_info()
        return self.last_confirmed

    async def truncate(self) -> list[int]:
        """Pulsar's topic truncate: roll the current ledger over, move every durable cursor
        to the end, and delete every ledger before the current one, whatever retention says.
        Returns the deleted ledger ids."""
        if self._rollover_task is not None and not self._rollover_task.done():
            await asyncio.wait([self._rollover_task])
        if self.state is not _S.LEDGER_OPENED or self._current is None:
            raise self._state_error()
        if self._issued_entries > 0:
            self._start_rollover()
            assert self._rollover_task is not None
            await asyncio.wait([self._rollover_task])
            if self.state is not _S.LEDGER_OPENED or self._current is None:
                raise self._state_error()
        current = self._current.ledger_id
        earlier = [i for i in self._info.ledgers if i.ledger_id != current]
        if not earlier:
            return []
        # cursors move past the deleted ledgers only: an add that reached the new ledger
        # meanwhile stays to be consumed
        end = max(Position(i.ledger_id, i.entries - 1) for i in earlier)
        for cursor in list(self._cursors.values()):
            if cursor.mark_delete_position < end:
                await cursor.mark_delete(end)
        gone = {i.ledger_id for i in earlier}
        self._info.ledgers = [i for i in self._info.ledgers if i.ledger_id not in gone]
        await self._write_info()
        if self.last_confirmed.ledger_id in gone:
            self.last_confirmed = Position(current, -1)
        for ledger_id in sorted(gone):
            self._readers.pop(ledger_id, None)
            self._cache.evict_ledger(ledger_id)
            await self.ledger_client.delete_ledger(ledger_id)
        log.info("%s: truncated ledgers %s", self.name, sorted(gone))
        return sorted(gone)

    @property
    def is_terminated(self) -> bool:
        return self.state is _S.TERMINATED or "terminated" in self._info.properties

    async def delete(self) -> None:
        """Delete every ledger, cursor and the metadata of this managed ledger."""
        await self.close()
        for cursor in list(self._cursors.values()):
            await cursor.delete_durable_state()
        for info in self._info.ledgers:
            await self.ledger_client.delete_ledger(info.ledger_id)
        await self.store.delete_recursive(self._path)
        self._cache.clear()

    # -- navigation (also the cursors' LedgerNavigator) ---------------------------------------
    def entries_in(self, ledger_id: int) -> int | None:
        if self._current is not None and ledger_id == self._current.ledger_id:
            return self._current.last_add_confirmed + 1
        for info in self._info.ledgers:
            if info.ledger_id == ledger_id:
                return info.entries
        if self._current is not None and ledger_id > self._current.ledger_id:
            return None
        return 0

    def next_ledger(self, ledger_id: int) -> int | None:
        for info in self._info.ledgers:
            if info.ledger_id > ledger_id:
                return info.ledger_id
        return None

    def ledger_sizes(self) -> list[tuple[int, int, int]]:
        """(ledger id, entries, bytes) of every ledger, the current one as confirmed so far."""
        out = []
        for info in self._info.ledgers:
            if self._current is not None and info.ledger_id == self._current.ledger_id:
                out.append(
                    (info.ledger_id, self._current.last_add_confirmed + 1, self._current.length)
                )
            else:
                out.append((info.ledger_id, info.entries, info.size))
        return out

    @property
    def ledger_ids(self) -> list[int]:
        return [i.ledger_id for i in self._info.ledgers]

    @property
    def first_position(self) -> Position:
        for ledger_id, entries, _ in self.ledger_sizes():
            if entries > 0:
                return Position(ledger_id, 0)
        return self.position_after(self.last_confirmed)

    def position_after(self, pos: Position) -> Position:
        return Position(pos.ledger_id, pos.entry_id + 1)

    def next_valid_position(self, pos: Position) -> Position:
        """``pos`` if it names an entry (or the next one to be written), else the next one."""
        while True:
            entries = self.entries_in(pos.ledger_id)
            if entries is None:
                return pos
            current = self._current is not None and pos.ledger_id == self._current.ledger_id
            if pos.ledger_id in self.ledger_ids and (pos.entry_id < entries or current):
                return pos if pos.entry_id >= 0 else Position(pos.ledger_id, 0)
            following = self.next_ledger(pos.ledger_id)
            if following is None:
                return pos
            pos = Position(following, 0)

    def get_last_confirmed(self) -> Position:
        return self.last_confirmed

    # -- cursors -------------------------------------------------------------------------------
    @property
    def cursors(self) -> dict[str, ManagedCursor]:
        return dict(self._cursors)

    async def open_cursor(self, name: str, initial_position: Position = LATEST) -> ManagedCursor:
        """A durable cursor; an existing one keeps its state (``initial_position`` ignored)."""
        cursor = self._cursors.get(name)
        if cursor is not None:
            return cursor
        if self.state in (_S.CLOSED, _S.FENCED):
            raise self._state_error()
        opening = self._opening_cursors.get(name)
        if opening is not None:  # concurrent opens of one new cursor share its creation
            return await asyncio.shield(opening)
        fut = asyncio.ensure_future(self._create_cursor(name, initial_position))
        self._opening_cursors[name] = fut
        fut.add_done_callback(lambda _: self._opening_cursors.pop(name, None))
        return await asyncio.shield(fut)

    async def _create_cursor(self, name: str, initial_position: Position) -> ManagedCursor:
        md = self._initial_mark_delete(initial_position)
        info = CursorInfo(-1, md)
        try:
            result = await self.store.put(
                paths.managed_cursor(self.name, name), info.to_bytes(), expected_version=CREATE_ONLY
            )
        except AlreadyExists:
            raise CursorAlreadyExists(f"cursor {name} created by another owner") from None
        cursor = ManagedCursor(
            self, name, AckState(md), durable=True, znode_version=result.stat.version
        )
        self._cursors[name] = cursor
        return cursor

    def new_non_durable_cursor(self, start: Position = LATEST, name: str = "") -> ManagedCursor:
        """A reader's cursor: starts at ``start`` (inclusive), never persisted, never trims."""
        if start == LATEST:
            md = self.last_confirmed
        elif start == EARLIEST:
            md = self._initial_mark_delete(EARLIEST)
        else:
            md = Position(start.ledger_id, start.entry_id - 1)
        cursor = ManagedCursor(
            self, name or f"reader-{len(self._non_durable)}", AckState(md), durable=False
        )
        self._non_durable.append(cursor)
        return cursor

    def remove_non_durable_cursor(self, cursor: ManagedCursor) -> None:
        self._close_read_ahead(cursor)
        if cursor in self._non_durable:
            self._non_durable.remove(cursor)

    def _initial_mark_delete(self, initial: Position) -> Position:
        if initial == EARLIEST:
            first = self.first_position
            return Position(first.ledger_id, first.entry_id - 1)
        if initial == LATEST:
            return self.last_confirmed
        return Position(initial.ledger_id, initial.entry_id - 1)

    async def delete_cursor(self, name: str) -> None:
        cursor = self._cursors.pop(name, None)
        if cursor is not None:
            self._close_read_ahead(cursor)
            await cursor.delete_durable_state()
            self.trim_soon()

    def on_cursor_moved(self, cursor: ManagedCursor) -> None:
        self.trim_soon()

    # -- reads --------------------------------------------------------------------------------
    async def read_entries(self, cursor: ManagedCursor, max_entries: int) -> list[ManagedEntry]:
        """Up to ``max_entries`` unacknowledged entries from the cursor's read position.
        Behind the entry cache, through the cursor's read-ahead (bookie reads pipelined)."""
        out: list[ManagedEntry] = []
        pos = self.next_valid_position(cursor.read_position)
        ra = self._read_aheads.get(cursor)
        if (
            self.config.read_ahead_entries > 0
            and max_entries > 0
            and pos <= self.last_confirmed
            and not self._cache.holds(pos.ledger_id, pos.entry_id)
        ):
            if ra is None:
                ra = self._read_aheads[cursor] = self._new_read_ahead()
            return await self._read_ahead_entries(cursor, ra, pos, max_entries)
        if ra is not None:
            ra.clear()  # at the cache again: nothing to read ahead
        while len(out) < max_entries and pos <= self.last_confirmed:
            entries = self.entries_in(pos.ledger_id) or 0
            end = min(entries - 1, pos.entry_id + (max_entries - len(out)) - 1)
            if end < pos.entry_id:
                pos = self.next_valid_position(Position(pos.ledger_id, entries))
                if pos.ledger_id == self.last_confirmed.ledger_id and entries == 0:
                    break
                continue
            got = await self.read_range(pos.ledger_id, pos.entry_id, end)
            if cursor.none_acknowledged_from(pos):
                out += got
            else:
                is_acked = cursor.is_acknowledged
                out += [e for e in got if not is_acked(e.position)]
            pos = self.next_valid_position(Position(pos.ledger_id, end + 1))
        cursor.read_position = pos
        self._evict_cache()
        return out

    def _new_read_ahead(self) -> ReadAhead[ManagedEntry]:
        cfg = self.config
        max_reads = 16
        return ReadAhead(
            self.read_range,
            self._next_range,
            self._entry_bytes,
            max_entries=cfg.read_ahead_entries,
            max_bytes=max(1, cfg.read_ahead_bytes),
            max_reads=max_reads,
            min_chunk_entries=cfg.read_ahead_entries // max_reads,
            budget=self.factory.read_ahead_budget,
        )

    async def _read_ahead_entries(
        self, cursor: ManagedCursor, ra: ReadAhead[ManagedEntry], pos: Position, max_entries: int
    ) -> list[ManagedEntry]:
        out: list[ManagedEntry] = []
        while len(out) < max_entries and pos <= self.last_confirmed:
            got = await ra.read(pos, max_entries - len(out))
            if not got:
                break
            if got[-1].position.ledger_id == pos.ledger_id and cursor.none_acknowledged_from(pos):
                out += got
            else:
                is_acked = cursor.is_acknowledged
                out += [e for e in got if not is_acked(e.position)]
            pos = self.next_valid_position(self.position_after(got[-1].position))
            cursor.read_position = pos
        self._evict_cache()
        return out

    def _next_range(self, pos: Position, n: int) -> tuple[int, int, int] | None:
        """The next readable range of at most ``n`` entries at or after ``pos``."""
        pos = self.next_valid_position(pos)
        last = self.last_confirmed
        while pos <= last:
            entries = self.entries_in(pos.ledger_id) or 0
            end = min(entries - 1, pos.entry_id + n - 1)
            if pos.ledger_id == last.ledger_id:
                end = min(end, last.entry_id)
            if end >= pos.entry_id:
                return pos.ledger_id, pos.entry_id, end
            nxt = self.next_valid_position(Position(pos.ledger_id, max(entries, pos.entry_id + 1)))
            if nxt == pos:
                return None
            pos = nxt
        return None

    def _entry_bytes(self, ledger_id: int) -> int:
        for lid, entries, size in self.ledger_sizes():
            if lid == ledger_id and entries > 0:
                return max(1, size // entries)
        return 1

    def read_ahead_statistics(self, cursor: ManagedCursor) -> ReadAheadStats | None:
        ra = self._read_aheads.get(cursor)
        return ra.statistics() if ra is not None else None

    def _close_read_ahead(self, cursor: ManagedCursor) -> None:
        ra = self._read_aheads.pop(cursor, None)
        if ra is not None:
            ra.close()

    async def read_range(self, ledger_id: int, first: int, last: int) -> list[ManagedEntry]:
        """Entries first..last of one ledger (from the cache when possible)."""
        new = _new_tuple
        cached = [
            new(ManagedEntry, (Position(ledger_id, e), payload))
            for e, payload in enumerate(self._cache.get_range(ledger_id, first, last), first)
        ]
        if len(cached) == last - first + 1:
            return cached
        handle = await self._reader(ledger_id)
        got = await handle.read(first + len(cached), last)
        return cached + [
            new(ManagedEntry, (Position(ledger_id, g.entry_id), g.payload)) for g in got
        ]

    async def _reader(self, ledger_id: int) -> ReadHandle:
        if self._current is not None and ledger_id == self._current.ledger_id:
            return self._current
        handle = self._readers.get(ledger_id)
        if handle is None:
            handle = await self.ledger_client.open_ledger(ledger_id, recovery=False)
            self._readers[ledger_id] = handle
        return handle

    async def wait_for_entries(self, cursor: ManagedCursor, timeout_s: float) -> bool:
        """Tailing: wait until the cursor has something to read; False at the timeout."""
        if cursor.has_more_entries():
            return True
        if self.state in (_S.CLOSED, _S.FENCED):
            raise self._state_error()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return cursor.has_more_entries()
        return cursor.has_more_entries()

    async def read_entries_or_wait(
        self, cursor: ManagedCursor, max_entries: int, timeout_s: float
    ) -> list[ManagedEntry]:
        if not cursor.has_more_entries():
            await self.wait_for_entries(cursor, timeout_s)
        return await self.read_entries(cursor, max_entries)

    async def find_by_publish_time(
        self, publish_time_ms: int, extract: Callable[[bytes], int]
    ) -> Position | None:
        """Binary search over all entries for the first with publish time >= the target."""
        spans = [(lid, n) for lid, n, _ in self.ledger_sizes() if n > 0]
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
            (entry,) = await self.read_range(pos.ledger_id, pos.entry_id, pos.entry_id)
            if extract(entry.payload) >= publish_time_ms:
                hi = mid
            else:
                lo = mid + 1
        return at(lo) if lo < total else None

    # -- trimming ------------------------------------------------------------------------------
    def trim_soon(self) -> None:
        if self.state is not _S.LEDGER_OPENED:
            return
        if self._trim_task is None or self._trim_task.done():
            self._trim_again = False
            self._trim_task = asyncio.ensure_future(self.trim())
            self._trim_task.add_done_callback(self._after_trim)
        else:  # a trigger during a trim may concern what that trim already looked at
            self._trim_again = True

    def _after_trim(self, task: asyncio.Task[list[int]]) -> None:
        if self._trim_again:
            self.trim_soon()

    def _slowest_mark_delete(self) -> Position | None:
        if not self._cursors:
            return None
        return min(c.durable_mark_delete_position for c in self._cursors.values())

    async def trim(self) -> list[int]:
        """Delete consumed ledgers outside retention; returns the deleted ledger ids."""
        if self.state is not _S.LEDGER_OPENED or self._current is None:
            return []
        slowest = self._slowest_mark_delete()
        now = self.clock.now_ms()
        cfg = self.config
        total = sum(i.size for i in self._info.ledgers)
        removed: list[LedgerInfo] = []
        for info in self._info.ledgers[:-1]:
            if info.ledger_id == self._current.ledger_id:
                break
            if slowest is not None and not (
                info.ledger_id < slowest.ledger_id
                or (info.ledger_id == slowest.ledger_id and slowest.entry_id >= info.entries - 1)
            ):
                break
            expired = (
                cfg.retention_time_ms >= 0 and now - info.timestamp_ms >= cfg.retention_time_ms
            )
            over_size = cfg.retention_size_bytes >= 0 and total > cfg.retention_size_bytes
            if not (expired or over_size):
                break
            removed.append(info)
            total -= info.size
        if not removed:
            return []
        gone = {i.ledger_id for i in removed}
        self._info.ledgers = [i for i in self._info.ledgers if i.ledger_id not in gone]
        try:
            await self._write_info()
        except ManagedLedgerFenced:
            return []
        if self.last_confirmed.ledger_id in gone:
            # Every entry is gone (the current ledger is still empty): the last position
            # is the start of the current ledger, so "is there a message after X" says no
            # instead of pointing at an entry nobody can read (Pulsar does the same).
            self.last_confirmed = Position(self._current.ledger_id, -1)
        for ledger_id in sorted(gone):
            self._readers.pop(ledger_id, None)
            self._cache.evict_ledger(ledger_id)
            await self.ledger_client.delete_ledger(ledger_id)
        log.info("%s: trimmed ledgers %s", self.name, sorted(gone))
        return sorted(gone)

    # -- observability --------------------------------------------------------------------------
    def _evict_cache(self) -> None:
        """Entries every active reader has read past are no longer needed."""
        self._cache.evict_unneeded()

    def _cache_needed_from(self) -> Position | None:
        """The slowest active reader's read position. A cursor ``cursor_backlogged_threshold``
        entries or more behind is not active for caching (Pulsar's
        ``managedLedgerCursorBackloggedThreshold``): it does not hold entries for itself
        against an active reader. With no active reader, the slowest cursor's position: as
        Pulsar's cache eviction, which evicts by position only before an active reader, the
        entries a backlogged reader has not read yet are left to the age and budget
        evictions (they were evicted at every read, so a consumer that fell
        ``cursor_backlogged_threshold`` entries behind read every entry from the bookies
        from then on, and fell further behind). None: no cursor at all."""
        threshold = self.config.cursor_backlogged_threshold
        slowest: Position | None = None
        slowest_any: Position | None = None
        for cursor in (*self._cursors.values(), *self._non_durable):
            pos = cursor.read_position
            if slowest_any is None or pos < slowest_any:
                slowest_any = pos
            if slowest is not None and pos >= slowest:
                continue
            if self._entries_from(pos, threshold) < threshold:
                slowest = pos
        return slowest if slowest is not None else slowest_any

    def _entries_from(self, pos: Position, limit: int) -> int:
        """Confirmed entries at ``pos`` and after, counted up to ``limit``."""
        last = self.last_confirmed
        if pos.ledger_id == last.ledger_id:
            return max(0, last.entry_id - pos.entry_id + 1)
        if pos > last:
            return 0
        count = 0
        for ledger_id, entries, _ in reversed(self.ledger_sizes()):
            if ledger_id < pos.ledger_id or count >= limit:
                break
            count += entries - max(0, pos.entry_id) if ledger_id == pos.ledger_id else entries
        return count

    def check_invariants(self) -> None:
        ids = self.ledger_ids
        assert ids == sorted(set(ids)), ids
        if self._current is not None and self.state is _S.LEDGER_OPENED:
            assert ids[-1] == self._current.ledger_id, (ids, self._current.ledger_id)
            self._current.check_invariants()
        for cursor in self._cursors.values():
            assert cursor.mark_delete_position <= self.last_confirmed or (
                cursor.mark_delete_position.entry_id == -1
            ), (cursor, self.last_confirmed)
        self._cache.check_invariants()

    def statistics(self) -> ManagedLedgerStatistics:
        sizes = self.ledger_sizes()
        return ManagedLedgerStatistics(
            name=self.name,
            state=self.state.value,
            ledgers=len(sizes),
            current_ledger_id=self._current.ledger_id if self._current else -1,
            entries=sum(n for _, n, _ in sizes),
            size_bytes=sum(b for _, _, b in sizes),
            last_confirmed=self.last_confirmed,
            pending_adds=self._current.pending_adds if self._current else 0,
            queued_adds=len(self._queued),
            cursors=len(self._cursors),
            cache=self._cache.statistics(),
        )


def _chain(outer: asyncio.Future[Position], inner: asyncio.Future[Position]) -> None:
    if outer.done():
        return
    exc = inner.exception()
    if exc is not None:
        outer.set_exception(exc)
    else:
        outer.set_result(inner.result())


__all__ = [
    "LedgerInfo",
    "ManagedEntry",
    "ManagedLedger",
    "ManagedLedgerConfig",
    "ManagedLedgerFactory",
    "ManagedLedgerStatistics",
]
