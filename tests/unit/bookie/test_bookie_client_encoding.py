"""``encode_entries``: hand-assembled ``AddBatch`` bytes parse to the message protobuf builds."""

from __future__ import annotations

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import encode_entries
from magnetar.bookie.proto import bookie_pb2 as pb

entry_ids = st.integers(min_value=0, max_value=2**63 - 1)
lacs = st.integers(min_value=-1, max_value=2**63 - 1)


@given(
    st.integers(min_value=0, max_value=2**63 - 1),
    st.lists(st.tuples(entry_ids, lacs, st.binary(max_size=300)), max_size=20),
    st.booleans(),
    st.integers(min_value=0, max_value=2**64 - 1),
    st.binary(max_size=32),
)
def test_header_plus_entries_is_the_batch(
    ledger_id: int,
    rows: list[tuple[int, int, bytes]],
    recovery: bool,
    batch_id: int,
    key: bytes,
) -> None:
    entries = [
        AddRequest(ledger_id, e, lac, crc32c.crc32c(p), p, key, recovery) for e, lac, p in rows
    ]
    expected = pb.AddBatch(batch_id=batch_id, master_key=key)
    for r in entries:
        expected.entries.add(
            ledger_id=r.ledger_id,
            entry_id=r.entry_id,
            lac=r.lac,
            crc32c=r.crc32c,
            payload=r.payload,
            recovery=r.recovery,
        )
    header = pb.AddBatch(batch_id=batch_id, master_key=key).SerializeToString()
    data = encode_entries(ledger_id, entries, recovery)
    assert pb.AddBatch.FromString(header + data) == expected
    # the same sequence again (another bookie of the write set) is not encoded again
    assert encode_entries(ledger_id, entries, recovery) is data
    # a different sequence with equal contents is encoded afresh, to equal bytes
    assert encode_entries(ledger_id, list(entries), recovery) == data


def test_varint_boundaries() -> None:
    key = b"k"
    rows = [
        (16383, 16383, b"a" * 16383),
        (16384, 16384, b"b" * 16384),
        (2**21 - 1, -1, b"c" * (2**21 - 20)),
        (2**21, 2**21, b""),
        (0, 0, b"d"),
    ]
    entries = [AddRequest(5, e, lac, crc32c.crc32c(p), p, key) for e, lac, p in rows]
    got = pb.AddBatch.FromString(encode_entries(5, entries, False))
    assert [(x.ledger_id, x.entry_id, x.lac, x.crc32c, x.payload) for x in got.entries] == [
        (5, r.entry_id, r.lac, r.crc32c, r.payload) for r in entries
    ]
    assert not any(x.recovery for x in got.entries)
