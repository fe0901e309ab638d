"""A managed ledger's tiered storage: sealed ledgers copied to an object store, recorded, read
back from it, and their bookie copies deleted after the deletion lag.

Owns: ``Offloading``, one managed ledger's part:
- **which policies**: the topic's effective ``offloadPolicies`` (``set_policies``; before
  any is applied, the broker's own from ``ManagedLedgerConfig.offload``);
- **one ledger, crash-safe** (``_offload_ledger``), as Pulsar records it: (1) the attempt's
  UUID is stored in the ledger's ``OffloadContext`` (not complete) with a compare-and-set of
  the ledger list; (2) ``Offloader.offload`` writes and verifies the objects; (3) a second
  compare-and-set marks the context complete with the offload record. A crash or failure
  before (3) leaves the ledger on the bookies, read from there, and at most the objects of a
  recorded attempt: the next run (``_settle``) deletes them (``delete_attempt``) and clears
  the context; a ledger whose earlier attempt is settled gets ``delete_orphans`` once its
  new attempt completes (an attempt's writer fenced mid-upload may have written after the
  settle). Only sealed, non-empty ledgers move, never the last of the list, oldest first,
  one run at a time, stopping at the first failure (retried with back-off);
- **triggers**: automatic when ``managedLedgerOffloadThresholdInBytes`` (newest ledgers
  first, the older ones once the sum passes it, as Pulsar's ``maybeOffload``) or
  ``...ThresholdInSeconds`` (ledgers closed longer ago) says so, checked when a ledger rolls
  over, on the rollover timer and on load (``offload_soon``, coalesced); manual
  (``trigger(until)``: every sealed ledger before ``until``'s ledger; its status is Pulsar's
  ``OffloadProcessStatus``);
- **the deletion lag**: an offloaded ledger's bookie copy is deleted once
  ``managedLedgerOffloadDeletionLagInMillis`` passed since its offload (readers are switched
  to the object store first; the ledger's metadata is deleted, then ``bookkeeperDeleted`` is
  recorded: a crash in between leaves a flag the next run sets, never a leaked ledger);
- **reads** (``routes_to_store``, ``reader``): an offloaded ledger is read from the store
  when the read priority is ``tiered-storage-first`` or its bookie copy is gone, through a
  read handle of the same shape (a few kept open, least recently used closed first; their
  read-ahead draws from the broker-wide read budget); store errors become
  ``OffloadedLedgerUnavailable`` (retriable: the dispatcher backs off and reads again,
  nothing is skipped) or ``OffloadedLedgerCorrupt`` (never wrong bytes);
- **deletion** (``delete_objects``): what retention or topic deletion removes from the list
  is deleted from the store too;
- statistics (Pulsar's ``offloadedStorageSize``, last offload times, errors, latencies).
Must not know: topics, bookies (ledgers are read through handles), the store's library.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import logging
import uuid as uuid_mod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar.broker.bookkeeper.entry import LedgerEntry
from magnetar.broker.bookkeeper.read_handle import ReadHandle
from magnetar.broker.ledger.errors import (
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
)
from magnetar.broker.ledger.host import LedgerParts
from magnetar.broker.ledger.ledger_list import LedgerInfo, OffloadContext
from magnetar.broker.ledger.position import Position
from magnetar.broker.ledger.states import ManagedLedgerState
from magnetar.broker.offload import (
    EffectiveOffloadPolicies,
    InvalidOffloadPolicies,
    OffloadCorrupt,
    OffloadedReadHandle,
    OffloadError,
    OffloadPolicies,
    ReadPriority,
)
from magnetar.broker.offload.jobs import LocatedLedger
from magnetar.broker.offload.reader import ReadBudget
from magnetar.broker.offload.registry import OffloaderRegistry, policies_for_location
from magnetar.clock import Clock, TimerHandle

log = logging.getLogger(__name__)

_GONE = (ManagedLedgerState.CLOSED, ManagedLedgerState.FENCED)
STORE_READERS_MAX = 8
"""Offloaded ledgers kept open for reading per managed ledger (each holds its index and up
to its read-ahead): the least recently used idle one is closed beyond this (a reader that
finds its handle closed so opens a new one)."""
RETRY_FIRST_MS = 1_000
RETRY_MAX_MS = 30_000
"""A failed automatic offload is tried again after this back-off, doubling per failure."""
DELETE_ATTEMPTS = 3


class OffloadInProgress(ManagedLedgerError):
    """A manual offload of this managed ledger is running (Pulsar answers 409)."""


class OffloadNotConfigured(ManagedLedgerError):
    """No offload driver applies to this managed ledger."""


class InvalidOffloadPosition(ManagedLedgerError):
    """``trigger(until)`` named a position this managed ledger does not have."""


class OffloadedLedgerUnavailable(ManagedLedgerError):
    """An offloaded ledger could not be read from the object store (``retriable`` when the
    store may answer later: the reader waits and reads again)."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class OffloadedLedgerCorrupt(ManagedLedgerError):
    """What the object store holds for an offloaded ledger does not verify against the
    checksums written with it: no entry of it is returned."""


class OffloadStatus(enum.Enum):
    """Pulsar's ``LongRunningProcessStatus.Status``."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


@dataclass(frozen=True, slots=True)
class OffloadProcessStatus:
    """Pulsar's ``OffloadProcessStatus``: the last manual offload of a topic."""

    status: OffloadStatus = OffloadStatus.NOT_RUN
    last_error: str = ""
    first_unoffloaded: Position | None = None

    def to_json(self) -> dict[str, Any]:
        first = self.first_unoffloaded
        return {
            "status": self.status.value,
            "lastError": self.last_error,
            "firstUnoffloadedMessage": (
                {"ledgerId": first.ledger_id, "entryId": first.entry_id, "partitionIndex": -1}
                if first is not None
                else {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
            ),
        }


@dataclass(frozen=True, slots=True)
class OffloadStatistics:
    offloaded_ledgers: int
    offloaded_size_bytes: int
    """Bytes of the ledgers with a complete offload (Pulsar's ``offloadedStorageSize``)."""
    bookie_deleted_ledgers: int
    running: bool
    offloads_completed: int
    offloads_failed: int
    offloaded_bytes_total: int
    offload_ms_total: float
    last_offload_ledger_id: int
    last_offload_success_ms: int
    last_offload_failure_ms: int
    last_error: str
    last_offload_bytes_per_s: float
    store_reads: int
    store_read_entries: int
    store_read_bytes: int
    store_read_errors: int
    store_read_ms_total: float
    store_opens: int
    store_open_ms_total: float
    objects_deleted: int
    bookie_copies_deleted: int
    status: OffloadProcessStatus


class ReadsPart(Protocol):
    """What offloading needs of the managed ledger's reads (``LedgerReads``)."""

    async def bookie_reader(self, ledger_id: int) -> ReadHandle: ...

    def drop_bookie_reader(self, ledger_id: int) -> None: ...


class ReadBudgetOwner(Protocol):
    """The factory: its broker-wide read budget and offloaders."""

    @property
    def read_ahead_budget(self) -> ReadBudget: ...

    @property
    def offloaders(self) -> OffloaderRegistry: ...


class OffloadingHost(LedgerParts, Protocol):
    """What offloading needs of its managed ledger (``ManagedLedger`` is one)."""

    @property
    def state(self) -> ManagedLedgerState: ...

    @property
    def reads(self) -> ReadsPart: ...

    @property
    def factory(self) -> ReadBudgetOwner: ...

    async def write_info(self) -> None: ...


class StoreReader:
    """A ``ReadHandle`` over an offloaded ledger's read handle: the store's errors become the
    managed ledger's, and reads are counted."""

    __slots__ = ("_handle", "_owner", "in_flight")

    def __init__(self, handle: OffloadedReadHandle, owner: Offloading) -> None:
        self._handle = handle
        self._owner = owner
        self.in_flight = 0

    def __repr__(self) -> str:
        return f"<StoreReader {self._handle!r} in_flight={self.in_flight}>"

    @property
    def ledger_id(self) -> int:
        return self._handle.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    @property
    def length(self) -> int:
        return self._handle.length

    @property
    def is_closed(self) -> bool:
        return True

    async def read(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        owner = self._owner
        self.in_flight += 1
        started = owner.clock.monotonic_ms()
        try:
            if self._handle.released:  # closed as least recently used since it was handed out
                self._handle = await owner.reopen(self)
            got = await self._handle.read(first_entry_id, last_entry_id)
        except OffloadError as exc:
            owner.counts.store_read_errors += 1
            raise owner.translate(self.ledger_id, exc) from exc
        finally:
            self.in_flight -= 1
        counts = owner.counts
        counts.store_reads += 1
        counts.store_read_entries += len(got)
        counts.store_read_bytes += sum(len(e.payload) for e in got)
        counts.store_read_ms_total += owner.clock.monotonic_ms() - started
        return got

    @property
    def released(self) -> bool:
        return self._handle.released

    def close_now(self) -> None:
        self._handle.close_now()


@dataclass(slots=True)
class _Counts:
    offloads_completed: int = 0
    offloads_failed: int = 0
    offloaded_bytes_total: int = 0
    offload_ms_total: float = 0.0
    last_offload_ledger_id: int = -1
    last_offload_success_ms: int = 0
    last_offload_failure_ms: int = 0
    last_error: str = ""
    last_offload_bytes_per_s: float = 0.0
    store_reads: int = 0
    store_read_entries: int = 0
    store_read_bytes: int = 0
    store_read_errors: int = 0
    store_read_ms_total: float = 0.0
    store_opens: int = 0
    store_open_ms_total: float = 0.0
    objects_deleted: int = 0
    bookie_copies_deleted: int = 0


class Offloading:
    """Tiered storage of one managed ledger (see the module docstring)."""

    def __init__(self, host: OffloadingHost) -> None:
        self._host = host
        self._applied: EffectiveOffloadPolicies | None = None
        self._explicit = False
        self._default: EffectiveOffloadPolicies | None = None
        self._default_of: OffloadPolicies | None = None
        self.counts = _Counts()
        self._status = OffloadProcessStatus()
        self._lock = asyncio.Lock()
        self._auto: asyncio.Task[None] | None = None
        self._again = False
        self._manual: asyncio.Task[Position] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retry_at_ms = 0.0
        self._retry_ms = 0.0
        self._timer: TimerHandle | None = None
        self._timer_due_ms = 0.0
        self._readers: collections.OrderedDict[int, StoreReader] = collections.OrderedDict()
        self._opening: dict[int, asyncio.Future[StoreReader]] = {}
        self._bookie_gone: set[int] = set()
        """Offloaded ledgers whose bookie copy is known gone (deleted, or found missing)."""
        self._settled: set[int] = set()
        """Ledgers whose earlier attempt was cleaned up: orphans are swept once they complete."""
        self._stopped = False

    def __repr__(self) -> str:
        return (
            f"<Offloading {self._host.name} running={self.running} "
            f"readers={sorted(self._readers)} status={self._status.status.value}>"
        )

    @property
    def clock(self) -> Clock:
        return self._host.clock

    # -- policies ---------------------------------------------------------------------------
    @property
    def policies(self) -> EffectiveOffloadPolicies | None:
        """The policies in force: those applied to the topic, else the broker's."""
        if self._explicit:
            return self._applied
        configured = self._host.config.offload
        if configured is not self._default_of:
            self._default_of = configured
            try:
                self._default = configured.resolve()
            except InvalidOffloadPolicies as exc:
                log.error("%s: the broker's offload settings do not work: %s", self._host.name, exc)
                self._default = None
        return self._default

    def set_policies(self, policies: EffectiveOffloadPolicies | None) -> None:
        """The topic's effective offload policies (None: offloading off for it)."""
        if self._explicit and policies == self._applied:
            return
        self._applied = policies
        self._explicit = True
        self.offload_soon()

    @property
    def read_priority(self) -> ReadPriority:
        p = self.policies
        return p.read_priority if p is not None else ReadPriority.TIERED_STORAGE_FIRST

    def _deletion_lag_ms(self) -> int | None:
        """None: the bookie copies are kept (no policies say how long to wait)."""
        p = self.policies
        if p is not None:
            return p.deletion_lag_ms
        d = self._default
        return d.deletion_lag_ms if d is not None else None

    # -- triggers ---------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return any(t is not None and not t.done() for t in (self._auto, self._manual))

    def offload_soon(self) -> None:
        """Check the thresholds and the deletion lag in the background (coalesced)."""
        if self._stopped or self._host.state in _GONE:
            return
        if self._auto is None or self._auto.done():
            self._again = False
            self._auto = self._spawn(self._auto_run())
            self._auto.add_done_callback(self._after_auto)
        else:
            self._again = True

    def _after_auto(self, task: asyncio.Task[None]) -> None:
        if self._again and not self._stopped:
            self.offload_soon()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def idle(self) -> None:
        """Return once no offload run (automatic or manual) is under way."""
        while True:
            pending = [t for t in (self._auto, self._manual) if t is not None and not t.done()]
            if not pending:
                return
            await asyncio.wait(pending)

    def trigger(self, until: Position) -> None:
        """Pulsar's ``PUT .../offload``: offload every sealed ledger before ``until``'s
        ledger, in the background; ``status()`` follows it. ``OffloadInProgress`` while a
        manual offload runs, ``OffloadNotConfigured`` without a driver,
        ``InvalidOffloadPosition`` for a position this managed ledger does not have."""
        if self._manual is not None and not self._manual.done():
            raise OffloadInProgress(f"{self._host.name}: an offload is already running")
        if self.policies is None:
            raise OffloadNotConfigured(
                f"{self._host.name}: no offload driver is configured (offloadPolicies, or "
                "managedLedgerOffloadDriver in broker.conf)"
            )
        self._check_position(until)
        self._status = OffloadProcessStatus(OffloadStatus.RUNNING)
        self._manual = self._spawn(self._manual_run(until))

    async def offload_prefix(self, until: Position) -> Position:
        """``trigger(until)`` and wait: returns the first position not offloaded."""
        self.trigger(until)
        task = self._manual
        assert task is not None
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # the managed ledger closed under it, not our caller
                raise ManagedLedgerClosed(f"{self._host.name} closed during the offload") from None
            raise

    def status(self) -> OffloadProcessStatus:
        return self._status

    def _check_position(self, until: Position) -> None:
        ledgers = self._host.ledgers
        end = ledgers.position_after(ledgers.last_confirmed)
        valid = until.ledger_id in ledgers.ids and (
            until.entry_id == 0 or (until.entry_id >= 0 and until <= end)  # a ledger's first
        )  # position is valid even while it is empty (Pulsar's rule for the current ledger)
        if not valid:
            raise InvalidOffloadPosition(f"Invalid position for offload: {until}")

    async def _manual_run(self, until: Position) -> Position:
        try:
            async with self._lock:
                policies = self.policies
                if policies is None:
                    raise OffloadNotConfigured(f"{self._host.name}: offloading was turned off")
                await self._settle(policies)
                chosen = [
                    i for i in self._sealed() if i.ledger_id < until.ledger_id and not i.offloaded
                ]
                for info in chosen:
                    await self._offload_ledger(info, policies)
                await self._delete_due_bookie_copies()
                self._arm_deletion_timer()
                result = Position(until.ledger_id, 0)  # Pulsar's first unoffloaded position
        except asyncio.CancelledError:
            self._status = OffloadProcessStatus(OffloadStatus.ERROR, "offload interrupted")
            raise
        except Exception as exc:
            self._status = OffloadProcessStatus(OffloadStatus.ERROR, str(exc))
            raise
        self._status = OffloadProcessStatus(OffloadStatus.SUCCESS, "", result)
        return result

    async def _auto_run(self) -> None:
        try:
            async with self._lock:
                if self._host.state in _GONE:
                    return
                policies = self.policies
                await self._delete_due_bookie_copies()
                backing_off_ms = self._retry_at_ms - self.clock.monotonic_ms()
                if policies is not None and backing_off_ms > 0:
                    self._arm(backing_off_ms)  # after a failure: not before the back-off ends
                elif policies is not None:
                    await self._settle(policies)
                    for info in self._by_threshold(policies):
                        await self._offload_ledger(info, policies)
                    await self._delete_due_bookie_copies()
                    self._retry_ms = 0.0
                self._arm_deletion_timer()
        except ManagedLedgerFenced:
            return
        except Exception as exc:
            if self._stopped or self._host.state in _GONE:
                return
            self._retry_ms = min(RETRY_MAX_MS, max(RETRY_FIRST_MS, self._retry_ms * 2))
            self._retry_at_ms = self.clock.monotonic_ms() + self._retry_ms
            log.warning(
                "%s: automatic offload failed (%s: %s); trying again in %.1f s",
                self._host.name,
                type(exc).__name__,
                exc,
                self._retry_ms / 1000,
            )
            self._arm(self._retry_ms)

    # -- choosing ---------------------------------------------------------------------------
    def _sealed(self) -> list[LedgerInfo]:
        """Ledgers that may move: closed (never the last of the list), not empty, oldest
        first."""
        ledgers = self._host.ledgers.ledgers
        return [i for i in ledgers[:-1] if i.entries > 0]

    def _by_threshold(self, policies: EffectiveOffloadPolicies) -> list[LedgerInfo]:
        """Pulsar's ``maybeOffload``: from the newest ledger back, once the bytes summed pass
        ``threshold_bytes`` every older ledger moves; and every ledger closed more than
        ``threshold_seconds`` ago. Oldest first."""
        size_threshold = policies.threshold_bytes
        age_threshold = policies.threshold_seconds
        if size_threshold is None and age_threshold is None:
            return []
        now = self.clock.now_ms()
        sealed = {i.ledger_id for i in self._sealed()}
        chosen: list[LedgerInfo] = []
        summed = 0
        for info, (_, _, size) in zip(
            reversed(self._host.ledgers.ledgers), reversed(self._host.ledgers.sizes()), strict=True
        ):
            summed += size
            if info.ledger_id not in sealed or info.offloaded:
                continue
            over_size = size_threshold is not None and summed > size_threshold
            too_old = age_threshold is not None and (now - info.timestamp_ms > age_threshold * 1000)
            if over_size or too_old:
                chosen.append(info)
        chosen.reverse()
        return chosen

    # -- one ledger -------------------------------------------------------------------------
    async def _settle(self, policies: EffectiveOffloadPolicies) -> None:
        """Attempts recorded and never completed (failed, crashed, fenced): their objects
        are deleted and their contexts cleared."""
        for info in list(self._host.ledgers.ledgers):
            ctx = info.offload
            if ctx is None or ctx.complete:
                continue
            offloader = self._host.factory.offloaders.for_policies(
                self._policies_of_context(ctx, policies)
            )
            await offloader.delete_attempt(info.ledger_id, ctx.uid)
            self.counts.objects_deleted += 1
            if info.offload is ctx:
                info.offload = None
                await self._host.write_info()
            self._settled.add(info.ledger_id)
            log.info(
                "%s: ledger %d: the unfinished offload attempt %s was cleaned up",
                self._host.name,
                info.ledger_id,
                ctx.uid,
            )

    def _policies_of_context(
        self, ctx: OffloadContext, policies: EffectiveOffloadPolicies
    ) -> EffectiveOffloadPolicies:
        """The policies whose store an attempt wrote to (the policies may have changed)."""
        if dict(ctx.driver_metadata) == policies.driver_metadata():
            return policies
        return policies_for_location(ctx.driver_name, ctx.driver_metadata, policies)

    async def _offload_ledger(self, info: LedgerInfo, policies: EffectiveOffloadPolicies) -> None:
        host = self._host
        ledger_id = info.ledger_id
        registry = host.factory.offloaders
        offloader = registry.for_policies(policies)
        async with registry.slots(policies):
            if host.ledgers.info(ledger_id) is not info or info.offload is not None:
                return  # trimmed, or another run moved it meanwhile
            uid = uuid_mod.uuid4()
            started_ms = self.clock.monotonic_ms()
            info.offload = OffloadContext(
                uid,
                timestamp_ms=self.clock.now_ms(),
                driver_name=policies.driver.value,
                driver_metadata=policies.driver_metadata(),
            )
            await host.write_info()  # (1) the attempt is recorded before any object exists
            try:
                source = await host.reads.bookie_reader(ledger_id)
                where = await host.ledger_client.located(source) if offloader.isolated else None
                located = LocatedLedger(*where) if where is not None else None
                record = await offloader.offload(
                    source,
                    uid,
                    {"ManagedLedgerName": host.name, "LedgerId": str(ledger_id)},
                    located,
                )
            except BaseException as exc:
                self._failed(ledger_id, exc)
                raise
            if host.ledgers.info(ledger_id) is not info or (
                info.offload is None or info.offload.uid != uid
            ):
                # trimmed while it was uploaded: nothing records the objects, so they go
                await offloader.delete(record)
                return
            info.offload = OffloadContext(
                uid,
                complete=True,
                timestamp_ms=self.clock.now_ms(),
                driver_name=policies.driver.value,
                driver_metadata=policies.driver_metadata(),
                record=record,
            )
            try:
                await host.write_info()  # (2) complete: readers may use the store from now
            except BaseException as exc:
                self._failed(ledger_id, exc)
                raise
            elapsed_ms = self.clock.monotonic_ms() - started_ms
            c = self.counts
            c.offloads_completed += 1
            c.offloaded_bytes_total += info.size
            c.offload_ms_total += elapsed_ms
            c.last_offload_ledger_id = ledger_id
            c.last_offload_success_ms = self.clock.now_ms()
            c.last_offload_bytes_per_s = info.size * 1000.0 / max(elapsed_ms, 1.0)
            log.info(
                "%s: ledger %d offloaded (%d entries, %d bytes) to %s in %.0f ms",
                host.name,
                ledger_id,
                info.entries,
                info.size,
                offloader.store.describe(),
                elapsed_ms,
            )
        if ledger_id in self._settled:
            self._settled.discard(ledger_id)
            try:
                await offloader.delete_orphans(ledger_id, keep=[uid])
            except OffloadError as exc:
                log.warning("%s: ledger %d: orphan sweep failed: %s", host.name, ledger_id, exc)

    def _failed(self, ledger_id: int, exc: BaseException) -> None:
        c = self.counts
        c.offloads_failed += 1
        c.last_offload_failure_ms = self.clock.now_ms()
        c.last_error = f"ledger {ledger_id}: {type(exc).__name__}: {exc}"

    # -- the deletion lag -------------------------------------------------------------------
    def _due_for_deletion(self) -> tuple[list[LedgerInfo], float | None]:
        """Offloaded ledgers whose bookie copy may go now, and in how many ms the next one
        may (None: none waits)."""
        lag = self._deletion_lag_ms()
        if lag is None:
            return [], None
        now = self.clock.now_ms()
        due: list[LedgerInfo] = []
        wait: float | None = None
        for info in self._host.ledgers.ledgers[:-1]:
            ctx = info.offload
            if ctx is None or not ctx.complete or ctx.bookkeeper_deleted:
                continue
            left = ctx.timestamp_ms + lag - now
            if left <= 0:
                due.append(info)
            else:
                wait = left if wait is None else min(wait, left)
        return due, wait

    async def _delete_due_bookie_copies(self) -> list[int]:
        host = self._host
        due, _ = self._due_for_deletion()
        deleted: list[int] = []
        for info in due:
            ctx = info.offload
            if host.ledgers.info(info.ledger_id) is not info or ctx is None:
                continue
            ledger_id = info.ledger_id
            # readers go to the store from now; then the bookies' copy goes; then the flag
            self._bookie_gone.add(ledger_id)
            host.reads.drop_bookie_reader(ledger_id)
            await host.ledger_client.delete_ledger(ledger_id)
            if info.offload is ctx:
                info.offload = dataclasses.replace(ctx, bookkeeper_deleted=True)
                await host.write_info()
            self.counts.bookie_copies_deleted += 1
            deleted.append(ledger_id)
            log.info(
                "%s: ledger %d: bookie copy deleted (offloaded %d ms ago)",
                host.name,
                ledger_id,
                self.clock.now_ms() - ctx.timestamp_ms,
            )
        return deleted

    def _arm_deletion_timer(self) -> None:
        _, wait = self._due_for_deletion()
        if wait is not None:
            self._arm(wait)

    def _arm(self, delay_ms: float) -> None:
        """One timer: the earliest of what is asked for."""
        due = self.clock.monotonic_ms() + delay_ms
        if self._timer is not None and self._timer_due_ms <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due_ms = due
        self._timer = self.clock.call_later(delay_ms / 1000.0, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.offload_soon()

    # -- reads ------------------------------------------------------------------------------
    def routes_to_store(self, ledger_id: int) -> bool:
        """Whether reads of ``ledger_id`` go to the object store."""
        info = self._host.ledgers.info(ledger_id)
        if info is None or not info.offloaded:
            return False
        return (
            info.bookkeeper_deleted
            or ledger_id in self._bookie_gone
            or self.read_priority is ReadPriority.TIERED_STORAGE_FIRST
        )

    def has_copy(self, ledger_id: int) -> bool:
        info = self._host.ledgers.info(ledger_id)
        return info is not None and info.offloaded

    def bookie_copy_gone(self, ledger_id: int) -> None:
        """Its bookie copy was found missing (deleted by a run that crashed before it
        recorded so): reads go to the store."""
        self._bookie_gone.add(ledger_id)

    async def reader(self, ledger_id: int) -> StoreReader:
        """A read handle on the offloaded copy of ``ledger_id`` (opened once, kept a while)."""
        got = self._readers.get(ledger_id)
        if got is not None:
            self._readers.move_to_end(ledger_id)
            return got
        opening = self._opening.get(ledger_id)
        if opening is None:
            opening = asyncio.ensure_future(self._open_reader(ledger_id))
            self._opening[ledger_id] = opening
            opening.add_done_callback(lambda _: self._opening.pop(ledger_id, None))
        return await asyncio.shield(opening)

    async def _open_reader(self, ledger_id: int) -> StoreReader:
        reader = StoreReader(await self._open_handle(ledger_id), self)
        self._readers[ledger_id] = reader
        self._evict()
        return reader

    async def reopen(self, reader: StoreReader) -> OffloadedReadHandle:
        """A fresh handle for ``reader``, whose handle was closed; it is kept open again."""
        handle = await self._open_handle(reader.ledger_id)
        self._readers[reader.ledger_id] = reader
        self._readers.move_to_end(reader.ledger_id)
        self._evict()
        return handle

    async def _open_handle(self, ledger_id: int) -> OffloadedReadHandle:
        info = self._host.ledgers.info(ledger_id)
        if info is None or info.offload is None or info.offload.record is None:
            raise OffloadedLedgerUnavailable(
                f"{self._host.name}: ledger {ledger_id} has no offloaded copy", retriable=False
            )
        record = info.offload.record
        started = self.clock.monotonic_ms()
        try:
            offloader = self._host.factory.offloaders.for_record(record, self.policies)
            handle = await offloader.open(record, read_budget=self._host.factory.read_ahead_budget)
        except OffloadError as exc:
            self.counts.store_read_errors += 1
            raise self.translate(ledger_id, exc) from exc
        self.counts.store_opens += 1
        self.counts.store_open_ms_total += self.clock.monotonic_ms() - started
        return handle

    def _evict(self) -> None:
        while len(self._readers) > STORE_READERS_MAX:
            idle = next((lid for lid, r in self._readers.items() if r.in_flight == 0), None)
            if idle is None:
                return
            self._readers.pop(idle).close_now()  # its next read opens a new handle

    def forget(self, ledger_id: int) -> None:
        """The ledger left the list: its store reader closes."""
        reader = self._readers.pop(ledger_id, None)
        if reader is not None:
            reader.close_now()
        self._bookie_gone.discard(ledger_id)
        self._settled.discard(ledger_id)

    def translate(self, ledger_id: int, exc: OffloadError) -> ManagedLedgerError:
        where = f"{self._host.name}: offloaded ledger {ledger_id}"
        if isinstance(exc, OffloadCorrupt):
            log.error("%s does not verify: %s", where, exc)
            return OffloadedLedgerCorrupt(f"{where} does not verify (checksum): {exc}")
        return OffloadedLedgerUnavailable(
            f"{where} could not be read from the object store: {exc}", retriable=exc.retriable
        )

    # -- deletion ---------------------------------------------------------------------------
    async def delete_objects(self, infos: Iterable[LedgerInfo]) -> None:
        """Delete what ``infos`` (gone from the list) hold in the store: the recorded
        objects of a complete offload, the objects an unfinished attempt may have left.
        Retried a few times; what still fails is logged with its keys."""
        for info in infos:
            self.forget(info.ledger_id)
            ctx = info.offload
            if ctx is None:
                continue
            for attempt in range(1, DELETE_ATTEMPTS + 1):
                try:
                    if ctx.record is not None:
                        offloader = self._host.factory.offloaders.for_record(
                            ctx.record, self.policies
                        )
                        await offloader.delete(ctx.record)
                    else:
                        policies = self.policies or self._default
                        if policies is None:
                            break
                        offloader = self._host.factory.offloaders.for_policies(
                            self._policies_of_context(ctx, policies)
                        )
                        await offloader.delete_attempt(info.ledger_id, ctx.uid)
                    self.counts.objects_deleted += 1
                    break
                except OffloadError as exc:
                    if attempt == DELETE_ATTEMPTS or not exc.retriable:
                        log.error(
                            "%s: ledger %d: its offloaded objects (attempt %s) could not be "
                            "deleted, they are orphans now: %s",
                            self._host.name,
                            info.ledger_id,
                            ctx.uid,
                            exc,
                        )
                        break
                    await self.clock.sleep(RETRY_FIRST_MS * attempt / 1000.0)

    # -- lifecycle --------------------------------------------------------------------------
    def stop(self, *, cancel: bool = True) -> None:
        """The managed ledger closes (``cancel``: a running offload stops now) or was fenced
        (a running offload fails at its next metadata write, with that error): no new run
        starts, readers close."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if cancel:
            for task in list(self._tasks):
                task.cancel()
        for reader in self._readers.values():
            reader.close_now()
        self._readers.clear()

    # -- observability ----------------------------------------------------------------------
    def statistics(self) -> OffloadStatistics:
        c = self.counts
        infos = self._host.ledgers.ledgers
        return OffloadStatistics(
            offloaded_ledgers=sum(1 for i in infos if i.offloaded),
            offloaded_size_bytes=sum(i.size for i in infos if i.offloaded),
            bookie_deleted_ledgers=sum(1 for i in infos if i.bookkeeper_deleted),
            running=self.running,
            offloads_completed=c.offloads_completed,
            offloads_failed=c.offloads_failed,
            offloaded_bytes_total=c.offloaded_bytes_total,
            offload_ms_total=c.offload_ms_total,
            last_offload_ledger_id=c.last_offload_ledger_id,
            last_offload_success_ms=c.last_offload_success_ms,
            last_offload_failure_ms=c.last_offload_failure_ms,
            last_error=c.last_error,
            last_offload_bytes_per_s=c.last_offload_bytes_per_s,
            store_reads=c.store_reads,
            store_read_entries=c.store_read_entries,
            store_read_bytes=c.store_read_bytes,
            store_read_errors=c.store_read_errors,
            store_read_ms_total=c.store_read_ms_total,
            store_opens=c.store_opens,
            store_open_ms_total=c.store_open_ms_total,
            objects_deleted=c.objects_deleted,
            bookie_copies_deleted=c.bookie_copies_deleted,
            status=self._status,
        )

    def check_invariants(self) -> None:
        for info in self._host.ledgers.ledgers:
            ctx = info.offload
            if ctx is not None and ctx.complete:
                assert ctx.record is not None and ctx.record.ledger_id == info.ledger_id
        current = self._host.ledgers.current
        if current is not None:
            last = self._host.ledgers.info(current.ledger_id)
            assert last is None or last.offload is None, "the current ledger is never offloaded"
        assert len(self._readers) <= STORE_READERS_MAX or all(
            r.in_flight for r in self._readers.values()
        )


__all__ = [
    "STORE_READERS_MAX",
    "InvalidOffloadPosition",
    "OffloadInProgress",
    "OffloadNotConfigured",
    "OffloadProcessStatus",
    "OffloadStatistics",
    "OffloadStatus",
    "OffloadedLedgerCorrupt",
    "OffloadedLedgerUnavailable",
    "Offloading",
    "OffloadingHost",
    "StoreReader",
]
