"""Reading: batch (``DataSourceReader``) and streaming (``DataSourceStreamReader``).

Owns: planning a read into ``Split``s (each topic-partition's range, its start and its
inclusive end fixed when planned: a batch read is a snapshot; cut into splits by ``splits``
from the partition's ledgers, asked of the admin REST API, so one topic-partition is read by
several tasks at once), the choice of the read path (``readPath``: sealed entries straight
from the bookies in the tasks, or everything through a broker; unset: the bookies where the
planner gets the ledgers and the bookies answer the tasks), the streaming offsets (see
``positions``), admission control (``maxRecordsPerTrigger`` / ``maxBytesPerTrigger``: the
driver reads the ids ahead to cut each micro-batch exactly at the cap, across all partitions),
``Trigger.AvailableNow`` (the end is fixed when the query starts), the optional progress
cursor advanced on ``commit``, filter pushdown of batch reads (``__topic`` equal to, in, or
starting with: topic-partitions pruned at planning), and the executor side (``read_split``:
Arrow record batches of one split, from the bookies through ``storage`` and ``columns``, or
from a non-durable reader).

Invariants: a partition's range is ``start`` (exclusive after / inclusive at / earliest) to
``end`` (inclusive); its splits cover it exactly once; a micro-batch's end offset is never
before its start offset; partitions found later (a pattern, more partitions) start at
earliest. A split carries everything its task needs (bookie addresses included): tasks share
nothing with the driver's process.

Must not know: how Spark serialises offsets (they are flat JSON objects of strings here).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
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

from magnetar.client.protocol import RemoteProtocolError, entry_num_messages
from magnetar.spark import cluster
from magnetar.spark.layout import PartitionLayout
from magnetar.spark.options import OptionError, ReadOptions
from magnetar.spark.positions import Position, Start, decode_offset, encode_offset
from magnetar.spark.splits import Located, cut, locate, split_counts
from magnetar.spark.tasks import Split, bookie_tls, read_split, storage_missing
from magnetar.spark.typed import TopicSchema

log = logging.getLogger(__name__)


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


async def _layouts(opts: ReadOptions, parts: list[str]) -> dict[str, PartitionLayout] | None:
    """Where ``parts`` are stored (the admin REST API's ``/ledgers``), or None when the read
    goes through a broker in one task per topic-partition: no ``admin.url``, or the admin
    API did not answer and ``readPath`` is not ``storage`` (which then fails, naming it)."""
    if not parts or (opts.client.admin_url is None and opts.read_path != "storage"):
        return None
    if opts.reader_kwargs.get("is_read_compacted"):
        return None  # the compacted view is the broker's
    try:
        got = await asyncio.gather(
            *(asyncio.to_thread(cluster.fetch_layout, opts.client, p) for p in parts)
        )
    except cluster.LayoutUnavailable as exc:
        if opts.read_path == "storage":
            raise OptionError(
                f"option 'readPath' = 'storage': the admin API did not give the topic's "
                f"ledgers ({exc}); the role needs to be allowed the topic's admin reads, or "
                "set readPath=broker to read through the broker"
            ) from None
        log.info("reading through the broker, in one task per topic-partition: %s", exc)
        return None
    return dict(zip(parts, got, strict=True))


SAMPLE_ENTRIES = 32
"""Entries a planner reads from the bookies per topic-partition to estimate its messages per
entry (what ``maxRecordsPerPartition`` and ``minPartitions`` count in)."""
SAMPLE_TIMEOUT_S = 5.0


async def _sampled_messages_per_entry(
    opts: ReadOptions, layout: PartitionLayout, loc: Located
) -> float | None:
    """Messages per entry over ``SAMPLE_ENTRIES`` entries spread evenly over the range, read
    from the bookies (None when they do not answer the planner: the broker's count since it
    loaded the topic is used, else one)."""
    if storage_missing() is not None:
        return None
    from magnetar.spark import storage

    total = loc.entries
    if total == 0:
        return None
    wanted = sorted({(k * total) // SAMPLE_ENTRIES for k in range(min(SAMPLE_ENTRIES, total))})
    picks: dict[int, tuple[Any, list[int]]] = {}
    seen = 0
    for r in loc.ranges:
        ids = [r.first + w - seen for w in wanted if seen <= w < seen + r.entries]
        if ids:
            picks[r.ledger.ledger_id] = (r.ledger, ids)
        seen += r.entries
    reader = storage.LedgerReader(
        tls=bookie_tls(opts) if layout.bookie_tls else None, offload=opts.offload
    )
    try:
        got = await asyncio.wait_for(
            asyncio.gather(*(reader.sample(led, ids) for led, ids in picks.values())),
            SAMPLE_TIMEOUT_S,
        )
        counts = [entry_num_messages(data) for chunk in got for data in chunk]
    except (storage.StorageError, RemoteProtocolError, TimeoutError) as exc:
        log.info("%s: no entries sampled from the bookies: %s", layout.topic, exc)
        return None
    finally:
        await reader.close()
    return sum(counts) / len(counts) if counts else None


async def plan_splits(
    opts: ReadOptions,
    starts: dict[str, Start],
    ends: dict[str, Position],
    ending_time_ms: int | None,
) -> list[Split]:
    """The splits of reading each topic-partition of ``ends`` from ``starts`` (earliest when
    missing) up to its end. With the partitions' ledgers known, each range is cut by
    ``splits``: by default on the storage path (``SPLIT_BYTES_MAX`` a split), on the broker
    path only when ``minPartitions`` or ``maxRecordsPerPartition`` asks for it (a split
    boundary must not cut a chunked message there). Messages the range needed that are gone
    fail the read or are skipped, as ``failOnDataLoss`` says."""
    parts = [p for p in sorted(ends) if starts.get(p, Start.earliest()).is_before_or_at(ends[p])]
    begin = {p: starts.get(p, Start.earliest()) for p in parts}
    layouts = await _layouts(opts, parts)
    whole = [Split(p, str(begin[p]), str(ends[p]), ending_time_ms=ending_time_ms) for p in parts]
    if layouts is None:
        return whole
    storage = opts.read_path != "broker"
    if storage:
        missing = storage_missing()
        if missing is not None and opts.read_path == "storage":
            raise OptionError(f"option 'readPath' = 'storage': {missing}")
        storage = missing is None
    located = []
    for p in parts:
        loc = locate(layouts[p], begin[p], ends[p])
        if loc.lost is not None:
            cluster.data_loss(opts.fail_on_data_loss, loc.lost)
        mpe = layouts[p].messages_per_entry
        if opts.max_records_per_partition or opts.min_partitions:
            mpe = await _sampled_messages_per_entry(opts, layouts[p], loc) or mpe
        located.append((loc, mpe))
    if storage or opts.min_partitions or opts.max_records_per_partition:
        counts = split_counts(
            located,
            max_records_per_partition=opts.max_records_per_partition,
            min_partitions=opts.min_partitions,
        )
    else:
        counts = [min(1, loc.entries) for loc, _ in located]
    out = []
    for p, (loc, _), n, broker_split in zip(parts, located, counts, whole, strict=True):
        if loc.entries == 0 and loc.lost is None:
            out.append(broker_split)  # the ledgers did not show the range: the reader will
            continue
        for ranges in cut(loc, n):
            out.append(
                Split(
                    p,
                    str(begin[p]),
                    str(ends[p]),
                    ranges,
                    storage=storage,
                    fallback=opts.read_path is None,
                    bookie_tls=layouts[p].bookie_tls,
                    ending_time_ms=ending_time_ms,
                )
            )
    return out


class BatchReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, opts: ReadOptions, typed: TopicSchema | None = None) -> None:
        self.opts = opts
        self.typed = typed
        self.topic_tests: list[TopicTest] = []

    def partitions(self) -> list[Split]:
        opts = self.opts

        async def plan() -> list[Split]:
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
            read = {p: e for p, e in ends.items() if e is not None and passes(self.topic_tests, p)}
            return await plan_splits(opts, starts, read, opts.ending_time_ms)

        return _run(plan())  # type: ignore[no-any-return]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, Split)
        yield from read_split(self.opts, partition, self.typed)


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

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[Split]:
        starts = decode_offset(start)
        ends = {
            name: e.position
            for name, e in decode_offset(end).items()
            if e.kind == "after" and e.position is not None
        }
        begin = {name: starts.get(name, Start.earliest()) for name in ends}
        return _run(plan_splits(self.opts, begin, ends, None))  # type: ignore[no-any-return]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, Split)
        yield from read_split(self.opts, partition, self.typed)

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


__all__ = ["BatchReader", "StreamReader", "plan_splits"]
