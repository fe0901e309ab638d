"""The executor side of reading: one ``Split`` into Arrow record batches.

Owns: ``Split`` (what a task gets: a topic-partition's range and the entry ranges of its
ledgers that are this task's, with the bookies holding them or, for a ledger offloaded to
tiered storage, its offload record: no driver state), and ``read_split``, its two paths:

- storage (``readPath=storage``, or unset): the entries of each range from storage
  (``storage.LedgerReader``: the bookies, or an offloaded ledger's object store with the
  job's ``pulsar.offload.*`` settings), decoded in bulk (``columns.EntryColumns``). The open
  ledger is read from the bookies up to what its writer had confirmed at planning; an entry
  of the split after that (its tail) goes through a broker. When storage does not serve the
  entries (no bookie answers, the ledger was deleted meanwhile, its object store is
  unreachable or refuses the credentials), a split planned with ``readPath`` unset goes on
  through a broker from that ledger on (``fallback``, whose reader reports lost data as
  ``failOnDataLoss`` says); with ``readPath=storage`` the task fails naming the options to
  change. Chunked messages are not assembled from storage: the task fails, naming
  ``readPath=broker``.
- broker: a non-durable reader over the split's entries (``cluster.read_entries``) or the
  whole range (``cluster.read_range``), rows made from its messages (``rows.BatchBuilder``).

A yielded batch holds at most about ``ARROW_BATCH_ROWS`` rows and ``ARROW_BATCH_BYTES`` of
buffers; with the storage reads in flight (``storage.READ_WINDOW`` x ``storage.READ_BYTES``,
and one offloaded ledger's read-ahead) that bounds a reading task's memory.

Must not know: planning, Spark's offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from magnetar.spark import cluster
from magnetar.spark.options import OptionError, ReadOptions
from magnetar.spark.positions import Position, Start
from magnetar.spark.rows import BatchBuilder
from magnetar.spark.splits import EntryRange
from magnetar.spark.typed import TopicSchema

log = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 65_536
ARROW_BATCH_BYTES = 16 << 20
"""A yielded record batch holds about this many rows at most (a run of entries read
together may pass it by one read's entries) and this many bytes of buffers (payloads copied
out, or whole read buffers whose spans are the values): with ``storage.READ_WINDOW``
requests of ``storage.READ_BYTES`` in flight and one offloaded ledger's read-ahead
(``offloaded.READ_AHEAD_BYTES``), what bounds a reading task's memory (about 40 MiB of
entries and one batch, plus Spark's copy of it)."""


@dataclass
class Split(InputPartition):  # type: ignore[misc]
    """One task's part of one topic-partition's range ``start`` .. ``end``: the entries of
    ``ranges`` (none: the whole range, through a reader), from the bookies (``storage``) or
    through a broker; ``fallback``: through a broker when no bookie answers (``readPath``
    unset)."""

    topic: str
    start: str  # Start's string form
    end: str  # Position's string form, inclusive
    ranges: tuple[EntryRange, ...] = ()
    storage: bool = False
    fallback: bool = False
    bookie_tls: bool = False
    ending_time_ms: int | None = None

    @property
    def first(self) -> Position:
        r = self.ranges[0]
        return Position(r.ledger.ledger_id, r.first, -1)

    @property
    def last(self) -> Position:
        r = self.ranges[-1]
        return Position(r.ledger.ledger_id, r.last, -1)


def read_split(opts: ReadOptions, split: Split, typed: TopicSchema | None = None) -> Iterator[Any]:
    """Executor side: the split as Arrow record batches (a private event loop per task)."""
    loop = asyncio.new_event_loop()
    try:
        if split.storage:
            yield from _read_from_storage(loop, opts, split, typed)
        else:
            yield from _read_from_broker(loop, opts, split, typed)
    finally:
        loop.close()


def _read_from_broker(
    loop: asyncio.AbstractEventLoop,
    opts: ReadOptions,
    split: Split,
    typed: TopicSchema | None,
    first: Position | None = None,
) -> Iterator[Any]:
    """Through a non-durable reader: the split's entries from ``first`` (its first entry by
    default), or its whole range when it has no entry ranges."""
    client = cluster.open_client(opts.client)
    builder = BatchBuilder(split.topic, typed)
    writers: dict[bytes, Any] = {}  # schema version -> the pb.Schema that wrote it
    start, end = Start.parse(split.start), Position.parse(split.end)
    if split.ranges:
        it = cluster.read_entries(
            client,
            split.topic,
            first or split.first,
            split.last,
            start=start,
            end=end,
            fail_on_data_loss=opts.fail_on_data_loss,
            poll_timeout_ms=opts.poll_timeout_ms,
            reader_kwargs=opts.reader_kwargs,
        )
    else:
        it = cluster.read_range(
            client,
            split.topic,
            start,
            end,
            fail_on_data_loss=opts.fail_on_data_loss,
            poll_timeout_ms=opts.poll_timeout_ms,
            reader_kwargs=opts.reader_kwargs,
        )
    until = split.ending_time_ms

    async def fill() -> bool:
        """Fill the builder; False once the split is done."""
        async for msg in it:
            if until is not None and msg.publish_timestamp() >= until:
                continue
            version = msg.schema_version()
            if typed is not None and version and version not in writers:
                answer = await client.get_schema_info(
                    split.topic, int.from_bytes(version, "big", signed=True)
                )
                writers[version] = None if answer is None else answer.schema
            builder.add(msg, writers.get(version) if version else None)
            if len(builder) >= ARROW_BATCH_ROWS or builder.nbytes >= ARROW_BATCH_BYTES:
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


def storage_missing() -> str | None:
    """What this process lacks to read from the bookies (None: nothing)."""
    try:
        import magnetar.spark.storage  # noqa: F401
    except ImportError as exc:
        return f"the bookie client cannot be imported here ({exc}): install 'magnetar[spark]'"
    return None


def _read_from_storage(
    loop: asyncio.AbstractEventLoop, opts: ReadOptions, split: Split, typed: TopicSchema | None
) -> Iterator[Any]:
    missing = storage_missing()
    if missing is not None:
        if not split.fallback:
            raise OptionError(f"option 'readPath' = 'storage': {missing}")
        log.warning("%s: reading through the broker: %s", split.topic, missing)
        yield from _read_from_broker(loop, opts, split, typed)
        return
    from magnetar.spark import storage
    from magnetar.spark.columns import ChunkedEntry, EntryColumns

    tls = bookie_tls(opts) if split.bookie_tls else None
    reader = storage.LedgerReader(tls=tls, offload=opts.offload)
    writers = _SchemaWriters(loop, opts, split.topic) if typed is not None else None
    cols = EntryColumns(
        split.topic,
        Start.parse(split.start),
        Position.parse(split.end),
        ending_time_ms=split.ending_time_ms,
        typed=typed,
        writer_of=writers,
    )
    resume: Position | None = None  # where the broker takes over
    try:
        for r in split.ranges:
            lid = r.ledger.ledger_id
            last = r.last
            try:
                last = min(last, storage.confirmed(r.ledger))
                runs = reader.entries(r.ledger, r.first, last)
                while True:
                    try:
                        run = loop.run_until_complete(anext(runs))
                    except StopAsyncIteration:
                        break
                    cols.add_run(lid, run.first_entry_id, run.data, run.starts, run.ends)
                    if len(cols) >= ARROW_BATCH_ROWS or cols.nbytes >= ARROW_BATCH_BYTES:
                        yield cols.build()
            except storage.StorageUnavailable as exc:
                if not split.fallback:
                    raise type(exc)(
                        f"{split.topic}: readPath=storage: {exc}. {_remedy(exc)}"
                    ) from None
                log.warning("%s: reading through the broker: %s", split.topic, exc)
                resume = Position(lid, r.first, -1)
                break
            except ChunkedEntry as exc:
                raise OptionError(
                    f"{split.topic}: {exc}: chunked messages are assembled by the broker's "
                    "readers only; read this topic with readPath=broker (and without "
                    "minPartitions / maxRecordsPerPartition, so no split cuts a message)"
                ) from None
            if last < r.last:  # entries confirmed after planning: through the broker
                resume = Position(lid, max(r.first, last + 1), -1)
                break
        if len(cols):
            yield cols.build()
    finally:
        loop.run_until_complete(reader.close())
    if resume is not None:
        yield from _read_from_broker(loop, opts, split, typed, first=resume)


def _remedy(exc: Exception) -> str:
    """What to change when the storage path fails (``readPath=storage``)."""
    from magnetar.spark import storage

    if isinstance(exc, storage.OffloadUnavailable):
        return (
            "Give the executors the object store's credentials and location with the "
            "pulsar.offload.* options (pulsar.offload.s3ManagedLedgerOffloadCredentialId and "
            "...CredentialSecret, ...Region or ...ServiceEndpoint; "
            "pulsar.offload.gcsManagedLedgerOffloadServiceAccountKeyFile; "
            "pulsar.offload.fileSystemURI), or set readPath=broker to read through the broker"
        )
    return (
        "Make the bookies reachable from the executors (and, with bookie TLS, trust the "
        "job's certificate and its role), or set readPath=broker to read through the broker"
    )


def bookie_tls(opts: ReadOptions) -> Any:
    """The job's TLS files (the client options') as the bookie client's TLS settings."""
    from magnetar.spark import storage

    kw = opts.client.client_kwargs
    return storage.grpc_tls(
        kw.get("tls_trust_certs_file_path"),
        kw.get("tls_certificate_file_path"),
        kw.get("tls_private_key_file_path"),
    )


class _SchemaWriters:
    """The ``pb.Schema`` that wrote each schema version met (asked of the broker once)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, opts: ReadOptions, topic: str) -> None:
        self.loop = loop
        self.opts = opts
        self.topic = topic
        self.known: dict[bytes, Any] = {}

    def __call__(self, version: bytes) -> Any:
        if version not in self.known:

            async def ask() -> Any:
                client = cluster.open_client(self.opts.client)
                try:
                    return await client.get_schema_info(
                        self.topic, int.from_bytes(version, "big", signed=True)
                    )
                finally:
                    await client.close()

            answer = self.loop.run_until_complete(ask())
            self.known[version] = None if answer is None else answer.schema
        return self.known[version]


__all__ = [
    "ARROW_BATCH_BYTES",
    "ARROW_BATCH_ROWS",
    "Split",
    "bookie_tls",
    "read_split",
    "storage_missing",
]
