"""The consumer's decode step (``client/_entry_decode.py``) fed bytes: no connection, no loop."""

from __future__ import annotations

import pytest

from magnetar.client._compression import compress
from magnetar.client._config import CompressionType
from magnetar.client._entry_decode import (
    VALIDATION_BATCH_DESERIALIZE_ERROR,
    VALIDATION_DECOMPRESSION_ERROR,
    EntryDecodeError,
    decode_entry,
)
from magnetar.client._message import MessageId
from magnetar.client.protocol import build_batch, pb

WHERE = {"partition": 2, "ledger": 7, "entry_id": 11, "topic": "persistent://t/n/x"}


def _batch(n: int) -> tuple[pb.MessageMetadata, bytes]:
    members = [
        (
            pb.SingleMessageMetadata(
                payload_size=0,
                partition_key=f"k{i}",
                properties=[pb.KeyValue(key="i", value=str(i))],
                event_time=100 + i,
            ),
            f"m{i}".encode(),
        )
        for i in range(n)
    ]
    md = pb.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=42, num_messages_in_batch=n
    )
    return md, build_batch(members)


def test_single_message_keeps_metadata_fields() -> None:
    md = pb.MessageMetadata(
        producer_name="p",
        sequence_id=3,
        publish_time=42,
        partition_key="key",
        event_time=7,
        properties=[pb.KeyValue(key="a", value="b")],
    )
    got = decode_entry(md, b"hello", redelivery=2, **WHERE)
    assert got.batch_size == 0 and got.skipped == 0
    (msg,) = got.messages
    assert msg.data() == b"hello"
    assert msg.partition_key() == "key"
    assert msg.properties() == {"a": "b"}
    assert msg.publish_timestamp() == 42 and msg.event_timestamp() == 7
    assert msg.redelivery_count() == 2
    assert msg.message_id() == MessageId(2, 7, 11, -1)


def test_batch_members_become_messages_with_their_index() -> None:
    md, payload = _batch(3)
    got = decode_entry(md, payload, **WHERE)
    assert got.batch_size == 3 and got.delivered == {0, 1, 2} and got.skipped == 0
    assert [m.data() for m in got.messages] == [b"m0", b"m1", b"m2"]
    assert [m.message_id().batch_index() for m in got.messages] == [0, 1, 2]
    assert [m.partition_key() for m in got.messages] == ["k0", "k1", "k2"]
    assert got.messages[1].properties() == {"i": "1"}
    assert got.messages[2].event_timestamp() == 102


def test_members_not_still_to_deliver_and_filtered_ones_are_skipped() -> None:
    md, payload = _batch(4)
    got = decode_entry(
        md, payload, still={1, 2, 3}, drop=lambda mid: mid.batch_index() == 3, **WHERE
    )
    assert [m.data() for m in got.messages] == [b"m1", b"m2"]
    assert got.delivered == {1, 2} and got.skipped == 2


def test_compressed_batch_is_decompressed_first() -> None:
    md, payload = _batch(2)
    md.compression = pb.ZLIB
    md.uncompressed_size = len(payload)
    got = decode_entry(md, compress(CompressionType.ZLIB, payload), **WHERE)
    assert [m.data() for m in got.messages] == [b"m0", b"m1"]


def test_undecompressable_payload_reports_a_decompression_error() -> None:
    md, payload = _batch(2)
    md.compression = pb.ZLIB
    md.uncompressed_size = len(payload)
    with pytest.raises(EntryDecodeError) as info:
        decode_entry(md, b"not zlib", **WHERE)
    assert info.value.validation_error == VALIDATION_DECOMPRESSION_ERROR
    assert info.value.count == 2


@pytest.mark.parametrize("damage", ["truncated", "trailing", "count"])
def test_malformed_batch_reports_a_batch_error(damage: str) -> None:
    md, payload = _batch(3)
    if damage == "truncated":
        payload = payload[:-2]
    elif damage == "trailing":
        payload += b"\x00"
    else:
        md.num_messages_in_batch = 4
    with pytest.raises(EntryDecodeError) as info:
        decode_entry(md, payload, **WHERE)
    assert info.value.validation_error == VALIDATION_BATCH_DESERIALIZE_ERROR
    assert info.value.count == md.num_messages_in_batch
