"""A managed ledger's trimming: deleting ledgers nobody needs any more.

Owns: ``Trimming``: deciding which ledgers go (wholly before the slowest durable cursor's
mark-delete and outside the retention policy: time counted from a ledger's close, size
over all ledgers), coalescing trim requests (a request during a trim runs one more trim
after it: that trim may have read the cursors before they moved), and Pulsar's truncate
(roll the current ledger over, move every durable cursor past the earlier ledgers, delete
them whatever retention says). Deleting is: the list without them is stored (CAS), then
their reads and cached entries are dropped and their ledger metadata deleted (bookies
reclaim the space in GC), and their offloaded objects deleted from the object store. The
ids are logged (``trimming ledgers [...]``) before the list is stored: a broker killed
between the store's write and its answer has still said which ledgers may be gone. The
deletion runs shielded from its caller's cancellation (once the list is stored, the metadata
deletion follows); a list write that fails without fencing puts the ledgers back in the
in-memory list, so no later write of the list drops them unsaid.
Invariants: the current ledger is never trimmed; nothing at or after a durable mark-delete
is deleted (the stored cursor state never names a deleted ledger); when every entry is
deleted the last confirmed position is the start of the current ledger.
Must not know: how cursors persist, bookies, topics.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from magnetar.broker.ledger.cursor_registry import CursorRegistry
from magnetar.broker.ledger.errors import LedgerError, ManagedLedgerFenced
from magnetar.broker.ledger.host import LedgerParts
from magnetar.broker.ledger.ledger_list import LedgerInfo
from magnetar.broker.ledger.position import Position
from magnetar.broker.ledger.reads import LedgerReads
from magnetar.broker.ledger.states import ManagedLedgerState

log = logging.getLogger(__name__)


class RollsOver(Protocol):
    """The rollover a truncate asks for (``Rollover``)."""

    async def roll_now(self) -> None: ...


class DeletesOffloaded(Protocol):
    """What deletes the offloaded copies of deleted ledgers (``Offloading``)."""

    async def delete_objects(self, infos: list[LedgerInfo]) -> None: ...


class TrimmingHost(LedgerParts, Protocol):
    """What trimming needs of its managed ledger (``ManagedLedger`` is one)."""

    @property
    def state(self) -> ManagedLedgerState: ...

    @property
    def reads(self) -> LedgerReads: ...

    @property
    def cursors(self) -> CursorRegistry: ...

    @property
    def rollover(self) -> RollsOver: ...

    @property
    def offloading(self) -> DeletesOffloaded: ...

    async def write_info(self) -> None: ...

    def state_error(self) -> LedgerError: ...


class Trimming:
    """Trimming of one managed ledger."""

    def __init__(self, host: TrimmingHost) -> None:
        self._host = host
        self._task: asyncio.Task[list[int]] | None = None
        self._again = False

    def __repr__(self) -> str:
        return f"<Trimming running={self.running} again={self._again}>"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def trim_soon(self) -> None:
        """Trim in the background (a cursor moved, a ledger rolled over, the timer)."""
        if self._host.state is not ManagedLedgerState.LEDGER_OPENED:
            return
        if self._task is None or self._task.done():
            self._again = False
            self._task = asyncio.ensure_future(self.trim())
            self._task.add_done_callback(self._after_trim)
        else:  # a trigger during a trim may concern what that trim already looked at
            self._again = True

    def _after_trim(self, task: asyncio.Task[list[int]]) -> None:
        if self._again:
            self.trim_soon()

    async def idle(self) -> None:
        """Return once no background trim runs (one asked for during a trim starts from the
        done callback registered before this wait's, so it is waited for too)."""
        while self._task is not None and not self._task.done():
            await asyncio.wait([self._task])

    async def trim(self) -> list[int]:
        """Delete consumed ledgers outside retention; returns the deleted ledger ids."""
        host = self._host
        current = host.ledgers.current
        if host.state is not ManagedLedgerState.LEDGER_OPENED or current is None:
            return []
        slowest = host.cursors.slowest_mark_delete()
        now = host.clock.now_ms()
        cfg = host.config
        total = sum(i.size for i in host.ledgers.ledgers)
        removed: list[LedgerInfo] = []
        for info in host.ledgers.ledgers[:-1]:
            if info.ledger_id == current.ledger_id:
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
        log.info("%s: trimming ledgers %s", host.name, [i.ledger_id for i in removed])
        try:
            gone = await self._delete({i.ledger_id for i in removed})
        except ManagedLedgerFenced:
            return []
        log.info("%s: trimmed ledgers %s", host.name, gone)
        return gone

    async def truncate(self) -> list[int]:
        """Pulsar's topic truncate: roll the current ledger over, move every durable cursor
        to the end, and delete every ledger before the current one, whatever retention says.
        Returns the deleted ledger ids."""
        host = self._host
        await host.rollover.roll_now()
        current = host.ledgers.current
        if host.state is not ManagedLedgerState.LEDGER_OPENED or current is None:
            raise host.state_error()
        earlier = [i for i in host.ledgers.ledgers if i.ledger_id != current.ledger_id]
        if not earlier:
            return []
        # cursors move past the deleted ledgers only: an add that reached the new ledger
        # meanwhile stays to be consumed
        end = max(Position(i.ledger_id, i.entries - 1) for i in earlier)
        for cursor in host.cursors.values():
            if cursor.mark_delete_position < end:
                await cursor.mark_delete(end)
        log.info("%s: truncating ledgers %s", host.name, [i.ledger_id for i in earlier])
        gone = await self._delete({i.ledger_id for i in earlier})
        log.info("%s: truncated ledgers %s", host.name, gone)
        return gone

    async def _delete(self, gone: set[int]) -> list[int]:
        """Store the list without ``gone``, then drop their reads and metadata (in a task
        of its own: the caller's cancellation does not stop it half-way)."""
        task = asyncio.ensure_future(self._delete_now(gone))
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _delete_now(self, gone: set[int]) -> list[int]:
        host = self._host
        ledgers = host.ledgers
        infos = [i for i in ledgers.ledgers if i.ledger_id in gone]
        ledgers.remove(gone)
        try:
            await host.write_info()
        except ManagedLedgerFenced:
            raise
        except BaseException:
            # not stored (or not known to be): they stay listed, so a later write of the
            # list does not drop them with no deletion and no log
            ledgers.ledgers = sorted([*ledgers.ledgers, *infos], key=_ledger_id)
            raise
        current = ledgers.current
        if ledgers.last_confirmed.ledger_id in gone and current is not None:
            # Every entry is gone (the current ledger is still empty): the last position
            # is the start of the current ledger, so "is there a message after X" says no
            # instead of pointing at an entry nobody can read (Pulsar does the same).
            ledgers.last_confirmed = Position(current.ledger_id, -1)
        for ledger_id in sorted(gone):
            host.reads.forget_ledger(ledger_id)
            await host.ledger_client.delete_ledger(ledger_id)
        await host.offloading.delete_objects([i for i in infos if i.offload is not None])
        return sorted(gone)


def _ledger_id(info: LedgerInfo) -> int:
    return info.ledger_id


def _retrieve(task: asyncio.Future[list[int]]) -> None:
    """Mark a shielded deletion's outcome retrieved (its caller may be gone)."""
    if not task.cancelled():
        task.exception()


__all__ = ["Trimming", "TrimmingHost"]
