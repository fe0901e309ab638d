"""Reading: batch (``DataSourceReader``) and streaming (``DataSourceStreamReader``).

Owns: planning a read into one ``RangePartition`` per topic-partition (its start and its
inclusive end, fixed when planned: a batch read is a snapshot), the streaming offsets (see
``positions``), admission control (``maxRecordsPerTrigger`` / ``maxBytesPerTrigger``: the
driver reads the ids ahead to cut each micro-batch exactly at the cap, across all partitions),
``Trigger.AvailableNow`` (the end is fixed when the query starts), the optional progress
cursor advanced on ``commit``, filter pushdown of batch reads (``__topic`` equal to, in, or
starting with: topic-partitions pruned at planning), and the executor side
(``read_partition``: a non-durable reader per range, yielding Arrow record batches).

Invariants: a partition's range is ``start`` (exclusive after / inclusive at / earliest) to
``end`` (inclusive); a micro-batch's end offset is never before its start offset; partitions
found later (a pattern, more partitions) start at earliest.

Must not know: how Spark serialises offsets (they are flat JSON objects of strings here).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    In,
    InputPartition,
    StringStartsWith,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from magnetar.spark import cluster
from magnetar.spark.options import OptionError, ReadOptions
from magnetar.spark.positions import Position, Start, decode_offset, encode_offset
from magnetar.spark.rows import BatchBuilder
from magnetar.spark.typed import TopicSchema

log = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 10_000


@dataclass
class RangePartition(InputPartition):  # type: ignore[misc]
    """One topic-partition's messages of one batch: after/at ``start`` up to ``end``."""

    topic: str
    start: str  # Start's string form
    end: str  # Position's string form, inclusive
    ending_time_ms: int | None = None


def read_partition(
    opts: ReadOptions, part: RangePartition, typed: TopicSchema | None = None
) -> Iterator[Any]:
    """Executor side: the range as Arrow record batches (a private event loop per task)."""
    loop = asyncio.new_event_loop()
    try:
        client = cluster.open_client(opts.client)
        builder = BatchBuilder(part.topic, typed)
        writers: dict[bytes, Any] = {}  # schema version -> the pb.Schema that wrote it
        it = cluster.read_range(
            client,
            part.topic,
            Start.parse(part.start),
            Position.parse(part.end),
            fail_on_data_loss=opts.fail_on_data_loss,
            poll_timeout_ms=opts.poll_timeout_ms,
            reader_kwargs=opts.reader_kwargs,
        )
        until = part.ending_time_ms

        async def fill() -> bool:
            """Fill the builder; False once the range is done."""
            async for msg in it:
                if until is not None and msg.publish_timestamp() >= until:
                    continue
                version = msg.schema_version()
                if typed is not None and version and version not in writers:
                    answer = await client.get_schema_info(
                        part.topic, int.from_bytes(version, "big", signed=True)
                    )
                    writers[version] = None if answer is None else answer.schema
                builder.add(msg, writers.get(version) if version else None)
                if len(builder) >= ARROW_BATCH_ROWS:
                    return True
            return False

        try:
            more = True
            while more:
                more = loop.run_until_complete(fill())
                if len(builder):
                    yield builder.build()
        finally:
            loop.run_until_complete(it.aclose())
            loop.run_until_complete(client.close())
    finally:
        loop.close()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _check_known(spec_names: set[str], partitions: list[str], option: str) -> None:
    unknown = sorted(spec_names - set(partitions))
    if unknown:
        raise OptionError(
            f"option {option!r} names {unknown[0]}, which is not a partition of the selected "
            f"topics ({', '.join(partitions) or 'none found'})"
        )


async def _initial_starts(
    client: Any, opts: ReadOptions, partitions: list[str], lasts: dict[str, Position | None]
) -> dict[str, Start]:
    starting = opts.starting
    if opts.starting_time_ms is not None:
        got = await asyncio.gather(
            *(
                cluster.start_at_time(
                    client, p, opts.starting_time_ms, lasts[p], min(opts.poll_timeout_ms, 10_000)
                )
                for p in partitions
            )
        )
        return dict(zip(partitions, got, strict=True))
    if starting.keyword == "earliest":
        return dict.fromkeys(partitions, Start.earliest())
    if starting.keyword == "latest":
        out: dict[str, Start] = {}
        for p in partitions:
            last = lasts[p]
            out[p] = Start.earliest() if last is None else Start.after(last)
        return out
    _check_known(set(starting.per_partition), partitions, "startingOffsets")
    return {
        p: (
            Start.at(starting.per_partition[p]) if p in starting.per_partition else Start.earliest()
        )
        for p in partitions
    }


TopicTest = tuple[str, tuple[str, ...]]
"""A pushed ``__topic`` filter as data (the reader is pickled): ("in", names) or ("prefix",
(prefix,))."""


def topic_test(f: Any) -> TopicTest | None:
    """The ``__topic`` filter ``f`` as a ``TopicTest``; None when it is another filter."""
    if tuple(getattr(f, "attribute", ())) != ("__topic",):
        return None
    if isinstance(f, EqualTo) and isinstance(f.value, str):
        return ("in", (f.value,))
    if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
        return ("in", tuple(f.value))
    if isinstance(f, StringStartsWith) and isinstance(f.value, str):
        return ("prefix", (f.value,))
    return None


def passes(tests: list[TopicTest], partition: str) -> bool:
    return all(
        partition in values if kind == "in" else partition.startswith(values[0])
        for kind, values in tests
    )


class BatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: ReadOptions, typed: TopicSchema | None = None) -> None:
        self.opts = opts
        self.typed = typed
        self.topic_tests: list[TopicTest] = []

    def partitions(self) -> list[RangePartition]:
        opts = self.opts

        async def plan() -> list[RangePartition]:
            client = cluster.open_client(opts.client)
            try:
                parts, lasts = await cluster.partitions_and_lasts(
                    client, opts.selection, wait=opts.wait_for_topics
                )
                starts = await _initial_starts(client, opts, parts, lasts)
            finally:
                await client.close()
            ends = dict(lasts)
            if opts.ending.keyword is None:
                _check_known(set(opts.ending.per_partition), parts, "endingOffsets")
                ends.update(opts.ending.per_partition)
            out = []
            for p in parts:
                end = ends[p]
                if (
                    end is not None
                    and starts[p].is_before_or_at(end)
                    and passes(self.topic_tests, p)
                ):
                    out.append(RangePartition(p, str(starts[p]), str(end), opts.ending_time_ms))
            return out

        return _run(plan())  # type: ignore[no-any-return]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        yield from read_partition(self.opts, partition, self.typed)


class FilteringBatchReader(BatchReader):
    """A batch reader with filter pushdown (option ``filterPushdown=true``; Spark passes
    filters when ``spark.sql.python.filterPushdown.enabled`` is true, and refuses a reader
    that could take them while it is false)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        """Filters on ``__topic`` (=, IN, starts with) prune topic-partitions at planning:
        every row of a partition carries its name, so they are applied here exactly and not
        again by Spark. Every other filter is left to Spark."""
        for f in filters:
            test = topic_test(f)
            if test is None:
                yield f
            else:
                self.topic_tests.append(test)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """Lives in one long-running Python process on the driver for the whole query."""

    def __init__(self, opts: ReadOptions, typed: TopicSchema | None = None) -> None:
        self.opts = opts
        self.typed = typed
        self._target: dict[str, Position | None] | None = None  # Trigger.AvailableNow
        self._latest: dict[str, str] | None = None  # uncapped head, for progress reports

    # -- offsets ---------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, str]:
        opts = self.opts

        async def go() -> dict[str, Start]:
            client = cluster.open_client(opts.client)
            try:
                parts, lasts = await cluster.partitions_and_lasts(
                    client, opts.selection, wait=opts.wait_for_topics
                )
                return await _initial_starts(client, opts, parts, lasts)
            finally:
                await client.close()

        return encode_offset(_run(go()))

    def prepareForTriggerAvailableNow(self) -> None:
        opts = self.opts

        async def go() -> dict[str, Position | None]:
            client = cluster.open_client(opts.client)
            try:
                _, lasts = await cluster.partitions_and_lasts(
                    client, opts.selection, wait=opts.wait_for_topics
                )
                return lasts
            finally:
                await client.close()

        self._target = _run(go())

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, str]:
        opts = self.opts
        starts = decode_offset(start)
        max_rows = max_bytes = None
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
            max_bytes = opts.max_bytes_per_trigger
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
            max_rows = opts.max_records_per_trigger
        elif limit is None:  # Spark without admission control: cap from our own options
            max_rows, max_bytes = opts.max_records_per_trigger, opts.max_bytes_per_trigger

        async def go() -> tuple[dict[str, Start], dict[str, Start]]:
            client = cluster.open_client(opts.client)
            try:
                parts = await cluster.resolve_partitions(client, opts.selection)
                if self._target is not None:
                    parts = [p for p in parts if p in self._target]
                    lasts = {p: self._target[p] for p in parts}
                else:
                    lasts = await cluster.last_positions(client, parts)
                begin = {p: starts.get(p, Start.earliest()) for p in parts}
                head = {
                    p: (
                        Start.after(last)
                        if last is not None and begin[p].is_before_or_at(last)
                        else begin[p]
                    )
                    for p, last in lasts.items()
                }
                if max_rows is None and max_bytes is None:
                    return head, head
                capped = await _capped(
                    client, opts, begin, lasts, max_rows=max_rows, max_bytes=max_bytes
                )
                return capped, head
            finally:
                await client.close()

        end, head = _run(go())
        # partitions that vanished from the listing keep their offset
        for name, s in starts.items():
            end.setdefault(name, s)
            head.setdefault(name, s)
        self._latest = encode_offset(head)
        return encode_offset(end)

    def reportLatestOffset(self) -> dict[str, str] | None:
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        starts = decode_offset(start)
        ends = decode_offset(end)
        out = []
        for name, e in sorted(ends.items()):
            if e.kind != "after" or e.position is None:
                continue
            s = starts.get(name, Start.earliest())
            if s.is_before_or_at(e.position):
                out.append(RangePartition(name, str(s), str(e.position)))
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        yield from read_partition(self.opts, partition, self.typed)

    def commit(self, end: dict[str, Any]) -> None:
        name = self.opts.subscription_name
        if name is None:
            return
        positions = {
            p: s.position
            for p, s in decode_offset(end).items()
            if s.kind == "after" and s.position is not None
        }
        if not positions:
            return
        opts = self.opts

        async def go() -> None:
            client = cluster.open_client(opts.client)
            try:
                await cluster.advance_cursor(client, name, positions)
            finally:
                await client.close()

        try:
            _run(go())
        except Exception as exc:  # the cursor is informational: never fail the query for it
            log.warning("could not advance subscription %r: %s", name, exc)

    def stop(self) -> None:
        pass


async def _capped(
    client: Any,
    opts: ReadOptions,
    begin: dict[str, Start],
    lasts: dict[str, Position | None],
    *,
    max_rows: int | None,
    max_bytes: int | None,
) -> dict[str, Start]:
    """End offsets holding at most ``max_rows`` messages and ``max_bytes`` payload bytes
    (at least one message when any is available), shared out fairly across partitions."""
    out = dict(begin)
    iters: dict[str, Any] = {}
    for p, last in lasts.items():
        if last is not None and begin[p].is_before_or_at(last):
            iters[p] = cluster.read_range(
                client,
                p,
                begin[p],
                last,
                fail_on_data_loss=opts.fail_on_data_loss,
                poll_timeout_ms=opts.poll_timeout_ms,
                reader_kwargs={},
            )
    rows_left = max_rows if max_rows is not None else 1 << 62
    bytes_left = max_bytes if max_bytes is not None else 1 << 62
    taken = 0
    try:
        while iters and rows_left > 0 and bytes_left > 0:
            row_share = max(1, rows_left // len(iters))
            byte_share = max(1, bytes_left // len(iters))
            for p in list(iters):
                rows = nbytes = 0
                while rows < row_share and rows_left > 0:
                    try:
                        msg = await anext(iters[p])
                    except StopAsyncIteration:
                        await iters.pop(p).aclose()
                        break
                    size = len(msg.data())
                    if taken and (nbytes + size > byte_share or size > bytes_left):
                        # over this partition's byte share: it ends before this message
                        await iters.pop(p).aclose()
                        break
                    out[p] = Start.after(cluster.position_of(msg.message_id()))
                    rows += 1
                    nbytes += size
                    taken += 1
                    rows_left -= 1
                    bytes_left -= size
                if bytes_left <= 0 or rows_left <= 0:
                    break
    finally:
        for it in iters.values():
            await it.aclose()
    return out


__all__ = ["BatchReader", "RangePartition", "StreamReader", "read_partition"]
