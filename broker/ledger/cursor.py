"""Managed cursors: a reader's position and its durable acknowledgement state.

Owns: ``ManagedCursor`` — read position and reads (it moves its own read position, through
its read-ahead when behind the entry cache), mark-delete, individual and batch-index acks,
redelivery counts, backlog, seek/reset/rewind, find-by-publish-time — and when its changes
are written. Where they are written (the znode and the cursor ledger, snapshots and deltas,
rollover) is ``cursor_log.CursorLog``'s.
Persistence (better than Pulsar: the whole state is always durable, no range cap):
- Acks are group-committed: ``await mark_delete/delete/increment_redelivery`` returns once
  the change is in a durable cursor-ledger entry; concurrent callers share one write. An
  ack that changes nothing (already acknowledged) returns once the write in flight is
  durable, so the broker's ack receipt always means durable. A failed write makes the next
  one a full snapshot.
- Recovery loads the snapshot and replays every delta, so exactly the acknowledged entries
  and the redelivery counts come back.
Non-durable cursors (readers) keep the same state in memory only.
Must not know: topics, subscriptions, message formats (publish time comes from a callback).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from magnetar.broker.bookkeeper.client import LedgerClient
from magnetar.broker.bookkeeper.errors import LedgerError
from magnetar.broker.ledger.ackstate import AckDelta, AckState
from magnetar.broker.ledger.config import ManagedLedgerConfig
from magnetar.broker.ledger.cursor_log import CursorLog
from magnetar.broker.ledger.errors import ManagedLedgerClosed, ManagedLedgerFenced
from magnetar.broker.ledger.ledger_list import LedgerList
from magnetar.broker.ledger.position import Position
from magnetar.broker.ledger.read_ahead import ReadAhead, ReadAheadStats
from magnetar.broker.ledger.reads import LedgerReads, ManagedEntry
from magnetar.broker.ledger.states import ManagedLedgerState
from magnetar.clock import Clock
from magnetar.zk.errors import MetadataError
from magnetar.zk.store import MetadataStore


class CursorEvents(Protocol):
    """Whom a cursor tells that it moved or went (the managed ledger's ``CursorRegistry``)."""

    def moved(self, cursor: ManagedCursor) -> None: ...

    def forget(self, cursor: ManagedCursor) -> None: ...


class CursorLedger(Protocol):
    """What a cursor needs of its managed ledger (``ManagedLedger`` is one): its name,
    store, settings and ledger client, its ledger list (positions, navigation), its reads,
    and whom to tell when the cursor moves or goes."""

    @property
    def name(self) -> str: ...

    @property
    def store(self) -> MetadataStore: ...

    @property
    def config(self) -> ManagedLedgerConfig: ...

    @property
    def ledger_client(self) -> LedgerClient: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def state(self) -> ManagedLedgerState: ...

    @property
    def ledgers(self) -> LedgerList: ...

    @property
    def reads(self) -> LedgerReads: ...

    @property
    def cursors(self) -> CursorEvents: ...


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backlog:
    entries: int
    bytes: int


@dataclass(frozen=True, slots=True)
class CursorStatistics:
    name: str
    durable: bool
    mark_delete_position: Position
    read_position: Position
    ack_ranges: int
    redelivery_tracked: int
    cursor_ledger_id: int
    flushes: int
    snapshots: int


class ManagedCursor:
    def __init__(
        self,
        ml: CursorLedger,
        name: str,
        state: AckState,
        *,
        durable: bool,
        log: CursorLog | None = None,
    ) -> None:
        self._ml = ml
        self.name = name
        self.durable = durable
        self._state = state
        self.read_position = ml.ledgers.next_valid_position(
            ml.ledgers.position_after(state.mark_delete)
        )
        self._log = log
        """Where the state is made durable (None: a non-durable cursor)."""
        self._pending = _PendingDelta()
        self._next_flush: asyncio.Future[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._writing: asyncio.Future[None] | None = None
        """Completes when the cursor write in flight is durable (or failed)."""
        self._closed = False
        self._close_task: asyncio.Future[None] | None = None
        self._dirty = False
        """The last cursor write failed: memory holds changes no durable entry has."""
        self._durable_mark_delete = state.mark_delete
        """Mark-delete as of the last durable write: trimming never deletes a ledger at or
        after it, so the stored state never references a deleted ledger."""
        self._flushes = 0
        self._read_ahead: ReadAhead[ManagedEntry] | None = None
        """Bookie reads in flight ahead of ``read_position`` while it is behind the cache."""

    def __repr__(self) -> str:
        return (
            f"<ManagedCursor {self._ml.name}/{self.name} md={self.mark_delete_position} "
            f"read={self.read_position} ranges={self._state.range_count()}>"
        )

    # -- queries ------------------------------------------------------------------------------
    @property
    def mark_delete_position(self) -> Position:
        return self._state.mark_delete

    @property
    def durable_mark_delete_position(self) -> Position:
        """The mark-delete a recovery would start from (the in-memory one when not durable)."""
        return self._durable_mark_delete if self.durable else self._state.mark_delete

    def individually_deleted_ranges(self) -> list[tuple[Position, Position]]:
        return self._state.ranges()

    def is_acknowledged(self, pos: Position) -> bool:
        return self._state.is_acked(pos)

    def none_acknowledged_from(self, pos: Position) -> bool:
        """No entry at or after ``pos`` in its ledger is acknowledged (reads skip the
        per-entry check then)."""
        return self._state.none_acked_from(pos)

    def batch_ack_set(self, pos: Position) -> tuple[int, int] | None:
        """(batch size, mask of acknowledged indexes) of a partly acknowledged batch entry."""
        return self._state.batch_sets.get(pos)

    def redelivery_count(self, pos: Position) -> int:
        return self._state.redeliveries.get(pos, 0)

    def backlog(self) -> Backlog:
        """Entries (and estimated bytes) after mark-delete that are not acknowledged."""
        md = self._state.mark_delete
        entries = 0
        size = 0.0
        for ledger_id, count, ledger_bytes in self._ml.ledgers.sizes():
            if ledger_id < md.ledger_id or count == 0:
                continue
            above = md.entry_id if ledger_id == md.ledger_id else -1
            after = count - (above + 1)
            if after <= 0:
                continue
            unacked = after - self._state.acked_count_after(ledger_id, above)
            entries += unacked
            size += ledger_bytes * unacked / count
        return Backlog(entries, int(size))

    def has_more_entries(self) -> bool:
        ledgers = self._ml.ledgers
        return ledgers.next_valid_position(self.read_position) <= ledgers.last_confirmed

    # -- reading ------------------------------------------------------------------------------
    async def read_entries(self, max_entries: int) -> list[ManagedEntry]:
        """Up to ``max_entries`` unacknowledged entries from the read position, which then
        moves past them. Behind the entry cache, through the cursor's read-ahead (bookie
        reads pipelined)."""
        reads = self._ml.reads
        start = self._ml.ledgers.next_valid_position(self.read_position)
        ahead = self._read_ahead
        if max_entries > 0 and reads.behind_cache(start):
            if ahead is None:
                ahead = self._read_ahead = reads.new_read_ahead()
        elif ahead is not None:
            ahead.clear()  # at the cache again: nothing to read ahead
            ahead = None
        entries, self.read_position = await reads.read_from(start, max_entries, self, ahead)
        reads.read_done()
        return entries

    async def read_entries_or_wait(self, max_entries: int, timeout_s: float) -> list[ManagedEntry]:
        """``read_entries``, after waiting up to ``timeout_s`` for an entry to read."""
        if not self.has_more_entries():
            await self._ml.reads.wait_for_entries(self.has_more_entries, timeout_s)
        return await self.read_entries(max_entries)

    def read_ahead_statistics(self) -> ReadAheadStats | None:
        return self._read_ahead.statistics() if self._read_ahead is not None else None

    def close_read_ahead(self) -> None:
        """Stop reading ahead (the cursor or its managed ledger closes)."""
        ahead, self._read_ahead = self._read_ahead, None
        if ahead is not None:
            ahead.close()

    # -- acknowledgements ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._fenced() or self._ml.state is ManagedLedgerState.FENCED:
            raise ManagedLedgerFenced(f"cursor {self.name} was taken over")
        if self._closed:
            raise ManagedLedgerClosed(f"cursor {self.name} is closed")

    async def mark_delete(self, pos: Position) -> None:
        """Acknowledge everything up to and including ``pos`` (cumulative ack)."""
        self._check_open()
        pos = min(pos, self._ml.ledgers.last_confirmed)
        if pos > self._state.mark_delete:
            self._state.set_mark_delete(pos)
            self._state.advance(self._ml.ledgers)
            self._pending.mark_delete = self._state.mark_delete
            self._after_move()
        await self._persist()

    def exists(self, pos: Position) -> bool:
        """Whether ``pos`` names an entry of the managed ledger (written and confirmed):
        acknowledgements of anything else are ignored, so an absurd entry id can never grow
        the ack bitmaps."""
        if pos.entry_id < 0 or pos > self._ml.ledgers.last_confirmed:
            return False
        entries = self._ml.ledgers.entries_in(pos.ledger_id)
        return entries is not None and pos.entry_id < entries

    async def delete(self, positions: Iterable[Position]) -> None:
        """Acknowledge individual entries (positions that name no entry are ignored)."""
        self._check_open()
        changed = False
        exists = self.exists
        for pos in positions:
            if exists(pos) and self._state.ack(pos):
                self._pending.acked.append(pos)
                changed = True
        if changed:
            before = self._state.mark_delete
            if self._state.advance(self._ml.ledgers):
                self._pending.mark_delete = self._state.mark_delete
                if self._state.mark_delete.ledger_id != before.ledger_id:
                    self._after_move()
        await self._persist()  # also when nothing changed: returns once the state is durable

    async def delete_batch_indexes(
        self, pos: Position, batch_size: int, indexes: Iterable[int]
    ) -> bool:
        """Acknowledge messages of a batch entry; True once the whole entry is acknowledged."""
        mask = 0
        for index in indexes:
            if 0 <= index < batch_size:
                mask |= 1 << index
        return await self.delete_batch_mask(pos, batch_size, mask)

    async def delete_batch_mask(self, pos: Position, batch_size: int, acked: int) -> bool:
        """Acknowledge the messages of a batch entry whose bits are set in ``acked``; True
        once the whole entry is acknowledged. Positions that name no entry are ignored."""
        self._check_open()
        if not self.exists(pos):
            return False
        whole = self._state.ack_batch_mask(pos, batch_size, acked)
        if whole:
            self._pending.acked.append(pos)
            self._pending.batch.pop(pos, None)
            if self._state.advance(self._ml.ledgers):
                self._pending.mark_delete = self._state.mark_delete
        elif pos in self._state.batch_sets:
            self._pending.batch[pos] = self._state.batch_sets[pos]
        await self._persist()
        return whole

    async def increment_redelivery(self, pos: Position) -> int:
        """Count one more delivery attempt of ``pos`` (durably); returns the new count."""
        self._check_open()
        if self._state.is_acked(pos) or not self.exists(pos):
            return 0
        count = self._state.redeliveries.get(pos, 0) + 1
        self._state.redeliveries[pos] = count
        self._pending.redeliveries[pos] = count
        await self._persist()
        return count

    # -- positioning --------------------------------------------------------------------------
    def seek(self, pos: Position) -> None:
        """Move the read position (acknowledgements are unchanged)."""
        self.read_position = self._ml.ledgers.next_valid_position(pos)

    def rewind(self) -> None:
        """Read again from the first entry after mark-delete."""
        ledgers = self._ml.ledgers
        self.read_position = ledgers.next_valid_position(
            ledgers.position_after(self._state.mark_delete)
        )

    async def reset(self, pos: Position) -> None:
        """Reset the cursor: everything before ``pos`` acknowledged, nothing after it."""
        self._check_open()
        pos = self._ml.ledgers.next_valid_position(pos)
        self._state.reset(Position(pos.ledger_id, pos.entry_id - 1))
        self.read_position = pos
        self._pending = _PendingDelta()
        if self._log is not None:
            self._log.needs_snapshot = True
        await self._persist(force=True)

    async def find_by_publish_time(
        self, publish_time_ms: int, extract: Callable[[bytes], int]
    ) -> Position | None:
        """The first position whose entry's publish time is >= ``publish_time_ms``."""
        return await self._ml.reads.find_by_publish_time(publish_time_ms, extract)

    async def reset_to_publish_time(
        self, publish_time_ms: int, extract: Callable[[bytes], int]
    ) -> Position:
        """Reset to the first entry published at or after ``publish_time_ms`` (or to the
        end when there is none); returns the new read position."""
        found = await self.find_by_publish_time(publish_time_ms, extract)
        ledgers = self._ml.ledgers
        target = found if found is not None else ledgers.position_after(ledgers.last_confirmed)
        await self.reset(target)
        return self.read_position

    def _fenced(self) -> bool:
        return self._log is not None and self._log.fenced

    def _after_move(self) -> None:
        self._ml.cursors.moved(self)

    # -- persistence --------------------------------------------------------------------------
    async def _persist(self, *, force: bool = False) -> None:
        if self._log is None:
            return
        if not self._pending and not force:
            # Nothing new, but the state this caller saw (an ack repeated, a mark-delete
            # already passed) may not be durable yet: an acknowledgement's receipt waits
            # for the write in flight, or makes one when the last write failed.
            if not self._dirty:
                writing = self._writing
                if writing is not None and not writing.done():
                    await asyncio.shield(writing)
                return
            force = True
        if force:
            self._pending.force = True
        if self._next_flush is None:
            self._next_flush = asyncio.get_running_loop().create_future()
        fut = self._next_flush
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_loop())
        await asyncio.shield(fut)

    async def _flush_loop(self) -> None:
        durable = self._log
        assert durable is not None
        while self._pending and self._next_flush is not None:
            delta, self._pending = self._pending, _PendingDelta()
            fut, self._next_flush = self._next_flush, None
            captured = self._state.mark_delete
            self._writing = fut
            try:
                await durable.write(self._state, None if delta.force else delta.to_delta())
            except BaseException as exc:
                # the in-memory state has these changes: persist all of it next time
                durable.needs_snapshot = True
                self._dirty = True
                if not fut.done():
                    fut.set_exception(exc)
                    fut.exception()
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            self._flushes += 1
            self._dirty = False
            before = self._durable_mark_delete
            self._durable_mark_delete = captured
            if captured.ledger_id != before.ledger_id:
                self._after_move()  # trimming waits for durable positions
            if not fut.done():
                fut.set_result(None)

    @classmethod
    async def create(cls, ml: CursorLedger, name: str, mark_delete: Position) -> ManagedCursor:
        """A new durable cursor (its znode created: ``CursorAlreadyExists`` if it exists)."""
        durable = await CursorLog.create(ml, name, mark_delete)
        return cls(ml, name, AckState(mark_delete), durable=True, log=durable)

    @classmethod
    async def recover(cls, ml: CursorLedger, name: str) -> ManagedCursor:
        """The durable cursor ``name`` as its log holds it."""
        durable, state = await CursorLog.recover(ml, name)
        state.advance(ml.ledgers)
        return cls(ml, name, state, durable=True, log=durable)

    async def flush(self) -> None:
        """Wait until every acknowledgement made so far is durable."""
        await self._persist()

    async def close(self) -> None:
        """Make every acknowledgement durable, then close the cursor ledger.

        Waits for the write in flight (a delta, or a snapshot being switched in) and for
        every pending change, retrying once with a fresh snapshot if the last write failed;
        acknowledgements made while closing are flushed too. Concurrent calls share one close.
        """
        if not self.durable:
            self._closed = True
            self._ml.cursors.forget(self)
            return
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        await self._drain()
        self._closed = True
        if self._log is not None:
            await self._log.close()

    async def _drain(self) -> None:
        """Return once no cursor write is in flight or pending (bounded: a failed final
        write is retried once, as a snapshot)."""
        retried = False
        while not self._fenced():
            flusher = self._flusher
            if flusher is not None and not flusher.done():
                await asyncio.wait([flusher])
                continue
            if self._dirty and retried:
                log.warning("cursor %s: closing with acknowledgements not durable", self.name)
                return
            force = self._dirty and not self._pending
            if not (self._pending or force):
                return
            retried = retried or force
            try:
                await self._persist(force=force)
            except (LedgerError, MetadataError) as exc:
                log.warning("cursor %s: flush while closing failed: %r", self.name, exc)

    async def delete_durable_state(self) -> None:
        self._closed = True
        if self._log is not None:
            await self._log.delete()

    def statistics(self) -> CursorStatistics:
        return CursorStatistics(
            name=self.name,
            durable=self.durable,
            mark_delete_position=self._state.mark_delete,
            read_position=self.read_position,
            ack_ranges=self._state.range_count(),
            redelivery_tracked=len(self._state.redeliveries),
            cursor_ledger_id=self._log.ledger_id if self._log is not None else -1,
            flushes=self._flushes,
            snapshots=self._log.snapshots if self._log is not None else 0,
        )


class _PendingDelta:
    __slots__ = ("acked", "batch", "force", "mark_delete", "redeliveries")

    def __init__(self) -> None:
        self.mark_delete: Position | None = None
        self.acked: list[Position] = []
        self.batch: dict[Position, tuple[int, int]] = {}
        self.redeliveries: dict[Position, int] = {}
        self.force = False

    def __bool__(self) -> bool:
        return bool(self.force or self.mark_delete or self.acked or self.batch or self.redeliveries)

    def to_delta(self) -> AckDelta:
        return AckDelta(
            self.mark_delete,
            tuple(self.acked),
            tuple((p, s, m) for p, (s, m) in self.batch.items()),
            tuple(self.redeliveries.items()),
        )


__all__ = [
    "Backlog",
    "CursorEvents",
    "CursorLedger",
    "CursorStatistics",
    "ManagedCursor",
]
