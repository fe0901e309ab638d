"""Batches, chunk metadata, topic names, message ids, hashing and the enum mirrors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.client.protocol import (
    FIELD_NAME,
    INT64_MAX,
    NONE_KEY,
    BatchDeserializeError,
    BrokerError,
    CommandType,
    InvalidTopicNameError,
    MessageId,
    RemoteProtocolError,
    ServerError,
    TopicName,
    batch_metadata,
    build_batch,
    chunk_info,
    commands,
    crc32c,
    is_batch,
    key_shared_slot,
    murmur3_32_hash,
    parse_batch,
    partition_index_of,
    pb,
    sticky_key,
    to_int64,
    to_uint64,
)

# ------------------------------------------------------------------------------ batches

single_md = st.builds(
    lambda props, key, seq, null: pb.SingleMessageMetadata(
        properties=[pb.KeyValue(key=k, value=v) for k, v in props.items()],
        payload_size=0,
        **({"partition_key": key} if key is not None else {}),
        **({"sequence_id": seq} if seq is not None else {}),
        null_value=null,
    ),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    st.none() | st.text(max_size=8),
    st.none() | st.integers(0, 2**64 - 1),
    st.booleans(),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(single_md, st.binary(max_size=50)), min_size=1, max_size=8))
def test_batch_round_trip(messages: list[tuple[pb.SingleMessageMetadata, bytes]]) -> None:
    payload = build_batch(messages)
    parsed = parse_batch(payload, len(messages))
    assert [m.index for m in parsed] == list(range(len(messages)))
    assert [m.payload for m in parsed] == [p for _, p in messages]
    for (md, body), single in zip(messages, parsed, strict=True):
        expected = pb.SingleMessageMetadata()
        expected.CopyFrom(md)
        expected.payload_size = len(body)
        assert single.metadata == expected


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(single_md, st.binary(max_size=20)), min_size=1, max_size=4), st.data())
def test_damaged_batches_raise_batch_errors(
    messages: list[tuple[pb.SingleMessageMetadata, bytes]], data: st.DataObject
) -> None:
    payload = build_batch(messages)
    cut = data.draw(st.integers(0, len(payload) - 1))
    with pytest.raises(BatchDeserializeError):
        parse_batch(payload[:cut], len(messages))
    with pytest.raises(BatchDeserializeError, match="stray"):
        parse_batch(payload + b"\x00", len(messages))
    with pytest.raises(BatchDeserializeError):
        parse_batch(payload, len(messages) + 1)
    assert issubclass(BatchDeserializeError, RemoteProtocolError)


def test_batch_layout_is_size_metadata_payload() -> None:
    md = pb.SingleMessageMetadata(payload_size=0, partition_key="k")
    raw = build_batch([(md, b"abc")])
    # SingleMessageMetadata{partition_key "k" (field 2), payload_size 3 (field 3)}
    assert raw == bytes.fromhex("00000005 12016b 1803") + b"abc"


def test_batch_metadata_copies_first_key_and_marks_batch() -> None:
    first = pb.SingleMessageMetadata(payload_size=1, partition_key="k0", ordering_key=b"o")
    md = batch_metadata("prod", 10, 1234, [first, pb.SingleMessageMetadata(payload_size=1)])
    assert is_batch(md) and md.num_messages_in_batch == 2
    assert (md.partition_key, md.ordering_key, md.sequence_id) == ("k0", b"o", 10)
    plain = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0)
    assert not is_batch(plain)
    plain.num_messages_in_batch = 1
    assert is_batch(plain)  # presence, not value


def test_chunk_info() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=0)
    assert chunk_info(md) is None
    md.uuid, md.chunk_id, md.num_chunks_from_msg, md.total_chunk_msg_size = "p-4", 2, 3, 100
    info = chunk_info(md)
    assert info is not None and info.is_last
    assert (info.uuid, info.chunk_id, info.num_chunks_from_msg, info.total_chunk_msg_size) == (
        "p-4",
        2,
        3,
        100,
    )


# ------------------------------------------------------------------------------ topic names

TOPICS = [
    ("my-topic", "persistent://public/default/my-topic", "public/default", -1),
    ("tenant/ns/t", "persistent://tenant/ns/t", "tenant/ns", -1),
    ("persistent://a/b/c", "persistent://a/b/c", "a/b", -1),
    ("non-persistent://a/b/c", "non-persistent://a/b/c", "a/b", -1),
    ("persistent://a/b/c-partition-3", "persistent://a/b/c-partition-3", "a/b", 3),
    ("persistent://a/b/c-partition-01", "persistent://a/b/c-partition-01", "a/b", -1),
    ("persistent://a/b/c-partition--1", "persistent://a/b/c-partition--1", "a/b", -1),
    (
        "persistent://a/b/x-partition-1-partition-2",
        "persistent://a/b/x-partition-1-partition-2",
        "a/b",
        2,
    ),
    ("persistent://a/cl/b/c", "persistent://a/cl/b/c", "a/cl/b", -1),
    ("persistent://a/b/c/d/e", "persistent://a/b/c/d/e", "a/b/c", -1),  # legacy, local "d/e"
]


@pytest.mark.parametrize(("name", "full", "namespace", "partition"), TOPICS)
def test_topic_name_parsing(name: str, full: str, namespace: str, partition: int) -> None:
    topic = TopicName.parse(name)
    assert topic.full_name == full == str(topic)
    assert topic.namespace == namespace
    assert topic.partition_index == partition
    assert TopicName.parse(topic.full_name) == topic


SHORT_FORMAT = "it should be in the format of <tenant>/<namespace>/<topic> or <topic>"
BAD_TOPICS = [
    ("a/b", f"Invalid short topic name 'a/b', {SHORT_FORMAT}"),
    ("a/b/c/d", f"Invalid short topic name 'a/b/c/d', {SHORT_FORMAT}"),
    ("foo://a/b/c", "Invalid topic domain: 'foo'"),
    ("persistent://a/b", "Invalid topic name: persistent://a/b"),
    ("persistent://a/b/", "Invalid topic name: persistent://a/b/"),
    ("persistent:///b/c", "Invalid namespace format. namespace: /b"),
    ("persistent://a b/n/c", "Invalid named entity: a b"),
]


@pytest.mark.parametrize(("name", "message"), BAD_TOPICS)
def test_bad_topic_names_use_pulsars_messages(name: str, message: str) -> None:
    with pytest.raises(InvalidTopicNameError) as info:
        TopicName.parse(name)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_partition_names() -> None:
    base = TopicName.parse("persistent://t/n/orders")
    p2 = base.partition(2)
    assert p2.full_name == "persistent://t/n/orders-partition-2"
    assert p2.is_partition and not base.is_partition
    assert p2.partitioned_topic_name == base.full_name == base.partitioned_topic_name
    assert p2.partition(5).full_name == "persistent://t/n/orders-partition-5"
    assert partition_index_of("x-partition-7") == 7
    assert partition_index_of("x-partition-") == -1
    assert partition_index_of("x-partition-99999999999") == -1  # beyond a Java int


# ------------------------------------------------------------------------------ message ids


def test_message_id_order() -> None:
    ids = [
        MessageId(2, 0),
        MessageId.LATEST,
        MessageId(1, 5, batch_index=1),
        MessageId(1, 5),
        MessageId(1, 5, batch_index=0),
        MessageId.EARLIEST,
        MessageId(1, 4, batch_index=9),
    ]
    assert sorted(ids) == [
        MessageId.EARLIEST,
        MessageId(1, 4, batch_index=9),
        MessageId(1, 5),
        MessageId(1, 5, batch_index=0),
        MessageId(1, 5, batch_index=1),
        MessageId(2, 0),
        MessageId.LATEST,
    ]
    assert MessageId(1, 5) < MessageId(1, 5, partition=0)


@given(
    st.integers(-1, INT64_MAX),
    st.integers(-1, INT64_MAX),
    st.integers(-1, 2**31 - 1),
    st.integers(-1, 2**31 - 1),
)
def test_message_id_wire_round_trip(ledger: int, entry: int, partition: int, batch: int) -> None:
    mid = MessageId(ledger, entry, partition, batch)
    assert MessageId.deserialize(mid.serialize()) == mid
    assert MessageId.from_proto(mid.to_proto()) == mid


def test_signed_ids_on_the_wire() -> None:
    earliest = MessageId.EARLIEST.to_proto()
    assert earliest.ledgerId == earliest.entryId == 2**64 - 1
    assert to_uint64(-1) == 2**64 - 1 and to_int64(2**64 - 1) == -1
    assert to_int64(INT64_MAX) == INT64_MAX == to_uint64(INT64_MAX)
    with pytest.raises(ValueError):
        to_uint64(2**64)
    # what the C++ client sends for seek(MessageId.earliest) decodes back to (-1, -1)
    seek = commands.seek(0, 1, message_id=MessageId.EARLIEST).seek.message_id
    assert (to_int64(seek.ledgerId), to_int64(seek.entryId)) == (-1, -1)
    with pytest.raises(ValueError):
        MessageId.deserialize(b"\x08\x01")  # entryId missing


# ------------------------------------------------------------------------------ hashing


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283


def test_murmur3_matches_pulsars_hash() -> None:
    # Guava murmur3_32 (seed 0) as Pulsar's Murmur3_32Hash uses it, & Integer.MAX_VALUE
    assert murmur3_32_hash(b"") == 0
    assert murmur3_32_hash("hello") == 0x248BFA47
    assert murmur3_32_hash(b"foo") == 0xF6A5C420 & 0x7FFFFFFF
    assert all(0 <= murmur3_32_hash(str(i)) <= 0x7FFFFFFF for i in range(1000))
    assert key_shared_slot(b"hello") == 0x248BFA47 % 65536


def test_sticky_key_precedence() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0)
    assert sticky_key(md) == NONE_KEY
    md.partition_key = "aGk="
    assert sticky_key(md) == b"aGk="
    md.partition_key_b64_encoded = True
    assert sticky_key(md) == b"hi"
    md.ordering_key = b"ord"
    assert sticky_key(md) == b"ord"


# ------------------------------------------------------------------------------ enums


def test_enum_mirrors_match_the_generated_code() -> None:
    assert {t.name: t.value for t in CommandType} == {
        v.name: v.number for v in pb.BaseCommand.Type.DESCRIPTOR.values
    }
    assert {e.name: e.value for e in ServerError} == {
        v.name: v.number for v in pb.ServerError.DESCRIPTOR.values
    }
    for ctype, name in FIELD_NAME.items():
        assert pb.BaseCommand.DESCRIPTOR.fields_by_name[name].number == ctype


def test_server_error_retriable_flags_and_broker_error() -> None:
    assert ServerError.ServiceNotReady.retriable
    assert ServerError.MetadataError.retriable
    assert not ServerError.ConsumerBusy.retriable
    assert not ServerError.TopicNotFound.retriable
    err = BrokerError.for_code(5, "Exclusive consumer is already connected")
    assert err.code is ServerError.ConsumerBusy and not err.retriable
    assert str(err) == "ConsumerBusy: Exclusive consumer is already connected"
    assert BrokerError(999).code is ServerError.UnknownError


def test_presence_rules_of_builders() -> None:
    """Fields the C++ client tests with has_*() are present even at their default value."""
    pm = commands.partitioned_metadata_response(1, 0).partitionMetadataResponse
    assert pm.HasField("response") and pm.HasField("partitions")
    lk = commands.lookup_response(1, "pulsar://127.0.0.1:6650").lookupTopicResponse
    assert lk.HasField("response") and lk.response == pb.CommandLookupTopicResponse.Connect
    cn = commands.connected("s", 20).connected
    assert cn.HasField("protocol_version") and cn.max_message_size == 5 * 1024 * 1024
    ps = commands.producer_success(1, "n").producer_success
    assert ps.HasField("last_sequence_id") and ps.last_sequence_id == -1
    assert not ps.HasField("producer_ready")
    msg = commands.message(1, MessageId(1, 2)).message
    assert not msg.HasField("redelivery_count")
    assert msg.message_id.HasField("partition") and msg.message_id.partition == -1
    assert commands.ping().HasField("ping") and commands.pong().HasField("pong")
    err = commands.error(1, ServerError.UnknownError).error
    assert err.HasField("message") and err.message == ""
