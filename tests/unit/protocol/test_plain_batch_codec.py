"""``encode_plain_batch`` and ``scan_batch`` (the codec's batch fast paths) against the general
protobuf path, byte for byte, and ``MessageBatch``/``EntryMembers`` against ``decode_entry``."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.client._entry_decode import decode_entry
from magnetar.client._message_batch import EntryMembers, MessageBatch
from magnetar.client.protocol import (
    PLAIN_RUNS_MAX,
    BatchDeserializeError,
    LocalProtocolError,
    build_batch,
    encode_plain_batch,
    pb,
    plain_runs,
    scan_batch,
    split_batch,
)

pytestmark = pytest.mark.unit

payload_lists = st.lists(st.binary(max_size=300), min_size=0, max_size=40)
sequence_ids = st.one_of(
    st.integers(0, 300), st.integers(16_000, 17_000), st.integers(0, 2**63 - 1)
)


def _general(payloads: list[bytes], first: int) -> bytes:
    return build_batch(
        (pb.SingleMessageMetadata(sequence_id=first + i), p) for i, p in enumerate(payloads)
    )


@given(payload_lists, sequence_ids)
def test_encode_plain_batch_is_build_batch_byte_for_byte(payloads: list[bytes], first: int) -> None:
    if first + len(payloads) >= 2**63:
        first = 2**63 - 1 - len(payloads)
    assert encode_plain_batch(payloads, first) == _general(payloads, first)


@pytest.mark.parametrize("first", [0, 127, 128, 16_383, 16_384, 2_097_151, 10**9])
def test_encode_plain_batch_crosses_varint_lengths(first: int) -> None:
    payloads = [bytes([i % 256]) * (i % 200) for i in range(300)]
    assert encode_plain_batch(payloads, first) == _general(payloads, first)


def test_encode_plain_batch_refuses_negative_sequence_ids() -> None:
    with pytest.raises(LocalProtocolError):
        encode_plain_batch([b"x"], -1)


def _members(smms: list[pb.SingleMessageMetadata], payloads: list[bytes]) -> bytes:
    out = b""
    for smm, p in zip(smms, payloads, strict=True):
        raw = smm.SerializeToString()
        out += struct.pack(">I", len(raw)) + raw + p
    return out


smm_strategy = st.builds(
    lambda seq, key, props, event_time: (seq, key, props, event_time),
    st.one_of(st.none(), st.integers(0, 2**40)),
    st.one_of(st.none(), st.text(max_size=5)),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.integers(0, 2**41),
)


@given(st.lists(st.tuples(smm_strategy, st.binary(max_size=20_000)), max_size=12))
def test_scan_batch_agrees_with_split_batch(members: list[tuple[tuple, bytes]]) -> None:  # type: ignore[type-arg]
    smms = []
    payloads = []
    for (seq, key, props, event_time), data in members:
        smm = pb.SingleMessageMetadata(payload_size=len(data))
        if seq is not None:
            smm.sequence_id = seq
        if key is not None:
            smm.partition_key = key
        for k, v in props.items():
            smm.properties.add(key=k, value=v)
        if event_time:
            smm.event_time = event_time
        smms.append(smm)
        payloads.append(data)
    batch = _members(smms, payloads)
    spans = scan_batch(batch, len(payloads))
    assert [batch[spans[3 * i + 1] : spans[3 * i + 2]] for i in range(len(payloads))] == [
        d for _, d in split_batch(batch, len(payloads))
    ]
    for i, smm in enumerate(smms):
        if spans[3 * i] < 0:  # read by hand: nothing but payload_size and sequence_id
            assert not smm.properties
            assert not smm.HasField("partition_key")
            assert not smm.event_time
        else:
            raw = batch[spans[3 * i] : spans[3 * i + 1]]
            assert pb.SingleMessageMetadata.FromString(raw) == smm
    plain = encode_plain_batch([b"a", b"bb"], 1000)
    assert scan_batch(plain, 2)[0::3] == [-1, -1]


def _expand(runs: list[tuple[int, int, int, int]]) -> list[tuple[int, int]]:
    return [(at + j * stride, at + j * stride + n) for at, stride, n, k in runs for j in range(k)]


@given(st.lists(st.integers(0, 300), max_size=60), sequence_ids)
def test_plain_runs_cut_plain_batches_as_split_batch(sizes: list[int], first: int) -> None:
    if first + len(sizes) >= 2**63:
        first = 0
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    batch = encode_plain_batch(payloads, first)
    runs = plain_runs(batch, len(payloads))
    if runs is None:  # only a batch of too many runs is left to scan_batch
        assert len({*sizes}) > 1
        return
    assert len(runs) <= PLAIN_RUNS_MAX
    assert [batch[a:b] for a, b in _expand(runs)] == [d for _, d in split_batch(batch, len(sizes))]


def test_plain_runs_take_a_batch_of_one_size_in_one_run_per_varint_length() -> None:
    batch = encode_plain_batch([b"x" * 100] * 1000, 16_000)  # sequence ids pass 128**2
    runs = plain_runs(batch, 1000)
    assert runs is not None
    assert [(n, k) for _, _, n, k in runs] == [(100, 384), (100, 616)]


@pytest.mark.parametrize(
    "batch, n",
    [
        (_members([pb.SingleMessageMetadata(payload_size=1, partition_key="k")], [b"a"]), 1),
        (_members([pb.SingleMessageMetadata(payload_size=1, event_time=5)], [b"a"]), 1),
        (encode_plain_batch([b"a", b"b"], 0) + b"x", 2),  # stray byte
        (encode_plain_batch([b"a", b"b"], 0)[:-1], 2),  # truncated
        (encode_plain_batch([b"a", b"b"], 0), 3),  # fewer members than the entry says
        (encode_plain_batch([b"a" * n for n in range(2 * PLAIN_RUNS_MAX)], 0), 2 * PLAIN_RUNS_MAX),
        (b"\x00\x00\x00\x04\x18\x01\x40\x80a", 1),  # a sequence id's varint cut short
    ],
)
def test_plain_runs_leave_other_batches_to_scan_batch(batch: bytes, n: int) -> None:
    assert plain_runs(batch, n) is None


def test_scan_batch_is_not_fooled_by_a_repeated_payload_size() -> None:
    # payload_size, sequence_id, then payload_size again: protobuf keeps the last value, so
    # the hand-read fast path must not take the first one
    raw = b"\x18\x05\x40\x01\x18\x02"
    batch = struct.pack(">I", len(raw)) + raw + b"ab"
    spans = scan_batch(batch, 1)
    assert batch[spans[1] : spans[2]] == b"ab"
    assert split_batch(batch, 1)[0][1] == b"ab"


@pytest.mark.parametrize(
    "batch, n",
    [
        (b"\x00\x00\x00\x02\x18\x05abc", 1),  # payload shorter than payload_size
        (b"\x00\x00\x00\x02\x18\x01ab", 1),  # stray byte
        (b"\x00\x00\x00\x09\x18\x01", 1),  # metadata size beyond the batch
        (b"\x00\x00\x00\x02\x40\x01a", 1),  # no payload_size
        (b"\x00\x00", 1),  # truncated size
        (b"", -1),
    ],
)
def test_scan_batch_rejects_what_split_batch_rejects(batch: bytes, n: int) -> None:
    with pytest.raises(BatchDeserializeError):
        split_batch(batch, n)
    with pytest.raises(BatchDeserializeError):
        scan_batch(batch, n)


def test_lazy_members_make_the_messages_decode_entry_makes() -> None:
    smms = [
        pb.SingleMessageMetadata(payload_size=3, sequence_id=7),
        pb.SingleMessageMetadata(payload_size=2, partition_key="k", event_time=99),
        pb.SingleMessageMetadata(payload_size=1, ordering_key=b"o"),
    ]
    smms[1].properties.add(key="a", value="b")
    payloads = [b"abc", b"de", b"f"]
    batch = _members(smms, payloads)
    md = pb.MessageMetadata(
        producer_name="p", sequence_id=7, publish_time=1234, num_messages_in_batch=3, event_time=5
    )
    common = {"partition": 2, "ledger": 10, "entry_id": 20, "topic": "persistent://t/n/x"}
    eager = decode_entry(md, batch, redelivery=1, **common).messages  # type: ignore[arg-type]
    members = EntryMembers(
        batch,
        scan_batch(batch, 3),
        redelivery=1,
        publish_time=1234,
        event_time=5,
        schema_version=b"",
        consumer_ref=None,
        **common,  # type: ignore[arg-type]
    )
    lazy = MessageBatch(members=members, lo=0, hi=3)
    assert len(lazy) == 3
    assert lazy.payloads() == payloads
    for a, b in zip(eager, lazy, strict=True):
        assert a.data() == b.data()
        assert a.message_id() == b.message_id()
        assert a.properties() == b.properties()
        assert a.partition_key() == b.partition_key()
        assert a.ordering_key() == b.ordering_key()
        assert a.publish_timestamp() == b.publish_timestamp()
        assert a.event_timestamp() == b.event_timestamp()
        assert a.redelivery_count() == b.redelivery_count()
    tail = MessageBatch(members=members, lo=1, hi=3)
    assert tail.payloads() == payloads[1:]
    assert tail.data(-1) == b"f"
    assert tail.last().message_id().batch_index() == 2
    assert [m.data() for m in tail[0:2]] == payloads[1:]
    with pytest.raises(IndexError):
        tail.data(2)
