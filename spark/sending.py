"""One write task's sends to one topic-partition: its rows as batch entries, cut the same way
on every attempt of the task.

Owns: ``PartitionSender``. The rows a task routes to one topic-partition are numbered 0, 1,
2, ... in input order (their sequence ids under ``exactlyOnce``) and cut into batches on a
grid that depends on those rows only: a batch holds at most ``max_messages`` rows and
``max_bytes`` payload bytes (one row at least), and the last one ends with the task's input.
Plain payloads go out with ``Producer.send_batch`` (the producer numbers them: its next
sequence id is the first row's index, see below); rows with a key, properties or an event
time (and every row when the producer does not batch: ``batched`` false, one entry a row)
with ``send_async`` and explicit sequence ids, their batch cut by the partition
producer's ``flush_batches`` at the grid's boundary (the producer's own batching limits are
set above the grid's, and its delay timer out of the way, so it never cuts one itself).

Rows the broker already stored (index <= the producer's last stored sequence id, learned when
it connected under the task's producer name) are skipped; a grid batch holding some of them
goes out as its remainder, whose first id is past what is stored.

Why a grid: the broker deduplicates a batch entry by its first sequence id and records its
highest. A retried task (or replayed micro-batch) sends, after what is stored, exactly the
batches the failed attempt would have sent: each is either one the broker has (dropped whole,
even if it was still in flight when the retry connected) or one it has not (stored whole),
never one straddling both. Without ``exactlyOnce`` the same cuts apply, with no name and no
skipping.

Must not know: Spark, Arrow, how rows are routed or encoded.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class SendCounts:
    sent: int = 0  # messages sent and stored
    deduplicated: int = 0  # sent, and dropped by the broker as already stored
    skipped: int = 0  # not sent: the broker had them from an earlier attempt


@dataclass(frozen=True, slots=True)
class Extras:
    """What a row carries besides its payload (any of it: ``send_async``)."""

    key: str | None = None
    properties: dict[str, str] | None = None
    event_time_ms: int | None = None


class PartitionSender:
    """The rows of one task for one topic-partition (see the module docstring)."""

    def __init__(
        self,
        producer: Any,
        *,
        max_messages: int,
        max_bytes: int,
        batched: bool = True,
        skip_upto: int,
        counts: SendCounts,
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.producer = producer
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.batched = batched
        """False: one entry a row (the producer does not batch), each with its own id."""
        self.skip_upto = skip_upto
        """The last sequence id the broker stored under the task's name (-1: none)."""
        self.counts = counts
        self.on_error = on_error
        self.next_index = 0
        """The index (sequence id) the next row gets."""
        self._batch: list[bytes] = []
        self._extras: list[Extras | None] = []
        self._batch_bytes = 0
        self._plain = True

    async def add(self, payload: bytes, extras: Extras | None = None) -> None:
        """Queue one row (``extras``: its key, properties, event time, if any)."""
        size = len(payload)
        if self._batch and (
            len(self._batch) >= self.max_messages or self._batch_bytes + size > self.max_bytes
        ):
            await self._cut()
        self._batch.append(payload)
        self._extras.append(extras)
        self._batch_bytes += size
        if extras is not None:
            self._plain = False

    async def add_plain(self, payloads: list[bytes]) -> None:
        """Queue rows with no extras, in order."""
        i, n = 0, len(payloads)
        while i < n:
            room = self.max_messages - len(self._batch)
            if room <= 0:
                await self._cut()
                continue
            take = payloads[i : i + room]
            sizes = list(itertools.accumulate(map(len, take)))
            fits = bisect.bisect_right(sizes, self.max_bytes - self._batch_bytes)
            if fits < len(take):  # the byte bound ends this batch first
                if fits == 0:
                    await self.add(payloads[i])  # cuts first, or a lone big row
                    i += 1
                    continue
                take = take[:fits]
            size = sizes[len(take) - 1]
            self._batch.extend(take)
            self._extras.extend([None] * len(take))
            self._batch_bytes += size
            i += len(take)

    async def finish(self) -> None:
        """Send the last batch (the input's end is a grid boundary)."""
        if self._batch:
            await self._cut()

    async def _cut(self) -> None:
        batch, extras, plain = self._batch, self._extras, self._plain
        first = self.next_index
        self.next_index += len(batch)
        self._batch, self._extras, self._batch_bytes, self._plain = [], [], 0, True
        stored = self.skip_upto - first + 1  # how many of them the broker has
        if stored >= len(batch):
            self.counts.skipped += len(batch)
            return
        if stored > 0:
            self.counts.skipped += stored
            batch, extras = batch[stored:], extras[stored:]
            first += stored
        if plain and self.batched:
            fut = await self.producer.send_batch(batch)
            fut.add_done_callback(self._batch_done)
            return
        none = Extras()
        for seq, (payload, row) in enumerate(zip(batch, extras, strict=True), first):
            ex = row or none
            f = await self.producer.send_async(
                payload,
                properties=ex.properties,
                partition_key=ex.key,
                event_timestamp=ex.event_time_ms,
                sequence_id=seq,
            )
            f.add_done_callback(self._one_done)
        if self.batched:
            for part in self.producer.partitions:
                part.flush_batches()

    def _batch_done(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self.on_error(asyncio.CancelledError("send cancelled"))
            return
        exc = fut.exception()
        if exc is not None:
            self.on_error(exc)
            return
        for _topic, _part, _ledger, entry, n in fut.result().entries():
            if entry < 0:
                self.counts.deduplicated += n
            else:
                self.counts.sent += n

    def _one_done(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self.on_error(asyncio.CancelledError("send cancelled"))
            return
        exc = fut.exception()
        if exc is not None:
            self.on_error(exc)
        elif fut.result().entry_id() < 0:
            self.counts.deduplicated += 1
        else:
            self.counts.sent += 1


__all__ = ["Extras", "PartitionSender", "SendCounts"]
