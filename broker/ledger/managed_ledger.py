"""Managed ledgers: an append-only log made of a list of ledgers, with named cursors.

Owns: ``ManagedLedgerFactory`` (opens managed ledgers over one ``LedgerClient`` and one
metadata store session, shares the entry cache, the read-ahead budget and the offloaders)
and
``ManagedLedger``, the state of one log and its parts:
- the state: lifecycle (``states.MANAGED_LEDGER_FSM``), the ledger list with the last
  confirmed position and the current ledger's writer (``LedgerList``), the metadata node's
  version; the add path (adds complete in order, each to its ``Position``); open, close,
  fence, terminate, delete; properties;
- ``rollover`` (``Rollover``): the current ledger is full or failed: the next one;
- ``trimming`` (``Trimming``): ledgers nobody needs any more are deleted; truncate;
- ``reads`` (``LedgerReads``): range reads through the entry cache, the forward read loop,
  publish-time search, tailing waits;
- ``cursors`` (``CursorRegistry``): durable and non-durable cursors;
- ``offloading`` (``Offloading``): tiered storage: sealed ledgers offloaded, read back from
  the object store, their bookie copies deleted after the deletion lag.
Metadata: ``zk.paths.managed_ledger(name)`` holds the ledger list (``LedgerList``), changed
only by CAS (``write_info``); a lost CAS means another owner: FENCED.
Open: read the list, recover (fence + close) the last ledger, drop it if empty, create a
new ledger, CAS the list, recover the cursors. Only then adds are accepted.
Invariants: positions of completed adds only grow; readers never see past the last
confirmed position; ledger ids strictly increase along the list (``LedgerList``).
Must not know: topics, producers, subscriptions, message formats, the wire protocol.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from dataclasses import dataclass

from magnetar.broker.bookkeeper.client import LedgerClient
from magnetar.broker.bookkeeper.errors import LedgerNotFound, TooManyPendingAdds
from magnetar.broker.bookkeeper.placement import BookieClientFactory
from magnetar.broker.bookkeeper.read_handle import ReadHandle
from magnetar.broker.bookkeeper.states import HandleState
from magnetar.broker.bookkeeper.write_handle import WriteHandle
from magnetar.broker.ledger.cache import CacheStatistics, EntryCacheManager
from magnetar.broker.ledger.config import ManagedLedgerConfig
from magnetar.broker.ledger.cursor import ManagedCursor
from magnetar.broker.ledger.cursor_registry import CursorRegistry
from magnetar.broker.ledger.errors import (
    LedgerError,
    LedgerFenced,
    ManagedLedgerClosed,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
)
from magnetar.broker.ledger.ledger_list import LedgerList
from magnetar.broker.ledger.offloading import Offloading
from magnetar.broker.ledger.position import LATEST, Position
from magnetar.broker.ledger.read_ahead import ReadAheadBudget
from magnetar.broker.ledger.reads import LedgerReads, ManagedEntry
from magnetar.broker.ledger.rollover import Rollover
from magnetar.broker.ledger.states import (
    MANAGED_LEDGER_FSM,
    ManagedLedgerEvent,
    ManagedLedgerState,
)
from magnetar.broker.ledger.trimming import Trimming
from magnetar.broker.offload.registry import OffloaderRegistry
from magnetar.clock import Clock, SystemClock
from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, BadVersion, NotFound
from magnetar.zk.store import CREATE_ONLY, MetadataStore, SessionEvent

log = logging.getLogger(__name__)

_S = ManagedLedgerState
_E = ManagedLedgerEvent
_LEDGER_OPENED = ManagedLedgerState.LEDGER_OPENED
"""As a module constant: an Enum member lookup costs ~0.2 us (Python 3.11), once per add."""
_ROLLING = (ManagedLedgerState.CLOSING_LEDGER, ManagedLedgerState.CREATING_LEDGER)
_GONE = (ManagedLedgerState.CLOSED, ManagedLedgerState.FENCED)


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
        offloaders: OffloaderRegistry | None = None,
    ) -> None:
        self.store = store
        self.config = config or ManagedLedgerConfig()
        self.clock: Clock = clock or SystemClock()
        self.offloaders = (
            offloaders if offloaders is not None else OffloaderRegistry(clock=self.clock)
        )
        """The broker's offloaders (tiered storage), one per store location."""
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
        if ml is not None and ml.state not in _GONE:
            return ml
        opening = self._opening.get(name)
        if opening is None:
            opening = asyncio.ensure_future(self._do_open(name, config or self.config))
            self._opening[name] = opening
            opening.add_done_callback(lambda _: self._opening.pop(name, None))
        return await asyncio.shield(opening)

    async def _do_open(self, name: str, config: ManagedLedgerConfig) -> ManagedLedger:
        ml = ManagedLedger(self, name, config)
        await ml.load()
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
        await self.offloaders.close()
        await self.ledger_client.close()


def _retrieve(fut: asyncio.Future[None]) -> None:
    """Mark a shielded write's outcome retrieved (its caller may have gone)."""
    if not fut.cancelled():
        fut.exception()


class ManagedLedger:
    """One managed ledger: its state, add path and lifecycle; see the module docstring."""

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
        self.ledgers = LedgerList(name)
        self._path = paths.managed_ledger(name)
        self._version = -1
        self._info_lock = asyncio.Lock()
        self._fence_reason = ""
        self._abort_task: asyncio.Future[None] | None = None
        self.cursors = CursorRegistry(self, self._cursor_moved)
        self._cache = factory.entry_cache.new_cache(name, self.cursors.cache_needed_from)
        self.reads = LedgerReads(self, self._cache, factory.read_ahead_budget)
        self.trimming = Trimming(self)
        self.rollover = Rollover(self)
        self.offloading = Offloading(self)

    def __repr__(self) -> str:
        return f"<ManagedLedger {self.name} {self.state.value} last={self.last_confirmed}>"

    @property
    def last_confirmed(self) -> Position:
        return self.ledgers.last_confirmed

    def get_last_confirmed(self) -> Position:
        return self.ledgers.last_confirmed

    @property
    def current(self) -> WriteHandle | None:
        """The current ledger's writer (the last ledger of the list)."""
        return self.ledgers.current

    def _cursor_moved(self) -> None:
        self.trimming.trim_soon()

    # -- open -----------------------------------------------------------------------------------
    async def load(self) -> None:
        """Open: read the list, recover its last ledger, create this owner's first ledger
        (storing the list claims ownership), recover the cursors."""
        await self._read_list()
        empty_last = await self._recover_last_ledger()
        if "terminated" in self.ledgers.properties:
            await self.write_info()  # CAS: claims ownership, fences a concurrent opener
            if empty_last is not None:
                await self.ledger_client.delete_ledger(empty_last)
            self.state = MANAGED_LEDGER_FSM.next(self.state, _E.TERMINATE)
            await self.cursors.recover()
            self.offloading.offload_soon()
            return
        await self.rollover.first_ledger(empty_last)
        await self.cursors.recover()
        self.rollover.schedule_timer()
        # unfinished attempts of a previous owner, bookie copies past their deletion lag
        self.offloading.offload_soon()

    async def _read_list(self) -> None:
        got = await self.store.get(self._path)
        if got is None:
            try:
                created = await self.store.put(
                    self._path, LedgerList(self.name).to_bytes(), expected_version=CREATE_ONLY
                )
                self._version = created.stat.version
            except AlreadyExists:
                got = await self.store.get(self._path)
        if got is not None:
            self.ledgers = LedgerList.from_bytes(self.name, got.value)
            self._version = got.stat.version

    async def _recover_last_ledger(self) -> int | None:
        """Fence and close the previous owner's last ledger. Returns its id when it holds
        nothing: it is dropped from the list, and deleted only once the list without it is
        stored (deleted first, an opener stopped in between would leave a list naming a
        ledger that no longer exists)."""
        ledgers = self.ledgers.ledgers
        empty_last = None
        if ledgers:
            last = ledgers[-1]
            handle: ReadHandle | None
            try:
                handle = await self.ledger_client.open_ledger(last.ledger_id, recovery=True)
            except LedgerNotFound:
                # listed but gone: only an empty last ledger is ever deleted while listed (by
                # an opener of an older version stopped between the delete and the write)
                log.warning("%s: last ledger %d has no metadata: empty", self.name, last.ledger_id)
                handle = None
            if handle is None or handle.last_add_confirmed < 0:
                log.info("%s: dropping empty last ledger %d", self.name, last.ledger_id)
                ledgers.pop()
                empty_last = last.ledger_id
            else:
                last.entries = handle.last_add_confirmed + 1
                last.size = handle.length
                last.timestamp_ms = self.clock.now_ms()  # closed by this recovery
                self.reads.add_reader(handle)
        if ledgers:
            self.ledgers.last_confirmed = Position(ledgers[-1].ledger_id, ledgers[-1].entries - 1)
        return empty_last

    # -- metadata -------------------------------------------------------------------------------
    async def write_info(self) -> None:
        """Store the whole current list (CAS on the version the previous write got).

        The write runs in a task of its own, shielded from the caller's cancellation: a
        caller cancelled mid-write (its connection closed) must not leave the store ahead of
        ``_version``, or the next write of this owner would lose its CAS and fence it."""
        write = asyncio.ensure_future(self._write_info_now())
        write.add_done_callback(_retrieve)
        await asyncio.shield(write)

    async def _write_info_now(self) -> None:
        # one write at a time: each writes the whole current list with the version the
        # previous write got, so two writers of this owner never fail each other's CAS
        async with self._info_lock:
            try:
                result = await self.store.put(
                    self._path, self.ledgers.to_bytes(), expected_version=self._version
                )
            except (BadVersion, NotFound):
                self.fence("managed ledger metadata changed by another owner")
                raise ManagedLedgerFenced(f"{self.name}: metadata CAS lost") from None
            self._version = result.stat.version

    @property
    def properties(self) -> dict[str, str]:
        """A copy of the managed ledger's properties (Pulsar's ``getProperties``)."""
        return dict(self.ledgers.properties)

    async def set_property(self, key: str, value: str) -> None:
        """Pulsar's ``asyncSetProperty``: durable in the managed ledger's metadata."""
        if self.state in _GONE:
            raise self.state_error()
        self.ledgers.properties[key] = value
        await self.write_info()

    # -- add path -------------------------------------------------------------------------------
    def install(self, handle: WriteHandle) -> None:
        """``handle`` writes the current ledger from now on."""
        handle.on_confirmed = functools.partial(self._on_confirmed, handle.ledger_id)
        handle.on_failed = functools.partial(self.rollover.on_handle_failed, handle)
        handle.fenced_error = ManagedLedgerFenced
        handle.result_factory = Position
        self.ledgers.current = handle
        self.rollover.started(self.clock.monotonic_ms())

    def add_nowait(self, payload: bytes) -> asyncio.Future[Position]:
        """Queue an add; the future resolves to its position. Completions are in order:
        when an add's future is done, every earlier add's future is done too (so a caller
        with many adds may wait for the last one only, then read each one's outcome)."""
        state = self.state
        if state is _LEDGER_OPENED:
            # the hot path of every add: the current ledger's handle makes the Position
            handle = self.ledgers.current
            assert handle is not None
            try:
                fut: asyncio.Future[Position] = handle.add_nowait(payload)
            except LedgerError as exc:
                return self._add_refused(handle, payload, exc)
            roll = self.rollover
            roll.issued_entries += 1
            roll.issued_bytes += len(payload)
            if (
                roll.issued_entries >= roll.check_at or roll.issued_bytes >= roll.max_bytes
            ) and roll.due():
                roll.start()
            return fut
        if state in _ROLLING:
            return self.rollover.queue(payload)
        raise self.state_error()

    def add_many_nowait(self, payloads: list[bytes]) -> list[asyncio.Future[Position]]:
        """``add_nowait`` of each payload, in order; the adds go to the bookies when this
        returns (one batch per bookie, no loop callback of their own). All or none: when
        the pending adds have no room for every payload, ``TooManyPendingAdds`` is raised
        before any is added (a caller failing the whole batch must not leave part of it
        stored)."""
        handle = self.ledgers.current if self.state is _LEDGER_OPENED else None
        pending = handle.pending_adds if handle is not None else self.rollover.queued
        if pending + len(payloads) > self.config.max_pending_adds:
            raise TooManyPendingAdds(
                f"{self.name}: {pending} adds pending, no room for {len(payloads)} more"
            )
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
            self.rollover.start()
            return self.add_nowait(payload)
        raise exc

    def _on_confirmed(self, ledger_id: int, last_entry_id: int, payloads: list[bytes]) -> None:
        """Batch hook from the current handle: entries confirmed in order."""
        self._cache.put_entries(ledger_id, last_entry_id - len(payloads) + 1, payloads)
        ledgers = self.ledgers
        last = ledgers.last_confirmed
        if ledger_id > last.ledger_id or (
            ledger_id == last.ledger_id and last_entry_id > last.entry_id
        ):
            ledgers.last_confirmed = Position(ledger_id, last_entry_id)
        if self.reads.waiting:
            self.reads.wake()

    # -- lifecycle ------------------------------------------------------------------------------
    def state_error(self) -> LedgerError:
        if self.state is _S.FENCED:
            return ManagedLedgerFenced(f"{self.name} fenced: {self._fence_reason}")
        if self.state is _S.TERMINATED:
            return ManagedLedgerTerminated(f"{self.name} is terminated")
        return ManagedLedgerClosed(f"{self.name} is {self.state.value}")

    def fence(self, reason: str) -> None:
        """Another owner took over (or our session died): stop writing, fail what is pending."""
        if self.state in _GONE:
            return
        log.warning("%s fenced: %s", self.name, reason)
        self._fence_reason = reason
        self.state = MANAGED_LEDGER_FSM.next(self.state, _E.FENCE)
        self.rollover.fail_queued(self.state_error())
        current = self.ledgers.current
        if current is not None:
            self._abort_task = asyncio.ensure_future(current.abort())
        self.rollover.stop_timer()
        self.offloading.stop(cancel=False)
        self._cache.close()
        self.factory.forget(self)

    async def close(self) -> None:
        if self.state in _GONE:
            return
        # a rollover waiting for bookies gives up at its next retry (what it holds fails):
        # a close (an unload, a shutdown) must not wait for bookies that may never return
        self.rollover.closing = True
        await self.rollover.wait()
        self.state = MANAGED_LEDGER_FSM.next(self.state, _E.CLOSE)
        self.rollover.stop_timer()
        self.offloading.stop()
        await self.cursors.close()
        current = self.ledgers.current
        if current is not None:
            try:
                await current.close()
            except LedgerError:
                log.warning("%s: closing the current ledger failed", self.name, exc_info=True)
        self.rollover.fail_queued(self.state_error())
        self._cache.close()
        self.factory.forget(self)

    async def terminate(self) -> Position:
        """No more adds, ever (reads continue); returns the last position."""
        if self.state is _S.TERMINATED:
            return self.last_confirmed
        await self.rollover.wait()
        self.state = MANAGED_LEDGER_FSM.next(self.state, _E.TERMINATE)
        current = self.ledgers.current
        if current is not None:
            await current.close()
        self.ledgers.properties["terminated"] = str(self.last_confirmed)
        await self.write_info()
        return self.last_confirmed

    @property
    def is_terminated(self) -> bool:
        return self.state is _S.TERMINATED or "terminated" in self.ledgers.properties

    async def delete(self) -> None:
        """Delete every ledger (and its offloaded copy), cursor and the metadata of this
        managed ledger."""
        await self.close()
        for cursor in self.cursors.values():
            await cursor.delete_durable_state()
        for info in self.ledgers.ledgers:
            await self.ledger_client.delete_ledger(info.ledger_id)
        await self.offloading.delete_objects(self.ledgers.ledgers)
        await self.store.delete_recursive(self._path)
        self._cache.clear()

    # -- Pulsar's ManagedLedger interface, carried out by the parts ------------------------------
    async def open_cursor(self, name: str, initial_position: Position = LATEST) -> ManagedCursor:
        """A durable cursor; an existing one keeps its state (``initial_position`` ignored)."""
        return await self.cursors.open(name, initial_position)

    def new_non_durable_cursor(self, start: Position = LATEST, name: str = "") -> ManagedCursor:
        """A reader's cursor: starts at ``start`` (inclusive), never persisted, never trims."""
        return self.cursors.new_non_durable(start, name)

    async def delete_cursor(self, name: str) -> None:
        await self.cursors.delete(name)

    def ledger_sizes(self) -> list[tuple[int, int, int]]:
        """(ledger id, entries, bytes) of every ledger, the current one as confirmed so far."""
        return self.ledgers.sizes()

    async def read_range(self, ledger_id: int, first: int, last: int) -> list[ManagedEntry]:
        """Entries first..last of one ledger (from the cache when possible)."""
        return await self.reads.read_range(ledger_id, first, last)

    async def truncate(self) -> list[int]:
        """Pulsar's topic truncate (``Trimming.truncate``)."""
        return await self.trimming.truncate()

    # -- observability --------------------------------------------------------------------------
    def check_invariants(self) -> None:
        ids = self.ledgers.ids
        assert ids == sorted(set(ids)), ids
        current = self.ledgers.current
        if current is not None and self.state is _S.LEDGER_OPENED:
            assert ids[-1] == current.ledger_id, (ids, current.ledger_id)
            current.check_invariants()
        self.cursors.check_invariants()
        self.offloading.check_invariants()
        self._cache.check_invariants()

    def statistics(self) -> ManagedLedgerStatistics:
        sizes = self.ledgers.sizes()
        current = self.ledgers.current
        return ManagedLedgerStatistics(
            name=self.name,
            state=self.state.value,
            ledgers=len(sizes),
            current_ledger_id=current.ledger_id if current else -1,
            entries=sum(n for _, n, _ in sizes),
            size_bytes=sum(b for _, _, b in sizes),
            last_confirmed=self.last_confirmed,
            pending_adds=current.pending_adds if current else 0,
            queued_adds=self.rollover.queued,
            cursors=len(self.cursors),
            cache=self._cache.statistics(),
        )


__all__ = [
    "ManagedLedger",
    "ManagedLedgerFactory",
    "ManagedLedgerStatistics",
]
