"""Writing: batch (``DataSourceArrowWriter``) and streaming (``DataSourceStreamArrowWriter``).

Owns: one task's writing (``write_task``): its Arrow batches into rows, each row routed to a
target topic-partition (a keyed row to ``hash(key) % partitions`` as the official client's
default; a keyless row to ``row index % partitions``, so a retried task routes every row as
before) and handed to that partition's ``sending.PartitionSender``, which sends them as batch
entries cut on a grid fixed by the rows alone; and, with ``exactlyOnce=true``, the producer
name that makes a retry idempotent:

    producer name = magnetar-spark-<query id>-<batch id>-<task partition>  (streaming)
                    magnetar-spark-<write id>-<task partition>            (batch)
    sequence id   = the row's index among the task's rows for that topic-partition

A DataFrame of one ``value`` column written to a ``topic`` goes the fast way: the column's
payloads, sliced per partition, straight into the senders (``send_batch``); any other one row
by row (``rows.rows_of``). A target topic with an AVRO or JSON record schema gets each row's
data columns encoded with that schema (Avro binary / JSON text), and its producers announce
the registered schema, so the messages carry its version; a data column the schema has no
field for fails the task (written, it would be lost). Other topics get the lone ``value``
column as it is, or the data columns packed as one JSON object.

A retried task or a replayed micro-batch re-sends the same rows under the same name and ids,
cut into the same batches; the broker's deduplication drops the batches it already stored,
and the producer learns on connecting the last id stored and skips up to it (``sending``
explains why the cuts must match). This needs the task's input to be the same rows in the
same order on a retry, as any idempotent sink does.

Failed sends fail the task with the broker's error.

Must not know: offsets, reading.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from magnetar.client import PulsarException, hash_key
from magnetar.spark import cluster
from magnetar.spark.options import WriteOptions, full_topic_name
from magnetar.spark.rows import OutgoingRow, SinkLayout, json_payload, rows_of
from magnetar.spark.sending import Extras, PartitionSender, SendCounts
from magnetar.spark.typed import RegisteredSchema, TopicSchema

log = logging.getLogger(__name__)

BATCH_MESSAGES = 1000
BATCH_BYTES = 128 * 1024
"""The grid's default batch: Pulsar's ``batchingMaxMessages`` and ``batchingMaxBytes``."""
PENDING_BATCHES = 16
PENDING_ROWS = 2000
"""In flight per topic-partition: 16 batches, and at least 2,000 rows (one entry a row when
the producer does not batch): the producer's ``maxPendingMessages`` default."""
NO_BATCH_TIMER_MS = 3_600_000
"""The producers' batching delay: beyond any task, so only the grid cuts batches."""


class WriteError(RuntimeError):
    """A row could not be written (no topic for it, or the broker refused it)."""


@dataclass
class WriteReport(WriterCommitMessage):  # type: ignore[misc]
    producer_name: str | None
    sent: int  # messages sent and stored
    deduplicated: int  # sent, and dropped by the broker as already stored
    skipped: int  # not sent: the broker had them from an earlier attempt


class _Targets:
    """One task's target topics: their partitions, schemas, producers and senders."""

    def __init__(self, client: Any, opts: WriteOptions, producer_name: str | None) -> None:
        self.client = client
        self.opts = opts
        self.producer_name = producer_name
        self.counts = SendCounts()
        self.errors: list[BaseException] = []
        self.partitions_of: dict[str, list[str]] = {}
        # topic -> (its record schema, if any: rows are encoded with it; its registered
        # pb.Schema, announced byte for byte by its producers)
        self.schemas: dict[str, tuple[TopicSchema | None, Any]] = {}
        self.senders: dict[str, PartitionSender] = {}
        kw = dict(opts.producer_kwargs)
        self.chunking = bool(kw.pop("chunking_enabled", False))
        self.batching = bool(kw.pop("batching_enabled", True)) and not self.chunking
        self.max_messages = kw.pop("batching_max_messages", BATCH_MESSAGES)
        if not self.batching:
            self.max_messages = 1
        self.max_bytes = kw.pop("batching_max_allowed_size_in_bytes", BATCH_BYTES)
        kw.pop("batching_max_publish_delay_ms", None)
        kw.setdefault(
            "max_pending_messages", max(PENDING_ROWS, PENDING_BATCHES * (self.max_messages + 1))
        )
        self.producer_kwargs = kw

    async def schema(self, topic: str, columns: list[str]) -> TopicSchema | None:
        """The topic's record schema rows are encoded with (None: payloads as they are)."""
        if topic not in self.schemas:
            answer = await self.client.get_schema_info(topic)
            typed = None if answer is None else TopicSchema.of(answer.schema)
            if typed is not None and typed.record is None:
                typed = None  # a primitive schema: payloads as they are
            if typed is None:
                self.schemas[topic] = (None, None)
            else:
                try:
                    typed.check_columns(columns)
                except ValueError as exc:
                    raise WriteError(f"writing to {topic}: {exc}") from None
                self.schemas[topic] = (typed, answer.schema)
        return self.schemas[topic][0]

    async def partitions(self, topic: str) -> list[str]:
        parts = self.partitions_of.get(topic)
        if parts is None:
            parts = await self.client.get_topic_partitions(topic)
            if self.opts.exactly_once:
                assert self.opts.client.admin_url is not None
                await asyncio.to_thread(
                    cluster.ensure_deduplication,
                    self.opts.client.admin_url,
                    topic,
                    parts,
                    settings=self.opts.client,
                )
            self.partitions_of[topic] = parts
        return parts

    async def sender(self, topic: str, partition: str) -> PartitionSender:
        sender = self.senders.get(partition)
        if sender is None:
            schema = self.schemas.get(topic, (None, None))[1]
            producer = await self.client.create_producer(
                partition,
                producer_name=self.producer_name,
                block_if_queue_full=True,
                schema=RegisteredSchema(schema) if schema is not None else None,
                batching_enabled=self.batching,
                chunking_enabled=self.chunking,
                batching_max_messages=self.max_messages + 1,
                batching_max_allowed_size_in_bytes=self.max_bytes + 1,
                batching_max_publish_delay_ms=NO_BATCH_TIMER_MS,
                **self.producer_kwargs,
            )
            sender = PartitionSender(
                producer,
                max_messages=self.max_messages,
                max_bytes=self.max_bytes,
                batched=self.batching,
                skip_upto=producer.last_sequence_id() if self.opts.exactly_once else -1,
                counts=self.counts,
                on_error=self.errors.append,
            )
            self.senders[partition] = sender
        return sender

    async def finish(self) -> None:
        for s in self.senders.values():
            await s.finish()
        await asyncio.gather(
            *(s.producer.flush() for s in self.senders.values()), return_exceptions=True
        )

    def check(self) -> None:
        if self.errors:
            exc = self.errors[0]
            msg = f"{type(exc).__name__}: {exc}" if isinstance(exc, PulsarException) else str(exc)
            raise WriteError(f"sending to Magnetar failed: {msg}") from exc


def _plain_payloads(batch: Any, column: str) -> list[bytes]:
    """A ``value`` column's payloads (strings as UTF-8, nulls as empty payloads)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = batch.column(batch.schema.get_field_index(column))
    if not pa.types.is_binary(col.type):
        col = pc.cast(col, pa.binary())
    if col.null_count:
        col = pc.fill_null(col, pa.scalar(b"", pa.binary()))
    values: list[bytes] = col.to_pylist()
    return values


async def _write_plain(targets: _Targets, topic: str, batches: Iterator[Any], column: str) -> int:
    """The fast way: one ``value`` column to one topic (keyless: ``row index % n``)."""
    parts = await targets.partitions(topic)
    senders = [await targets.sender(topic, p) for p in parts]
    n = len(senders)
    rows = 0
    for batch in batches:
        values = _plain_payloads(batch, column)
        if n == 1:
            await senders[0].add_plain(values)
        else:
            for p, sender in enumerate(senders):
                await sender.add_plain(values[(p - rows) % n :: n])
        rows += len(values)
        if targets.errors:
            break
    return rows


async def _write_rows(
    targets: _Targets, opts: WriteOptions, layout: SinkLayout, batches: Iterator[Any]
) -> int:
    """Row by row: a ``__topic`` column, keys, properties, event times, record schemas."""
    seq = 0
    for batch in batches:
        for row in rows_of(batch, layout):
            topic = opts.topic or row.topic
            if not topic:
                raise WriteError(f"row {seq} has no '__topic' and no 'topic' option is set")
            full = full_topic_name(topic)
            typed = await targets.schema(full, list(row.record))
            parts = await targets.partitions(full)
            n = len(parts)
            name = parts[0] if n == 1 else parts[(hash_key(row.key) if row.key else seq) % n]
            sender = await targets.sender(full, name)
            extras = None
            if row.key is not None or row.properties or row.event_time_ms is not None:
                extras = Extras(row.key, row.properties, row.event_time_ms)
            await sender.add(_payload(full, typed, row, seq), extras)
            seq += 1
            if targets.errors:
                return seq
    return seq


def _payload(topic: str, typed: TopicSchema | None, row: OutgoingRow, seq: int) -> bytes:
    if typed is None:
        return row.payload if row.payload is not None else json_payload(row.record)
    try:
        return typed.encode(row.record)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise WriteError(
            f"row {seq} does not fit the {typed.type_name.upper()} schema of {topic}: "
            f"{type(exc).__name__}: {exc}"
        ) from None


async def write_task(
    opts: WriteOptions, layout: SinkLayout, batches: Iterator[Any], producer_name: str | None
) -> WriteReport:
    client = cluster.open_client(opts.client)
    targets = _Targets(client, opts, producer_name)
    try:
        plain = (
            opts.topic is not None
            and layout.value_column is not None
            and not (layout.has_topic or layout.has_key or layout.has_event_time)
            and not layout.has_properties
            and not targets.chunking
            and await targets.schema(opts.topic, [layout.value_column]) is None
        )
        if plain:
            assert opts.topic is not None and layout.value_column is not None
            await _write_plain(targets, opts.topic, batches, layout.value_column)
        else:
            await _write_rows(targets, opts, layout, batches)
        await targets.finish()
        targets.check()
        c = targets.counts
        return WriteReport(producer_name, c.sent, c.deduplicated, c.skipped)
    finally:
        await client.close()


def _run_task(
    opts: WriteOptions, layout: SinkLayout, batches: Iterator[Any], name: str | None
) -> WriteReport:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(write_task(opts, layout, batches, name))
    finally:
        loop.close()


class BatchWriter(DataSourceArrowWriter):  # type: ignore[misc]
    def __init__(self, opts: WriteOptions, layout: SinkLayout) -> None:
        self.opts = opts
        self.layout = layout
        self.write_id = uuid.uuid4().hex[:16]  # made once on the driver: every attempt sees it

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        from pyspark import TaskContext

        name = None
        if self.opts.exactly_once:
            ctx = TaskContext.get()
            part = ctx.partitionId() if ctx is not None else 0
            name = f"magnetar-spark-{self.write_id}-{part}"
        return _run_task(self.opts, self.layout, iterator, name)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_reports("write", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("write aborted after %s", _summary(messages))


class StreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, opts: WriteOptions, layout: SinkLayout) -> None:
        self.opts = opts
        self.layout = layout
        self.fallback_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        from pyspark import TaskContext

        name = None
        if self.opts.exactly_once:
            ctx = TaskContext.get()
            query = batch = None
            part = 0
            if ctx is not None:
                query = ctx.getLocalProperty("sql.streaming.queryId")
                batch = ctx.getLocalProperty("streaming.sql.batchId")
                part = ctx.partitionId()
            if query is None or batch is None:
                raise WriteError(
                    "exactlyOnce=true: Spark gave the task no streaming query id and batch id"
                )
            name = f"magnetar-spark-{query}-{batch}-{part}"
        return _run_task(self.opts, self.layout, iterator, name)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_reports(f"micro-batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %s aborted after %s", batchId, _summary(messages))


def _summary(messages: list[WriterCommitMessage | None]) -> str:
    got = [m for m in messages if isinstance(m, WriteReport)]
    return (
        f"{sum(m.sent for m in got)} sent, {sum(m.deduplicated for m in got)} deduplicated, "
        f"{sum(m.skipped for m in got)} skipped as already stored"
    )


def _log_reports(what: str, messages: list[WriterCommitMessage | None]) -> None:
    log.info("%s committed: %s", what, _summary(messages))


__all__ = ["BatchWriter", "StreamWriter", "WriteError", "WriteReport", "write_task"]
