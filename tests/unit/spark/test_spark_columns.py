"""Stored entries into Arrow columns in bulk (``columns.EntryColumns``): the rows equal, column
for column, those the per-message path makes from the client's own decoding of the same
entries (``decode_entry`` -> ``rows.BatchBuilder``), for plain and keyed messages, plain and
detailed batches, compressed batches and typed topics, entry by entry and as runs in one
buffer (as storage reads them: plain runs taken whole, values picked out of the buffer); the
read's bounds and ending time cut batches by member and runs by entry, a bound with batch
index -1 standing for its whole entry; ``__messageId`` bytes are the codec's
``MessageId.serialize()``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from magnetar.client import CompressionType
from magnetar.client._compression import compress
from magnetar.client._entry_decode import decode_entry
from magnetar.client.protocol import (
    EntryView,
    MessageId,
    build_batch,
    encode_headers_and_payload,
    encode_plain_batch,
    markers,
    pb,
)
from magnetar.spark.columns import ChunkedEntry, EntryColumns
from magnetar.spark.layout import Fragment, LedgerLayout, PartitionLayout
from magnetar.spark.message_ids import message_id_bytes
from magnetar.spark.positions import Position, Start, ends_by
from magnetar.spark.rows import BatchBuilder
from magnetar.spark.splits import locate
from magnetar.spark.typed import TopicSchema

TOPIC = "persistent://public/default/cols-partition-3"
LEDGER = 12
EVERYTHING = (Start.earliest(), Position(LEDGER, 1 << 40, -1))


def md(seq: int, **fields: Any) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="p", sequence_id=seq, publish_time=1_700_000_000_000 + seq, **fields
    )


def entries() -> list[bytes]:
    out = [
        encode_headers_and_payload(md(0), b"plain"),
        encode_headers_and_payload(
            md(
                1,
                partition_key="k",
                event_time=1_600_000_000_123,
                properties=[pb.KeyValue(key="a", value="b")],
            ),
            b"keyed",
        ),
        encode_headers_and_payload(
            md(2, num_messages_in_batch=4), encode_plain_batch([b"m%d" % i for i in range(4)], 2)
        ),
    ]
    members = [
        (pb.SingleMessageMetadata(partition_key="x", event_time=5), b"one"),
        (pb.SingleMessageMetadata(properties=[pb.KeyValue(key="p", value="q")]), b"two"),
        (pb.SingleMessageMetadata(), b""),
    ]
    out.append(
        encode_headers_and_payload(
            md(6, num_messages_in_batch=3, event_time=77), build_batch(members)
        )
    )
    raw = encode_plain_batch([b"z" * 50] * 5, 9)
    out.append(
        encode_headers_and_payload(
            md(
                9,
                num_messages_in_batch=5,
                compression=int(CompressionType.ZLIB),  # type: ignore[arg-type]
                uncompressed_size=len(raw),
            ),
            compress(CompressionType.ZLIB, raw),
        )
    )
    return out


def by_messages(data: list[bytes], start: Start, end: Position, typed: Any = None) -> Any:
    builder = BatchBuilder(TOPIC, typed)
    for entry_id, raw in enumerate(data):
        stored = EntryView.parse(raw)
        for msg in decode_entry(
            stored.metadata,
            stored.payload,
            partition=3,
            ledger=LEDGER,
            entry_id=entry_id,
            topic=TOPIC,
        ).messages:
            pos = Position(LEDGER, entry_id, msg.message_id().batch_index())
            if start.includes(pos) and ends_by(pos, end):
                builder.add(msg)
    return builder.build()


def by_entries(data: list[bytes], start: Start, end: Position, typed: Any = None) -> Any:
    """The entries the planner gives a task (``splits.locate``), through ``EntryColumns``."""
    ledger = LedgerLayout(LEDGER, len(data), 100, True, 1, (Fragment(0, ("b:1",)),))
    located = locate(PartitionLayout(TOPIC, (ledger,), None, False), start, end)
    cols = EntryColumns(TOPIC, start, end, typed=typed)
    for r in located.ranges:
        for entry_id in range(r.first, min(r.last, len(data) - 1) + 1):
            cols.add(LEDGER, entry_id, data[entry_id])
    return cols.build()


def by_runs(
    data: list[bytes], start: Start, end: Position, *, ending_time_ms: int | None = None
) -> Any:
    """The entries as storage hands them over: runs of a few entries in one buffer each,
    behind a framing of the storage's."""
    ledger = LedgerLayout(LEDGER, len(data), 100, True, 1, (Fragment(0, ("b:1",)),))
    located = locate(PartitionLayout(TOPIC, (ledger,), None, False), start, end)
    cols = EntryColumns(TOPIC, start, end, ending_time_ms=ending_time_ms)
    for r in located.ranges:
        ids = list(range(r.first, min(r.last, len(data) - 1) + 1))
        for k in range(0, len(ids), 3):
            chunk = ids[k : k + 3]
            buf, starts, ends = b"", [], []
            for entry_id in chunk:
                buf += b"\xee" * 8
                starts.append(len(buf))
                buf += data[entry_id]
                ends.append(len(buf))
            cols.add_run(LEDGER, chunk[0], buf, starts, ends)
    return cols.build()


def plain_entries(n: int) -> list[bytes]:
    return [encode_headers_and_payload(md(i), b"v%d" % i) for i in range(n)]


def test_entries_make_the_rows_the_per_message_path_makes() -> None:
    data = entries()
    got, want = by_entries(data, *EVERYTHING), by_messages(data, *EVERYTHING)
    assert got.schema == want.schema
    assert got.num_rows == 1 + 1 + 4 + 3 + 5
    for name in got.schema.names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (Start.after(Position(LEDGER, 2, 1)), Position(LEDGER, 3, 1)),
        (Start.at(Position(LEDGER, 2, 3)), Position(LEDGER, 4, -1)),
        (Start.after(Position(LEDGER, 0, -1)), Position(LEDGER, 2, -1)),
        (Start.at(Position(LEDGER, 3, -1)), Position(LEDGER, 3, 0)),
    ],
)
def test_the_bounds_cut_batches_by_member(start: Start, end: Position) -> None:
    data = entries()
    got, want = by_entries(data, start, end), by_messages(data, start, end)
    assert (
        got.column("__messageIdString").to_pylist() == want.column("__messageIdString").to_pylist()
    )
    assert got.column("value").to_pylist() == want.column("value").to_pylist()


def test_a_batch_named_by_its_entry_is_read_whole() -> None:
    """Older brokers name the last message of a one-message batch ``L:E:-1``: an end there
    takes the member, and a read resuming after it takes nothing more of the entry."""
    data = [
        encode_headers_and_payload(md(0, num_messages_in_batch=1), encode_plain_batch([b"a"], 0))
    ]
    end = Position(LEDGER, 0, -1)
    assert by_entries(data, Start.earliest(), end).column("value").to_pylist() == [b"a"]
    assert by_entries(data, Start.after(end), Position(LEDGER, 5, -1)).num_rows == 0


def test_typed_topics_decode_a_column_chunk_at_a_time() -> None:
    record = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "id", "type": "long"}, {"name": "tag", "type": "string"}],
    }
    schema = pb.Schema(name="R", type=pb.Schema.Json, schema_data=json.dumps(record).encode())
    typed = TopicSchema.of(schema)
    data = [
        encode_headers_and_payload(md(i), json.dumps({"id": i, "tag": f"t{i}"}).encode())
        for i in range(3)
    ]
    got = by_entries(data, *EVERYTHING, typed=typed)
    assert got.column("id").to_pylist() == [0, 1, 2]
    assert got.column("tag").to_pylist() == ["t0", "t1", "t2"]
    ints = TopicSchema.of(pb.Schema(name="i", type=pb.Schema.Int32, schema_data=b""))
    data = [
        encode_headers_and_payload(md(i), (i - 1).to_bytes(4, "big", signed=True)) for i in range(3)
    ]
    assert by_entries(data, *EVERYTHING, typed=ints).column("value").to_pylist() == [-1, 0, 1]


def test_a_chunk_is_left_to_the_broker() -> None:
    chunk = encode_headers_and_payload(
        md(0, uuid="u", chunk_id=0, num_chunks_from_msg=2, total_chunk_msg_size=10), b"part"
    )
    cols = EntryColumns(TOPIC, *EVERYTHING)
    with pytest.raises(ChunkedEntry):
        cols.add(LEDGER, 0, chunk)


@pytest.mark.parametrize(
    ("start", "end"),
    [
        EVERYTHING,
        (Start.after(Position(LEDGER, 2, 1)), Position(LEDGER, 3, 1)),
        (Start.at(Position(LEDGER, 2, 3)), Position(LEDGER, 4, -1)),
        (Start.after(Position(LEDGER, 0, -1)), Position(LEDGER, 2, -1)),
    ],
)
def test_runs_in_one_buffer_make_the_same_rows(start: Start, end: Position) -> None:
    data = entries() + plain_entries(7)
    got, want = by_runs(data, start, end), by_messages(data, start, end)
    assert got.schema == want.schema
    for name in got.schema.names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name


@pytest.mark.parametrize(
    ("start", "end", "until"),
    [
        (*EVERYTHING, None),
        (Start.after(Position(LEDGER, 3, -1)), Position(LEDGER, 8, -1), None),
        (Start.at(Position(LEDGER, 2, -1)), Position(LEDGER, 5, 0), None),
        (*EVERYTHING, 1_700_000_000_000 + 6),
    ],
)
def test_plain_runs_are_cut_by_the_bounds_and_the_ending_time(
    start: Start, end: Position, until: int | None
) -> None:
    data = plain_entries(11)
    got = by_runs(data, start, end, ending_time_ms=until)
    want = by_messages(data, start, end)
    if until is not None:
        want = want.filter(
            pc.less(
                want.column("__publishTime"),
                pa.scalar(until * 1000, want.schema.field("__publishTime").type),
            )
        )
    for name in got.schema.names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name


@pytest.mark.parametrize("partition", [-1, 0, 3, 200])
def test_message_id_bytes_are_the_codec_s(partition: int) -> None:
    rows = [
        (0, 0, -1),
        (1, 127, -1),
        (2**40, 2**21 + 5, 0),
        (7, 300, 999),
        (2**63 - 1, 1, 2**31 - 1),
    ]
    got = message_id_bytes(
        np.array([r[0] for r in rows], dtype=np.int64),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([r[2] for r in rows], dtype=np.int64),
        partition,
    )
    assert got.to_pylist() == [
        MessageId(ledger, entry, partition, batch).serialize() for ledger, entry, batch in rows
    ]


def test_markers_are_never_rows() -> None:
    """Markers (entries brokers write for each other: replicated subscriptions' snapshots)
    are skipped as the broker's cursors skip them, in a plain run as alone."""
    marker = markers.snapshot_request("s-1", "east", publish_time_ms=1_700_000_000_005)
    data = [*plain_entries(3), marker, *plain_entries(2)]
    got = by_runs(data, *EVERYTHING)
    assert got.column("value").to_pylist() == [b"v0", b"v1", b"v2", b"v0", b"v1"]
    assert got.column("__messageIdString").to_pylist() == [
        f"{LEDGER}:{e}:-1" for e in (0, 1, 2, 4, 5)
    ]
    assert by_entries([marker], *EVERYTHING).num_rows == 0
