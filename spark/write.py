"""Writing: batch (``DataSourceArrowWriter``) and streaming (``DataSourceStreamArrowWriter``).

Owns: one task's send loop (``write_task``): a producer per target topic-partition, routing
(a keyed row goes to ``hash(key) % partitions`` as the official client's default; a keyless
row to ``row index % partitions``, so a retried task routes every row as before), and, with
``exactlyOnce=true``, the producer name and sequence ids that make a retry idempotent:

    producer name = magnetar-spark-<query id>-<batch id>-<task partition>  (streaming)
                    magnetar-spark-<write id>-<task partition>            (batch)
    sequence id   = the row's index in the task's input

A target topic with an AVRO or JSON record schema gets each row's data columns encoded with
that schema (Avro binary / JSON text), and its producers announce the registered schema, so
the messages carry its version; a data column the schema has no field for fails the task
(written, it would be lost). Other topics get the lone ``value`` column as it is, or the data
columns packed as one JSON object.

A retried task or a replayed micro-batch re-sends the same rows under the same name and ids,
and the broker's deduplication drops those it already stored (a reconnecting producer also
learns the last id stored and skips up to it). This needs the task's input to be the same
rows in the same order on a retry, as any idempotent sink does.

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
from magnetar.spark.typed import RegisteredSchema, TopicSchema

log = logging.getLogger(__name__)


class WriteError(RuntimeError):
    """A row could not be written (no topic for it, or the broker refused it)."""


@dataclass
class WriteReport(WriterCommitMessage):  # type: ignore[misc]
    producer_name: str | None
    sent: int  # messages sent and stored
    deduplicated: int  # sent, and dropped by the broker as already stored
    skipped: int  # not sent: the broker had them from an earlier attempt


async def write_task(
    opts: WriteOptions, layout: SinkLayout, batches: Iterator[Any], producer_name: str | None
) -> WriteReport:
    client = cluster.open_client(opts.client)
    exactly_once = opts.exactly_once
    partitions_of: dict[str, list[str]] = {}
    # topic -> (its record schema, if any: rows are encoded with it; its registered
    # pb.Schema, announced byte for byte by its producers)
    schemas: dict[str, tuple[TopicSchema | None, Any]] = {}
    producers: dict[str, Any] = {}
    last_stored: dict[str, int] = {}
    report = WriteReport(producer_name, 0, 0, 0)
    errors: list[BaseException] = []

    def done(fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            errors.append(WriteError("send cancelled"))
            return
        exc = fut.exception()
        if exc is not None:
            errors.append(exc)
        elif fut.result().entry_id() < 0:
            report.deduplicated += 1
        else:
            report.sent += 1

    async def encoder_of(topic: str, row: OutgoingRow) -> TopicSchema | None:
        if topic not in schemas:
            answer = await client.get_schema_info(topic)
            typed = None if answer is None else TopicSchema.of(answer.schema)
            if typed is not None and typed.record is None:
                typed = None  # a primitive schema: payloads as they are (below)
            if typed is None:
                schemas[topic] = (None, None)
            else:
                try:
                    typed.check_columns(list(row.record))
                except ValueError as exc:
                    raise WriteError(f"writing to {topic}: {exc}") from None
                schemas[topic] = (typed, answer.schema)  # type: ignore[union-attr]
        return schemas[topic][0]

    def payload_of(topic: str, typed: TopicSchema | None, row: OutgoingRow, seq: int) -> bytes:
        if typed is None:
            return row.payload if row.payload is not None else json_payload(row.record)
        try:
            return typed.encode(row.record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise WriteError(
                f"row {seq} does not fit the {typed.type_name.upper()} schema of {topic}: "
                f"{type(exc).__name__}: {exc}"
            ) from None

    async def target(topic: str, key: str | None, seq: int) -> tuple[str, Any]:
        parts = partitions_of.get(topic)
        if parts is None:
            parts = await client.get_topic_partitions(topic)
            if exactly_once:
                assert opts.client.admin_url is not None
                await asyncio.to_thread(
                    cluster.ensure_deduplication,
                    opts.client.admin_url,
                    topic,
                    parts,
                    settings=opts.client,
                )
            partitions_of[topic] = parts
        n = len(parts)
        name = parts[0] if n == 1 else parts[(hash_key(key) if key else seq) % n]
        producer = producers.get(name)
        if producer is None:
            schema = schemas.get(topic, (None, None))[1]
            producer = await client.create_producer(
                name,
                producer_name=producer_name,
                block_if_queue_full=True,
                schema=RegisteredSchema(schema) if schema is not None else None,
                **opts.producer_kwargs,
            )
            producers[name] = producer
            last_stored[name] = producer.last_sequence_id() if exactly_once else -1
        return name, producer

    try:
        seq = 0
        for batch in batches:
            for row in rows_of(batch, layout):
                topic = opts.topic or row.topic
                if not topic:
                    raise WriteError(f"row {seq} has no '__topic' and no 'topic' option is set")
                full = full_topic_name(topic)
                typed = await encoder_of(full, row)
                name, producer = await target(full, row.key, seq)
                if exactly_once and seq <= last_stored[name]:
                    report.skipped += 1
                else:
                    fut = await producer.send_async(
                        payload_of(full, typed, row, seq),
                        properties=row.properties,
                        partition_key=row.key,
                        event_timestamp=row.event_time_ms,
                        sequence_id=seq if exactly_once else None,
                    )
                    fut.add_done_callback(done)
                seq += 1
                if errors:
                    break
            if errors:
                break
        await asyncio.gather(*(p.flush() for p in producers.values()), return_exceptions=True)
        if errors:
            exc = errors[0]
            msg = f"{type(exc).__name__}: {exc}" if isinstance(exc, PulsarException) else str(exc)
            raise WriteError(f"sending to Magnetar failed: {msg}") from exc
        return report
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
