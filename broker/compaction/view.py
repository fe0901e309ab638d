"""The compacted-view record format and ``CompactedView``, one stored generation of a view.

Owns:
- the naming of generations: a managed ledger named
  ``<topic>/__compaction/compacted-<generation>`` (under the ``__compaction`` cursor's node);
- the record format: each retained entry, in position order, as (original position, retained
  batch indexes, ORIGINAL entry bytes unchanged), sealed by a trailer record carrying the
  *compaction horizon*::

      record  = "MGC1" | ledger_id int64 BE | entry_id int64 BE | mask_len uint32 BE
                | mask (little-endian, mask_len bytes; none: the whole entry) | entry bytes
      trailer = "MGCT" | JSON {horizon, generation, entries, removed, finished_ms}

- ``CompactedView``: a sealed generation's ledger, its trailer, and an in-memory index from
  original positions to view positions (two int64 arrays each, 32 bytes per retained entry);
  reading records at or after a position.

Invariants: a generation becomes visible only once its trailer is written (one append: a
crash leaves either the old or the new view; ``CompactedView.open`` returns None without
one); the view only ever holds positions <= its horizon, in increasing order
(``check_invariants``).
Must not know: how a view is built (the fold, ``TopicCompaction``), topics, subscriptions,
cursors, sockets, frames, dispatch.
"""

from __future__ import annotations

import bisect
import json
import struct
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import Entry, TopicLedger

COMPACTION_SUBSCRIPTION = "__compaction"
"""The durable cursor holding the topic's data after the horizon (Pulsar's name)."""

READ_BATCH_ENTRIES = 100
"""Entries asked of a ledger in one read (a view's or the topic's)."""

_VIEW_PREFIX = "compacted-"
_DATA_MAGIC = b"MGC1"
_TRAILER_MAGIC = b"MGCT"
_RECORD = struct.Struct(">4sqqI")  # magic, original ledger, original entry, mask length


def next_position(pos: Position) -> Position:
    """The position just after ``pos`` in the same ledger."""
    return Position(pos.ledger_id, pos.entry_id + 1)


# --------------------------------------------------------------------------- naming


def views_prefix(topic_ledger: str) -> str:
    """The storage prefix under which every generation of a topic's view lives."""
    return f"{topic_ledger}/{COMPACTION_SUBSCRIPTION}/"


def view_name(topic_ledger: str, generation: int) -> str:
    return f"{views_prefix(topic_ledger)}{_VIEW_PREFIX}{generation:012d}"


def generation_of(name: str) -> int | None:
    """The generation a ledger name holds, None when it is not a view's name."""
    tail = name.rsplit("/", 1)[-1]
    if not tail.startswith(_VIEW_PREFIX) or not tail[len(_VIEW_PREFIX) :].isdigit():
        return None
    return int(tail[len(_VIEW_PREFIX) :])


# --------------------------------------------------------------------------- records


def encode_record(position: Position, mask: int | None, data: bytes) -> bytes:
    """A view record: the original position, the retained-index mask (None: whole entry)
    and the original entry bytes."""
    raw = b"" if mask is None else mask.to_bytes((mask.bit_length() + 7) // 8 or 1, "little")
    return _RECORD.pack(_DATA_MAGIC, position.ledger_id, position.entry_id, len(raw)) + raw + data


@dataclass(frozen=True, slots=True)
class ViewRecord:
    position: Position
    mask: int | None
    data: bytes


def decode_record(raw: bytes) -> ViewRecord | None:
    """The record, or None for the trailer."""
    if raw[:4] == _TRAILER_MAGIC:
        return None
    magic, ledger_id, entry_id, n = _RECORD.unpack_from(raw, 0)
    if magic != _DATA_MAGIC:
        raise ValueError(f"not a compacted-view record: {magic!r}")
    start = _RECORD.size
    mask = int.from_bytes(raw[start : start + n], "little") if n else None
    return ViewRecord(Position(ledger_id, entry_id), mask, raw[start + n :])


@dataclass(frozen=True, slots=True)
class Trailer:
    horizon: Position
    generation: int
    entries: int
    messages_removed: int
    finished_ms: int

    def encode(self) -> bytes:
        doc = {
            "horizon": str(self.horizon),
            "generation": self.generation,
            "entries": self.entries,
            "removed": self.messages_removed,
            "finished_ms": self.finished_ms,
        }
        return _TRAILER_MAGIC + json.dumps(doc).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Trailer:
        doc = json.loads(raw[4:])
        return cls(
            Position.parse(doc["horizon"]),
            int(doc["generation"]),
            int(doc["entries"]),
            int(doc["removed"]),
            int(doc["finished_ms"]),
        )


# --------------------------------------------------------------------------- a generation


class _Positions:
    """A read-only sequence of Positions over two int64 arrays (16 bytes a key)."""

    __slots__ = ("entries", "ledgers")

    def __init__(self) -> None:
        self.ledgers = array("q")
        self.entries = array("q")

    def append(self, pos: Position) -> None:
        self.ledgers.append(pos.ledger_id)
        self.entries.append(pos.entry_id)

    def __len__(self) -> int:
        return len(self.ledgers)

    def __getitem__(self, i: int) -> Position:
        return Position(self.ledgers[i], self.entries[i])


class CompactedView:
    """One sealed generation: its ledger, its horizon, and an index from original
    positions to view positions (two arrays each, 32 bytes per retained entry)."""

    def __init__(
        self,
        ledger: TopicLedger,
        trailer: Trailer,
        index: Iterable[tuple[Position, Position]] = (),
    ) -> None:
        """``index``: (original position, view position) pairs, in position order."""
        self.ledger = ledger
        self.trailer = trailer
        self.originals = _Positions()
        self.locations = _Positions()
        for orig, loc in index:
            self.originals.append(orig)
            self.locations.append(loc)

    def __repr__(self) -> str:
        return f"<CompactedView {self.ledger.name} horizon={self.horizon} entries={len(self)}>"

    @property
    def horizon(self) -> Position:
        return self.trailer.horizon

    @property
    def generation(self) -> int:
        return self.trailer.generation

    def __len__(self) -> int:
        return len(self.originals)

    def check_invariants(self) -> None:
        prev: Position | None = None
        for i in range(len(self.originals)):
            pos = self.originals[i]
            assert pos <= self.horizon, (pos, self.horizon)
            assert prev is None or prev < pos, (prev, pos)
            prev = pos

    @classmethod
    async def open(cls, ledger: TopicLedger) -> CompactedView | None:
        """Scan a generation's ledger; None when it has no trailer (never sealed)."""
        entries: list[Entry] = []
        trailer: Trailer | None = None
        start = ledger.first_position
        index: list[tuple[Position, Position]] = []
        while start is not None:
            entries = await ledger.read_entries(start, READ_BATCH_ENTRIES)
            for e in entries:
                rec = decode_record(e.data)
                if rec is None:
                    trailer = Trailer.decode(e.data)
                else:
                    index.append((rec.position, e.position))
            last = ledger.last_confirmed
            if not entries or last is None or entries[-1].position >= last:
                break
            start = next_position(entries[-1].position)
        if trailer is None:
            return None
        return cls(ledger, trailer, index)

    def first_at_or_after(self, pos: Position) -> int:
        return bisect.bisect_left(self.originals, pos)

    async def read(
        self, start: Position, max_entries: int, skip: Callable[[ViewRecord], bool]
    ) -> tuple[list[ViewRecord], Position | None]:
        """Up to ``max_entries`` records at or after ``start`` that ``skip`` does not drop;
        and the next position to read in the view (None: the view is exhausted)."""
        i = self.first_at_or_after(start)
        out: list[ViewRecord] = []
        while i < len(self) and len(out) < max_entries:
            got = await self.ledger.read_entries(self.locations[i], READ_BATCH_ENTRIES)
            if not got:
                break
            for e in got:
                rec = decode_record(e.data)
                if rec is None:  # the trailer
                    i = len(self)
                    break
                i += 1
                if skip(rec):
                    continue
                out.append(rec)
                if len(out) >= max_entries:
                    break
        return out, (self.originals[i] if i < len(self) else None)

    async def read_at(self, pos: Position) -> ViewRecord | None:
        i = self.first_at_or_after(pos)
        if i >= len(self) or self.originals[i] != pos:
            return None
        got = await self.ledger.read_entries(self.locations[i], 1)
        return decode_record(got[0].data) if got else None


__all__ = [
    "COMPACTION_SUBSCRIPTION",
    "READ_BATCH_ENTRIES",
    "CompactedView",
    "Trailer",
    "ViewRecord",
    "decode_record",
    "encode_record",
    "generation_of",
    "next_position",
    "view_name",
    "views_prefix",
]
