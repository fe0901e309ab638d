"""The packed ``AddBatch`` wire format: the client's hand-built bytes parse to the message the
protobuf runtime builds, ``parse_packed`` inverts ``pack_entries``, malformed buffers raise
``MalformedBatch`` and nothing else, and ``AddRequest``'s fast constructor equals the
dataclass one."""

from __future__ import annotations

import dataclasses
import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookie import api
from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import encode_batch_header, encode_entries
from magnetar.bookie.journal import ENTRY_HEADER as JOURNAL_ENTRY_HEADER
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.wire import (
    ENTRY_HEADER_LEN,
    MalformedBatch,
    PackedEntry,
    pack_entries,
    parse_batch_header,
    parse_packed,
)

ids = st.integers(min_value=0, max_value=2**63 - 1)
lacs = st.integers(min_value=-1, max_value=2**63 - 1)


@given(
    ids,
    st.lists(st.tuples(ids, lacs, st.binary(max_size=300)), min_size=1, max_size=20),
    st.booleans(),
    st.integers(min_value=0, max_value=2**64 - 1),
    st.binary(max_size=32),
)
def test_header_plus_packed_entries_is_the_batch(
    ledger_id: int,
    rows: list[tuple[int, int, bytes]],
    recovery: bool,
    batch_id: int,
    key: bytes,
) -> None:
    entries = [
        AddRequest(ledger_id, e, lac, crc32c.crc32c(p), p, key, recovery) for e, lac, p in rows
    ]
    parts, nbytes = encode_entries(ledger_id, entries)
    packed = b"".join(parts)
    assert len(packed) == nbytes == sum(ENTRY_HEADER_LEN + len(p) for _, _, p in rows)
    data = encode_batch_header(batch_id, key, recovery, nbytes) + packed
    expected = pb.AddBatch(batch_id=batch_id, master_key=key, packed=packed, recovery=recovery)
    assert pb.AddBatch.FromString(data) == expected
    assert parse_packed(packed) == [
        PackedEntry(ledger_id, e.entry_id, e.lac, e.crc32c, e.payload) for e in entries
    ]
    # non-negative ids: each header is the journal's entry header, byte for byte
    first = JOURNAL_ENTRY_HEADER.pack(
        ledger_id, rows[0][0], rows[0][1], entries[0].crc32c, len(rows[0][2])
    )
    assert packed[:ENTRY_HEADER_LEN] == first
    # the same sequence again (another bookie of the write set) is not encoded again
    assert encode_entries(ledger_id, entries)[0] is parts
    # a different sequence with equal contents is encoded afresh, to equal bytes
    again, _ = encode_entries(ledger_id, list(entries))
    assert again is not parts and b"".join(again) == packed


def test_varint_boundaries_of_the_batch_header() -> None:
    for batch_id in (0, 127, 128, 16383, 16384, 2**21, 2**64 - 1):
        for size in (0, 127, 128, 16384, 32 * 1024 * 1024):
            header = encode_batch_header(batch_id, b"k", False, size)
            packed = b"\x00" * size if size < 20_000 else b""
            if len(packed) != size:
                continue
            msg = pb.AddBatch.FromString(header + packed)
            assert msg.batch_id == batch_id and msg.master_key == b"k" and len(msg.packed) == size


def test_negative_ids_travel_and_out_of_range_ones_do_not_encode() -> None:
    packed = b"".join(pack_entries(5, [AddRequest(5, -3, -1, 0, b"x", b"k")])[0])
    assert parse_packed(packed) == [PackedEntry(5, -3, -1, 0, b"x")]
    with pytest.raises(struct.error):
        pack_entries(2**63, [AddRequest(0, 0, -1, 0, b"", b"k")])


@given(st.binary(max_size=200))
def test_garbage_is_malformed_or_whole_entries(data: bytes) -> None:
    try:
        entries = parse_packed(data)
    except MalformedBatch:
        return
    assert sum(ENTRY_HEADER_LEN + len(e.payload) for e in entries) == len(data)


@pytest.mark.parametrize(
    "packed",
    [
        b"",
        b"\x00" * 31,  # truncated header
        struct.pack(">qqqII", 1, 0, -1, 0, 10) + b"short",  # payload runs past the end
        struct.pack(">qqqII", 1, 0, -1, 0, 0) + b"\x00" * 5,  # trailing bytes
        struct.pack(">qqqII", 1, 0, -1, 0, 0xFFFFFFFF),
    ],
)
def test_malformed_buffers(packed: bytes) -> None:
    with pytest.raises(MalformedBatch):
        parse_packed(packed)


def test_fast_add_request_constructor_equals_the_dataclass_one() -> None:
    slow = api.AddRequest.__new__(api.AddRequest)
    api._dataclass_add_request_init(slow, 1, 2, 3, 4, b"p", b"k", True)
    fast = AddRequest(1, 2, 3, 4, b"p", b"k", True)
    assert fast == slow and repr(fast) == repr(slow) and hash(fast) == hash(slow)
    assert AddRequest(1, 2, 3, 4, b"p", b"k").recovery is False
    assert dataclasses.replace(fast, lac=9).lac == 9
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.lac = 5  # type: ignore[misc]


@given(
    st.integers(min_value=0, max_value=2**64 - 1),
    st.binary(max_size=40),
    st.binary(max_size=300),
    st.booleans(),
)
def test_raw_batch_header_reads_what_protobuf_wrote(
    batch_id: int, key: bytes, packed: bytes, recovery: bool
) -> None:
    data = pb.AddBatch(
        batch_id=batch_id, master_key=key, packed=packed, recovery=recovery
    ).SerializeToString()
    h = parse_batch_header(data)
    assert (h.batch_id, h.master_key, h.recovery) == (batch_id, key, recovery)
    assert data[h.packed_start : h.packed_end] == packed
    # and the client's hand-built header says the same
    ours = encode_batch_header(batch_id, key, recovery, len(packed)) + packed
    h = parse_batch_header(ours)
    assert (h.batch_id, h.master_key, h.recovery) == (batch_id, key, recovery)
    assert ours[h.packed_start : h.packed_end] == packed


@given(st.binary(max_size=100))
def test_raw_batch_header_on_garbage_is_malformed_or_in_bounds(data: bytes) -> None:
    try:
        h = parse_batch_header(data)
    except MalformedBatch:
        return
    assert 0 <= h.packed_start <= h.packed_end <= len(data)


def test_raw_batch_header_skips_unknown_fields_and_refuses_truncation() -> None:
    packed = b"p" * 5
    data = b"\x30\x07" + b"\x3a\x02ab" + encode_batch_header(9, b"k", False, 5) + packed
    h = parse_batch_header(data)
    assert h.batch_id == 9 and data[h.packed_start : h.packed_end] == packed
    for bad in (
        b"\x08",
        b"\x22\x05abc",
        b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        b"\x00",
    ):
        with pytest.raises(MalformedBatch):
            parse_batch_header(bad)
