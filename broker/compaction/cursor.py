"""``CompactedCursor``: reading a topic through its compacted view (``read_compacted``).

Owns: a ``TopicCursor`` over a subscription's own cursor that, while the read position is at
or before the horizon, serves the view (only retained entries at or after the read position,
with their original message ids), then continues on the live tail. A partially retained
batch goes out with a CommandMessage ``ack_set`` whose 0 bits are the messages compacted out
(the official clients skip them and return their permits). The ack-set word helpers
(``words_to_int``, ``int_to_words``) are ``broker/storage/contract.py``'s.

Invariants: acks go to the inner cursor (the entries keep their original ids); messages
compacted out of a batch count as acknowledged; the remembered batch masks are bounded
(``_MASKS_MAX``, oldest dropped); when a new generation replaces the one being read, the read
is retried on the new one.
Must not know: how views are built or stored beyond ``CompactedView``'s read API (it sees the
current view through ``ViewHolder``, in practice a ``TopicCompaction``), sockets, frames,
dispatch (the dispatchers see an ordinary cursor).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Protocol

from magnetar.broker.compaction.fold import entry_messages
from magnetar.broker.compaction.view import CompactedView, ViewRecord, next_position
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import Entry, TopicCursor, int_to_words, words_to_int

_MASKS_MAX = 10_000


class ViewHolder(Protocol):
    """Where the cursor finds the current view (``TopicCompaction`` is one)."""

    @property
    def view(self) -> CompactedView | None: ...

    @property
    def horizon(self) -> Position | None: ...


class CompactedCursor:
    """A ``TopicCursor`` serving the compacted view before the live tail (read_compacted).

    All positioning goes through this wrapper: while the logical read position is at or
    before the current horizon, reads come from the view; then the inner cursor is moved
    after the horizon and reads continue on the topic. Acks go to the inner cursor (the
    entries keep their original ids)."""

    def __init__(
        self, inner: TopicCursor, compaction: ViewHolder, *, from_earliest: bool = False
    ) -> None:
        self.inner = inner
        self.compaction = compaction
        self.name = inner.name
        self.durable = inner.durable
        # the read position while it is inside the view (None: follow the inner cursor)
        self._logical: Position | None = Position(-1, -1) if from_earliest else None
        # a cursor started at the earliest position counts nothing below its starting
        # mark-delete as acknowledged until the mark moves (the view may hold entries
        # older than what the ledger still has)
        self._floor: Position | None = inner.mark_delete_position if from_earliest else None
        self._masks: collections.OrderedDict[Position, tuple[int, int]] = collections.OrderedDict()

    def __repr__(self) -> str:
        return f"<CompactedCursor {self.inner!r} logical={self._logical}>"

    def unwrap(self) -> TopicCursor:
        return self.inner

    def _horizon(self) -> Position | None:
        return self.compaction.horizon

    @property
    def mark_delete_position(self) -> Position:
        return self.inner.mark_delete_position

    @property
    def read_position(self) -> Position:
        return self._logical if self._logical is not None else self.inner.read_position

    def _view_acked(self, position: Position) -> bool:
        floor = self._floor
        if floor is not None:
            if self.inner.mark_delete_position != floor:
                self._floor = None
            elif position <= floor:
                return False
        return self.inner.is_acked(position)

    def _record_acked(self, rec: ViewRecord) -> bool:
        """Acknowledged, or a batch whose retained members are all acknowledged (an ack
        set of zeros would read as "deliver everything" to the client)."""
        if self._view_acked(rec.position):
            return True
        if rec.mask is not None:
            words = self.inner.batch_ack_set(rec.position)
            if words and not words_to_int(words) & rec.mask:
                return True
        return False

    def is_acked(self, position: Position) -> bool:
        return self._view_acked(position)

    def batch_ack_set(self, position: Position) -> list[int] | None:
        words = self.inner.batch_ack_set(position)
        got = self._masks.get(position)
        if got is None:
            return words
        size, mask = got
        unacked = words_to_int(words) if words else (1 << size) - 1
        return int_to_words(unacked & mask, size)

    def _remember(self, rec: ViewRecord) -> None:
        if rec.mask is None:
            return
        try:
            n, _ = entry_messages(rec.data)
        except Exception:
            return
        self._masks[rec.position] = (n, rec.mask)
        self._masks.move_to_end(rec.position)
        while len(self._masks) > _MASKS_MAX:
            self._masks.popitem(last=False)

    async def read_entries(self, max_entries: int) -> list[Entry]:
        view = self.compaction.view
        try:
            return await self._read_entries(view, max_entries)
        except Exception:
            if self.compaction.view is view:
                raise
            # a new generation replaced (and deleted) the one being read: read it instead
            return await self._read_entries(self.compaction.view, max_entries)

    async def _read_entries(self, view: CompactedView | None, max_entries: int) -> list[Entry]:
        pos = self.read_position
        if view is None or pos > view.horizon:
            if self._logical is not None:
                self.inner.seek(self._logical)
                self._logical = None
            return await self.inner.read_entries(max_entries)
        recs, nxt = await view.read(pos, max_entries, self._record_acked)
        for r in recs:
            self._remember(r)
        out = [Entry(r.position, r.data) for r in recs]
        if nxt is not None:
            self._logical = nxt
            return out
        # the view is exhausted: the live tail after the horizon
        self._logical = None
        self.inner.seek(next_position(view.horizon))
        if len(out) < max_entries:
            out += await self.inner.read_entries(max_entries - len(out))
        return out

    async def read_positions(self, positions: list[Position]) -> list[Entry]:
        view = self.compaction.view
        if view is None:
            return await self.inner.read_positions(positions)
        out: list[Entry] = []
        live = [p for p in positions if p > view.horizon]
        for pos in positions:
            if pos <= view.horizon and not self._view_acked(pos):
                rec = await view.read_at(pos)
                if rec is not None and not self._record_acked(rec):
                    self._remember(rec)
                    out.append(Entry(rec.position, rec.data))
        if live:
            out += await self.inner.read_positions(live)
        return out

    async def ack(self, positions: Iterable[Position]) -> None:
        await self.inner.ack(positions)

    async def ack_batch_index(self, position: Position, ack_set: list[int], size: int) -> bool:
        got = self._masks.get(position)
        if got is not None:  # messages compacted out count as acknowledged
            _, mask = got
            ack_set = int_to_words(words_to_int(ack_set) & mask, size)
            if not any(ack_set):
                await self.inner.ack([position])
                return True
        return await self.inner.ack_batch_index(position, ack_set, size)

    def redelivery_count(self, position: Position) -> int:
        return self.inner.redelivery_count(position)

    async def increment_redelivery(self, position: Position) -> int:
        return await self.inner.increment_redelivery(position)

    async def ack_cumulative(self, position: Position) -> None:
        await self.inner.ack_cumulative(position)

    def _logical_after(self, position: Position) -> Position | None:
        horizon = self._horizon()
        return position if horizon is not None and position <= horizon else None

    def rewind(self) -> None:
        self.inner.rewind()
        mark = self.inner.mark_delete_position
        if self._floor is not None and mark == self._floor:
            self._logical = self._logical_after(Position(-1, -1))
        else:
            self._floor = None
            self._logical = self._logical_after(next_position(mark))

    def seek(self, position: Position) -> None:
        self.inner.seek(position)
        self._logical = self._logical_after(position)

    async def reset(self, position: Position) -> None:
        await self.inner.reset(position)
        if position.ledger_id < 0:  # earliest: the whole view again
            self._floor = self.inner.mark_delete_position
            self._logical = self._logical_after(Position(-1, -1))
        else:
            self._floor = None
            self._logical = self._logical_after(position)
        self._masks.clear()

    def backlog(self) -> int:
        return self.inner.backlog()

    def backlog_size(self) -> int:
        return self.inner.backlog_size()


__all__ = ["CompactedCursor", "ViewHolder", "int_to_words", "words_to_int"]
