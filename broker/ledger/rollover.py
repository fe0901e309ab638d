"""A managed ledger's rollover: closing the current ledger and opening the next.

Owns: ``Rollover``: when the current ledger is full (``max_entries_per_ledger``,
``max_size_per_ledger_bytes``, ``max_ledger_rollover_time_ms`` with a 0-5 % jitter so many
ledgers do not roll together; never before ``min_ledger_rollover_time_ms``) or its writer
failed, it closes it (a failed writer's ledger is recovered to fix its end), creates the
next one above every id the managed ledger has had, stores the list (CAS) and installs the
new writer. Adds arriving meanwhile queue (bounded by ``max_pending_adds``) and go to the
new ledger in order; a writer that failed for want of bookies hands its unconfirmed adds
back first (they go ahead of the queue and their futures resolve to their new positions).
An empty closed ledger is dropped from the list and deleted once the list without it is
stored. Creating and recovering retry with back-off until the managed ledger closes. The
periodic check (``rollover_check_interval_ms``) and each rollover also ask for a trim and an
offload check.
Also opens the first ledger of a managed ledger being opened (the same create, CAS, install).
Must not know: cursors, reads, topics.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from magnetar.broker.bookkeeper.errors import LedgerFenced, NotEnoughBookies, TooManyPendingAdds
from magnetar.broker.bookkeeper.read_handle import ReadHandle
from magnetar.broker.bookkeeper.write_handle import WriteHandle
from magnetar.broker.ledger.errors import (
    LedgerError,
    LedgerOutOfOrder,
    ManagedLedgerFenced,
)
from magnetar.broker.ledger.host import LedgerParts
from magnetar.broker.ledger.position import Position
from magnetar.broker.ledger.reads import LedgerReads
from magnetar.broker.ledger.states import (
    MANAGED_LEDGER_FSM,
    ManagedLedgerEvent,
    ManagedLedgerState,
)
from magnetar.clock import TimerHandle
from magnetar.zk.errors import MetadataError

log = logging.getLogger(__name__)

_S = ManagedLedgerState
_E = ManagedLedgerEvent
T = TypeVar("T")

ROLL_CHECK_EVERY = 64
"""The add path checks the ledger's age at most once per this many adds."""


class Trims(Protocol):
    def trim_soon(self) -> None: ...


class Offloads(Protocol):
    def offload_soon(self) -> None: ...


class FailureCounts(Protocol):
    """Where ledgers given up for want of bookies are counted (the factory)."""

    ledgers_given_up: int
    adds_moved: int


class RolloverHost(LedgerParts, Protocol):
    """What rollover needs of its managed ledger (``ManagedLedger`` is one)."""

    state: ManagedLedgerState

    @property
    def reads(self) -> LedgerReads: ...

    @property
    def trimming(self) -> Trims: ...

    @property
    def offloading(self) -> Offloads: ...

    @property
    def factory(self) -> FailureCounts: ...

    def install(self, handle: WriteHandle) -> None: ...

    def fence(self, reason: str) -> None: ...

    def state_error(self) -> LedgerError: ...

    async def write_info(self) -> None: ...

    def add_nowait(self, payload: bytes) -> asyncio.Future[Position]: ...


class Rollover:
    """Rollover of one managed ledger. ``issued_entries`` / ``issued_bytes`` /
    ``check_at`` / ``max_bytes`` are read and counted by the add path itself."""

    def __init__(self, host: RolloverHost) -> None:
        self._host = host
        config = host.config
        jitter = 1.0 + host.ledger_client.rng.random() * 0.05
        self._max_age_ms = config.max_ledger_rollover_time_ms * jitter
        self.max_bytes = config.max_size_per_ledger_bytes
        self.issued_entries = 0
        self.issued_bytes = 0
        self.check_at = 1
        self._created_ms = 0.0
        self.closing = False
        """The managed ledger is closing: a rollover waiting for bookies gives up."""
        self._queued: collections.deque[tuple[bytes, asyncio.Future[Position]]] = (
            collections.deque()
        )
        self._task: asyncio.Task[None] | None = None
        self._timer: TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<Rollover issued={self.issued_entries} queued={len(self._queued)}>"

    @property
    def queued(self) -> int:
        return len(self._queued)

    # -- the current ledger ---------------------------------------------------------------------
    def started(self, now_ms: float) -> None:
        """A new current ledger was installed."""
        self._created_ms = now_ms
        self.issued_entries = 0
        self.issued_bytes = 0
        self.check_at = 1

    def due(self) -> bool:
        """Whether the current ledger is full (or too old)."""
        config = self._host.config
        age_ms = self._host.clock.monotonic_ms() - self._created_ms
        # the time checks are cheap but not free: re-check every ROLL_CHECK_EVERY adds at most
        self.check_at = self.issued_entries + ROLL_CHECK_EVERY
        if age_ms < config.min_ledger_rollover_time_ms or self.issued_entries == 0:
            return False
        if self.issued_entries + ROLL_CHECK_EVERY > config.max_entries_per_ledger:
            self.check_at = self.issued_entries + 1
        return (
            self.issued_entries >= config.max_entries_per_ledger
            or self.issued_bytes >= config.max_size_per_ledger_bytes
            or age_ms >= self._max_age_ms
        )

    def queue(self, payload: bytes) -> asyncio.Future[Position]:
        """An add while rolling over: it goes to the next ledger, in order."""
        if len(self._queued) >= self._host.config.max_pending_adds:
            raise TooManyPendingAdds(f"{self._host.name}: {len(self._queued)} adds queued")
        fut: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self._queued.append((payload, fut))
        return fut

    def start(self) -> None:
        host = self._host
        if host.state is not _S.LEDGER_OPENED:
            return
        host.state = MANAGED_LEDGER_FSM.next(host.state, _E.ROLLOVER)
        self._task = asyncio.ensure_future(self._run())

    async def wait(self) -> None:
        """Return once no rollover runs."""
        if self._task is not None and not self._task.done():
            await asyncio.wait([self._task])

    async def roll_now(self) -> None:
        """Roll the current ledger over now if it holds anything (a truncate)."""
        await self.wait()
        if self._host.state is _S.LEDGER_OPENED and self.issued_entries > 0:
            self.start()
            await self.wait()

    def on_handle_failed(self, handle: WriteHandle, error: LedgerError) -> None:
        """The current writer was fenced or failed."""
        host = self._host
        if handle is not host.ledgers.current:
            return
        if isinstance(error, LedgerFenced):
            host.fence("ledger fenced by another writer")
            return
        if host.state not in (_S.LEDGER_OPENED, _S.CLOSING_LEDGER) or not isinstance(
            error, NotEnoughBookies
        ):
            return
        # a failed ledger (no bookies for too long): its unconfirmed adds go to the next
        # ledger, ahead of those queued since, in their order; the rollover closes it at its
        # last confirmed entry, so none of them is in it (Pulsar re-sends them so too)
        unconfirmed = handle.take_unconfirmed()
        host.factory.ledgers_given_up += 1
        host.factory.adds_moved += len(unconfirmed)
        if unconfirmed:
            log.warning(
                "%s: ledger %d failed (%s); %d unconfirmed adds go to the next ledger",
                host.name,
                handle.ledger_id,
                error,
                len(unconfirmed),
            )
            self._queued.extendleft(reversed(unconfirmed))
        if host.state is _S.LEDGER_OPENED:
            asyncio.get_running_loop().call_soon(self.start)

    async def _run(self) -> None:
        host = self._host
        old = host.ledgers.current
        assert old is not None
        try:
            try:
                await old.close()
                reader: ReadHandle = old
            except LedgerFenced:
                host.fence("ledger fenced during rollover")
                return
            except LedgerError:
                # the handle failed (no bookies): recover it to fix its end, then move on
                await old.abort()
                reader = await self._retry(lambda: host.ledger_client.open_ledger(old.ledger_id))
            if host.state is not _S.CLOSING_LEDGER:
                return
            info = host.ledgers.ledgers[-1]
            info.entries = reader.last_add_confirmed + 1
            info.size = reader.length
            info.timestamp_ms = host.clock.now_ms()
            host.state = MANAGED_LEDGER_FSM.next(host.state, _E.LEDGER_CLOSED)
            new = await self._retry(self.create_ledger)
            if host.state is not _S.CREATING_LEDGER:
                await new.abort()
                return
            try:
                host.ledgers.append(new.ledger_id, host.clock.now_ms())
            except LedgerOutOfOrder as exc:
                await new.abort()
                await host.ledger_client.delete_ledger(new.ledger_id)
                host.fence(str(exc))  # the topic unloads; the next open starts afresh
                return
            dropped = None
            if info.entries == 0:
                dropped = host.ledgers.ledgers.pop(-2)
            else:
                host.reads.add_reader(reader)
            await host.write_info()
            if dropped is not None:
                await host.ledger_client.delete_ledger(dropped.ledger_id)
            host.install(new)
            if host.ledgers.last_confirmed.entry_id < 0:
                host.ledgers.last_confirmed = Position(new.ledger_id, -1)
            host.state = MANAGED_LEDGER_FSM.next(host.state, _E.LEDGER_CREATED)
            log.info("%s: rolled over to ledger %d", host.name, new.ledger_id)
        except ManagedLedgerFenced:
            pass
        except Exception as exc:
            if self.closing:
                log.warning("%s: closed while rolling over: %r", host.name, exc)
            else:
                log.exception("%s: rollover failed", host.name)
            self.fail_queued(exc)
            return
        finally:
            if host.state is not _S.LEDGER_OPENED and host.state is not _S.CLOSING_LEDGER:
                self.fail_queued(host.state_error())
        queued, self._queued = self._queued, collections.deque()
        for payload, fut in queued:
            if fut.done():
                continue
            try:
                inner = host.add_nowait(payload)
            except LedgerError as exc:
                fut.set_exception(exc)
                continue
            inner.add_done_callback(functools.partial(_chain, fut))
        host.trimming.trim_soon()
        host.offloading.offload_soon()

    async def first_ledger(self, dropped: int | None) -> None:
        """Open a managed ledger's first ledger of this owner: create it, store the list
        naming it (CAS: claims ownership), then delete ``dropped`` (the previous owner's
        empty last ledger, left out of the list) and install it."""
        host = self._host
        current = await self.create_ledger()
        try:
            host.ledgers.append(current.ledger_id, host.clock.now_ms())
            await host.write_info()
        except (ManagedLedgerFenced, LedgerOutOfOrder):
            await current.abort()
            await host.ledger_client.delete_ledger(current.ledger_id)
            raise
        if dropped is not None:
            await host.ledger_client.delete_ledger(dropped)
        host.install(current)
        if host.ledgers.last_confirmed.ledger_id < 0:
            host.ledgers.last_confirmed = Position(current.ledger_id, -1)
        host.state = MANAGED_LEDGER_FSM.next(host.state, _E.LEDGER_CREATED)

    async def create_ledger(self) -> WriteHandle:
        host = self._host
        return await host.ledger_client.create_ledger(
            custom={"managed-ledger": host.name}, min_ledger_id=host.ledgers.max_ledger_id
        )

    async def _retry(self, op: Callable[[], Awaitable[T]]) -> T:
        host = self._host
        delay = 0.1
        while True:
            try:
                return await op()
            except (NotEnoughBookies, LedgerError, MetadataError) as exc:
                if (
                    host.state in (_S.CLOSED, _S.FENCED)
                    or self.closing
                    or isinstance(exc, LedgerFenced)
                ):
                    raise
                log.warning("%s: retrying after %r", host.name, exc)
                await host.clock.sleep(delay)
                delay = min(delay * 2, 2.0)

    def fail_queued(self, exc: BaseException) -> None:
        queued, self._queued = self._queued, collections.deque()
        for _, fut in queued:
            if not fut.done():
                fut.set_exception(exc)

    # -- the periodic check ---------------------------------------------------------------------
    def schedule_timer(self) -> None:
        interval_s = self._host.config.rollover_check_interval_ms / 1000.0
        self._timer = self._host.clock.call_later(interval_s, self._on_timer)

    def stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _on_timer(self) -> None:
        host = self._host
        if host.state in (_S.CLOSED, _S.FENCED):
            return
        if host.state is _S.LEDGER_OPENED and self.due():
            self.start()
        host.trimming.trim_soon()
        host.offloading.offload_soon()
        self.schedule_timer()


def _chain(outer: asyncio.Future[Position], inner: asyncio.Future[Position]) -> None:
    if outer.done():
        return
    exc = inner.exception()
    if exc is not None:
        outer.set_exception(exc)
    else:
        outer.set_result(inner.result())


__all__ = ["ROLL_CHECK_EVERY", "Rollover", "RolloverHost"]
