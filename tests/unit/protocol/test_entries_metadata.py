"""``entries_metadata``: the metadata of many stored entries of one buffer at once, each as
``entry_metadata`` gives it (the reference), on byte fixtures and generated entries.

- Plain messages (what unbatched producers write) come out ``plain``, their publish times and
  payload offsets exact, with and without the checksum header, entries of any size.
- Anything else (a key, properties, a batch, compression, event time, a delay...) is not plain
  and each entry's whole metadata is the reference's.
- Bytes the reference refuses raise its error; metadata the bulk parse cannot decide (an
  entry repeating a required field, one missing a required field) is decided by the
  reference, never mis-assigned to a neighbour.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.client.protocol import (
    RemoteProtocolError,
    encode_simple_metadata,
    entries_metadata,
    entry_metadata,
)
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


def stored(raw_metadata: bytes, payload: bytes, *, checksum: bool = True) -> bytes:
    body = struct.pack(">I", len(raw_metadata)) + raw_metadata + payload
    if checksum:
        return b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(body)) + body
    return body


def run(entries: list[bytes], gap: bytes = b"\xff" * 8) -> tuple[bytes, list[int], list[int]]:
    """The entries in one buffer, each behind ``gap`` (a framing of the storage's)."""
    starts: list[int] = []
    ends: list[int] = []
    at = 0
    for e in entries:
        at += len(gap)
        starts.append(at)
        at += len(e)
        ends.append(at)
    return b"".join(gap + e for e in entries), starts, ends


def reference(data: bytes, starts: list[int], ends: list[int]) -> list[tuple[object, int]]:
    return [entry_metadata(data[a:b]) for a, b in zip(starts, ends, strict=True)]


PLAIN = encode_simple_metadata(b"standalone-0-1", 17, 1_796_174_723_668)


def test_plain_messages_on_a_byte_fixture() -> None:
    # the bytes a producer writes for one plain message: producer name, sequence id, time
    assert (
        bytes([0x0A, 14])
        + b"standalone-0-1"
        + bytes([0x10, 17, 0x18])
        + bytes.fromhex("d4f4eca2a334")
    ) == PLAIN
    entries = [stored(PLAIN, b"x" * 3), stored(PLAIN, b""), stored(PLAIN, b"yz", checksum=False)]
    data, starts, ends = run(entries)
    got = entries_metadata(data, starts, ends)
    assert got.plain and len(got) == 3
    assert got.publish_times == [1_796_174_723_668] * 3
    header = 6 + 4 + len(PLAIN)
    assert got.payload_starts == [starts[0] + header, starts[1] + header, starts[2] + header - 6]
    assert [data[a:b] for a, b in zip(got.payload_starts, ends, strict=True)] == [
        b"xxx",
        b"",
        b"yz",
    ]
    assert list(got.metadata) == [md for md, _ in reference(data, starts, ends)]


@pytest.mark.parametrize(
    "field",
    [
        {"partition_key": "k"},
        {"ordering_key": b"o"},
        {"properties": [pb.KeyValue(key="a", value="b")]},
        {"num_messages_in_batch": 1},
        {"compression": pb.LZ4, "uncompressed_size": 9},
        {"event_time": 5},
        {"schema_version": b"\x00\x01"},
        {"deliver_at_time": 9},
        {"uuid": "u", "chunk_id": 0, "num_chunks_from_msg": 2, "total_chunk_msg_size": 4},
        {"marker_type": 1},
        {"txnid_least_bits": 1, "txnid_most_bits": 2},
        {"null_value": True},
    ],
)
def test_one_entry_that_is_not_plain_makes_the_run_not_plain(field: dict[str, object]) -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=7, **field)
    entries = [stored(PLAIN, b"a"), stored(md.SerializeToString(), b"b"), stored(PLAIN, b"c")]
    data, starts, ends = run(entries)
    got = entries_metadata(data, starts, ends)
    assert not got.plain
    assert list(got.metadata) == [m for m, _ in reference(data, starts, ends)]
    assert got.publish_times == [1_796_174_723_668, 7, 1_796_174_723_668]


def test_fields_that_change_nothing_of_a_message_keep_it_plain() -> None:
    md = pb.MessageMetadata(
        producer_name="p",
        sequence_id=1,
        publish_time=7,
        replicated_from="east",
        replicate_to=["west"],
        uncompressed_size=3,
        highest_sequence_id=1,
    )
    data, starts, ends = run([stored(md.SerializeToString(), b"abc")])
    assert entries_metadata(data, starts, ends).plain


@pytest.mark.parametrize(
    "bad",
    [
        b"\x0e\x01\x00",  # truncated checksum
        b"\x00\x00",  # no metadata size
        struct.pack(">I", 100) + PLAIN,  # metadata size past the entry
        stored(b"\x0a\x05ab", b""),  # a field running past the metadata
        stored(b"\x10\x01\x18\x02", b""),  # producer_name missing
        stored(
            pb.MessageMetadata(
                producer_name="p", sequence_id=1, publish_time=1, properties=[pb.KeyValue(key="k")]
            ).SerializePartialToString(),
            b"",
        ),  # a property without its value
    ],
)
def test_what_the_reference_refuses_raises_its_error(bad: bytes) -> None:
    data, starts, ends = run([stored(PLAIN, b"ok"), bad, stored(PLAIN, b"ok")])
    with pytest.raises(RemoteProtocolError) as want:
        entry_metadata(bad)
    with pytest.raises(RemoteProtocolError) as got:
        entries_metadata(data, starts, ends)
    assert str(got.value) == str(want.value)


def test_a_repeated_required_field_is_decided_by_the_reference() -> None:
    twice = PLAIN + b"\x18\x09"  # publish_time again: the last one counts
    data, starts, ends = run([stored(PLAIN, b"a"), stored(twice, b"b"), stored(PLAIN, b"c")])
    got = entries_metadata(data, starts, ends)
    assert got.publish_times == [1_796_174_723_668, 9, 1_796_174_723_668]
    assert list(got.metadata) == [m for m, _ in reference(data, starts, ends)]
    # one entry without publish_time, another with two: the count is right, the entries not
    missing = encode_simple_metadata(b"p", 1, 5)[:-2]
    assert entry_metadata(stored(missing + b"\x18\x05", b""))[0].publish_time == 5
    data, starts, ends = run([stored(missing, b"a"), stored(twice, b"b")])
    with pytest.raises(RemoteProtocolError, match="publish_time"):
        entries_metadata(data, starts, ends)


def test_a_large_metadata_and_an_empty_run() -> None:
    md = pb.MessageMetadata(producer_name="p" * 5000, sequence_id=1, publish_time=3)
    data, starts, ends = run([stored(md.SerializeToString(), b"z"), stored(PLAIN, b"y")])
    got = entries_metadata(data, starts, ends)
    assert got.plain and got.publish_times == [3, 1_796_174_723_668]
    assert data[got.payload_starts[0] : ends[0]] == b"z"
    empty = entries_metadata(b"", [], [])
    assert len(empty) == 0 and empty.plain


metadata_fields = st.fixed_dictionaries(
    {},
    optional={
        "partition_key": st.text(max_size=5),
        "num_messages_in_batch": st.integers(1, 10),
        "event_time": st.integers(0, 2**63),
        "uncompressed_size": st.integers(0, 2**31),
        "replicated_from": st.text(max_size=5),
        "schema_version": st.binary(max_size=4),
        "properties": st.lists(
            st.builds(pb.KeyValue, key=st.text(max_size=3), value=st.text(max_size=3)),
            max_size=2,
        ),
    },
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.text(max_size=8),
            st.integers(0, 2**64 - 1),
            st.integers(0, 2**64 - 1),
            metadata_fields,
            st.binary(max_size=20),
            st.booleans(),
        ),
        max_size=12,
    ),
    st.binary(max_size=6),
)
def test_generated_runs_agree_with_the_reference(rows: list[tuple], gap: bytes) -> None:  # type: ignore[type-arg]
    entries = [
        stored(
            pb.MessageMetadata(
                producer_name=name, sequence_id=seq, publish_time=t, **fields
            ).SerializeToString(),
            payload,
            checksum=checksum,
        )
        for name, seq, t, fields, payload, checksum in rows
    ]
    data, starts, ends = run(entries, gap)
    got = entries_metadata(data, starts, ends)
    want = reference(data, starts, ends)
    assert list(got.metadata) == [m for m, _ in want]
    assert got.publish_times == [m.publish_time for m, _ in want]
    assert got.payload_starts == [a + at for a, (_, at) in zip(starts, want, strict=True)]
    plain_fields = {"replicated_from", "uncompressed_size"}
    present = [{k for k, v in fields.items() if v != []} for *_, fields, _, _ in rows]
    assert got.plain == all(keys <= plain_fields for keys in present)


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=40), max_size=6))
def test_garbage_raises_only_the_typed_error(garbage: list[bytes]) -> None:
    data, starts, ends = run(garbage)
    try:
        got = entries_metadata(data, starts, ends)
    except RemoteProtocolError:
        with pytest.raises(RemoteProtocolError):
            reference(data, starts, ends)
        return
    assert list(got.metadata) == [m for m, _ in reference(data, starts, ends)]
