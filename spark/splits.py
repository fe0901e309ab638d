"""Splits: cutting a read of topic-partitions into Spark tasks (pure: no I/O, no Spark).

Owns: ``locate`` (a topic-partition's range, ``start`` to ``end``, as entry ranges of its
ledgers, and whether messages it needed are gone), ``split_counts`` (how many tasks each
topic-partition gets, by the options ``maxRecordsPerPartition`` and ``minPartitions`` as
Spark's Kafka source reads them, and a byte bound per task) and ``cut`` (a topic-partition's
entry ranges in that many splits of about equal entries: whole small ledgers together, large
ledgers by entry ranges). A split never crosses a ledger in the middle of another split's
piece, and the splits of one topic-partition cover its range exactly once, in order.

Batch members at the edges (the messages of the first entry at or before ``start``, of the
last entry after ``end``) are filtered by the reader; the ranges here are whole entries.

Must not know: Spark, bookies, the broker.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.spark.layout import LedgerLayout, PartitionLayout
from magnetar.spark.positions import Position, Start

SPLIT_BYTES_MAX = 32 << 20
"""A split holds at most about this many stored bytes (a task's work, whatever the options)."""


@dataclass(frozen=True, slots=True)
class EntryRange:
    """Entries ``first`` .. ``last`` (inclusive) of one ledger."""

    ledger: LedgerLayout
    first: int
    last: int

    @property
    def entries(self) -> int:
        return self.last - self.first + 1

    @property
    def stored_bytes(self) -> float:
        return self.entries * self.ledger.entry_bytes


@dataclass(frozen=True, slots=True)
class Located:
    """A topic-partition's range in its ledgers."""

    ranges: tuple[EntryRange, ...]
    lost: str | None = None
    """Set when messages the range starts at are gone (retention, a deleted topic): why."""

    @property
    def entries(self) -> int:
        return sum(r.entries for r in self.ranges)

    @property
    def stored_bytes(self) -> float:
        return sum(r.stored_bytes for r in self.ranges)


def locate(layout: PartitionLayout, start: Start, end: Position) -> Located:
    """The entries holding the messages after/at ``start`` up to ``end`` (inclusive).

    When the ledger of the message the range starts after (or at) is no longer there, the
    messages from it to the first ledger left are lost: ``lost`` says so and the range starts
    at the first ledger left (the caller fails or warns, as ``failOnDataLoss`` says)."""
    ledgers = [led for led in layout.ledgers if led.ledger_id <= end.ledger]
    lost = None
    first_ledger, first_entry = -1, 0
    pos = start.position
    if pos is not None:
        held = layout.ledger(pos.ledger)
        if held is None and (not layout.ledgers or pos.ledger < layout.ledgers[0].ledger_id):
            first = layout.ledgers[0].ledger_id if layout.ledgers else None
            lost = (
                f"{layout.topic}: the message {pos} the query "
                f"{'resumes after' if start.kind == 'after' else 'starts at'} is gone ("
                + (f"the first ledger left is {first}" if first is not None else "no ledger left")
                + "); messages were deleted by retention or the topic was deleted"
            )
        elif held is None:  # a ledger dropped from the middle (it held nothing): go on after it
            first_ledger = pos.ledger + 1
        else:
            first_ledger, first_entry = pos.ledger, pos.entry
            if start.kind == "after" and pos.batch < 0:
                first_entry += 1  # a whole message was the last one read: its entry is done
    out = []
    for led in ledgers:
        if led.ledger_id < first_ledger:
            continue
        lo = first_entry if led.ledger_id == first_ledger else 0
        hi = end.entry if led.ledger_id == end.ledger else led.entries - 1
        if hi >= lo:
            out.append(EntryRange(led, lo, hi))
    return Located(tuple(out), lost)


def _est_records(located: Located, messages_per_entry: float | None) -> float:
    return located.entries * (messages_per_entry or 1.0)


def split_counts(
    located: Sequence[tuple[Located, float | None]],
    *,
    max_records_per_partition: int | None,
    min_partitions: int | None,
    split_bytes_max: int = SPLIT_BYTES_MAX,
) -> list[int]:
    """How many splits each (located range, messages per entry) gets.

    ``maxRecordsPerPartition``: about that many messages per split at most (estimated from
    entries x messages per entry); a split also holds at most ``split_bytes_max`` stored
    bytes. ``minPartitions``: when that gives fewer splits in all, each range gets its share
    of ``minPartitions`` by estimated size (Spark's ``KafkaOffsetRangeCalculator``). Never
    more splits than entries; empty ranges get none."""
    counts = []
    for loc, mpe in located:
        if loc.entries == 0:
            counts.append(0)
            continue
        n = math.ceil(loc.stored_bytes / split_bytes_max)
        if max_records_per_partition is not None:
            n = max(n, math.ceil(_est_records(loc, mpe) / max_records_per_partition))
        counts.append(max(1, n))
    if min_partitions is not None and 0 < sum(counts) < min_partitions:
        sizes = [_est_records(loc, mpe) for loc, mpe in located]
        total = sum(sizes)
        counts = [
            max(c, round(size / total * min_partitions)) if c else 0
            for c, size in zip(counts, sizes, strict=True)
        ]
    return [min(c, loc.entries) for c, (loc, _) in zip(counts, located, strict=True)]


def cut(located: Located, n: int) -> list[tuple[EntryRange, ...]]:
    """``located`` as ``n`` (or fewer) splits of about equal entries, in order: consecutive
    ledger ranges smaller than the target share a split, larger ones are cut by entry ids."""
    if n <= 0 or not located.ranges:
        return []
    target = max(1, math.ceil(located.entries / n))
    out: list[tuple[EntryRange, ...]] = []
    group: list[EntryRange] = []
    held = 0
    for r in located.ranges:
        if group and held + r.entries > target:
            out.append(tuple(group))
            group, held = [], 0
        if r.entries <= target:
            group.append(r)
            held += r.entries
            continue
        pieces = math.ceil(r.entries / target)
        lo = r.first
        for i in range(pieces):
            size = (r.last + 1 - lo) // (pieces - i)
            out.append((EntryRange(r.ledger, lo, lo + size - 1),))
            lo += size
    if group:
        out.append(tuple(group))
    return out


__all__ = ["SPLIT_BYTES_MAX", "EntryRange", "Located", "cut", "locate", "split_counts"]
