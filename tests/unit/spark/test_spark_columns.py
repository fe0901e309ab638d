"""Stored entries into Arrow columns in bulk (``columns.EntryColumns``): the rows equal, column
for column, those the per-message path makes from the client's own decoding of the same
entries (``decode_entry`` -> ``rows.BatchBuilder``), for plain and keyed messages, plain and
detailed batches, compressed batches and typed topics; the read's bounds cut batches by
member, a bound with batch index -1 standing for its whole entry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from magnetar.client import CompressionType
from magnetar.client._compression import compress
from magnetar.client._entry_decode import decode_entry
from magnetar.client.protocol import (
    EntryView,
    build_batch,
    encode_headers_and_payload,
    encode_plain_batch,
    pb,
)
from magnetar.spark.columns import ChunkedEntry, EntryColumns
from magnetar.spark.layout import Fragment, LedgerLayout, PartitionLayout
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
    """The broker names the last message of a one-message batch ``L:E:-1``: an end there
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
