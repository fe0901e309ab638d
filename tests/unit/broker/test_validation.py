"""Pure checks against hostile input: SEND entries, subscription names, cursor path
encoding, the partial-frame budget, batch ack masks, policy schemas, UTF-8 repair."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.hostile import batch_payload, entry

from magnetar.broker.ledger.ackstate import AckState
from magnetar.broker.ledger.position import Position
from magnetar.broker.policies.documents import check_policies, json_depth
from magnetar.broker.policies.model import PolicyError
from magnetar.broker.protocol.input_budget import InputBudget
from magnetar.broker.validation import (
    InvalidEntry,
    InvalidSubscriptionName,
    check_entry,
    check_subscription_name,
)
from magnetar.client.protocol import repair_strings
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.zk import paths

MAX = 5 << 20


def test_check_entry_counts_and_bounds() -> None:
    assert check_entry(entry(), 1, MAX) == 1
    assert check_entry(entry(batch_payload(3), num_messages_in_batch=3), 3, MAX) == 3
    for n in (0, -1, 4, 1 << 20):
        with pytest.raises(InvalidEntry):
            check_entry(entry(batch_payload(3), num_messages_in_batch=n), 3, MAX)
    with pytest.raises(InvalidEntry):
        check_entry(entry(), -5, MAX)
    with pytest.raises(InvalidEntry, match="producer_name"):
        check_entry(entry(producer_name=None), 1, MAX)
    with pytest.raises(InvalidEntry):
        check_entry(b"\x00\x00\x00\x09garbage", 1, MAX)
    # compressed: bounded by the declared uncompressed size, itself capped
    zipped = entry(b"z", compression=pb.ZSTD, uncompressed_size=600, num_messages_in_batch=100)
    assert check_entry(zipped, 100, MAX) == 100
    huge = entry(
        b"z",
        compression=pb.ZSTD,
        uncompressed_size=(1 << 32) - 1,
        num_messages_in_batch=(1 << 31) - 1,
    )
    with pytest.raises(InvalidEntry):
        check_entry(huge, 1, MAX)


@pytest.mark.parametrize("name", ["", " ", "a\x00b", "pulsar.dedup", "pulsar.repl.c", "x" * 1025])
def test_subscription_names_refused(name: str) -> None:
    with pytest.raises(InvalidSubscriptionName):
        check_subscription_name(name)


@given(st.text(min_size=1))
def test_cursor_path_segments_round_trip_and_never_nest(name: str) -> None:
    segment = paths.encode_cursor_name(name)
    assert "/" not in segment
    assert paths.decode_cursor_name(segment) == name


def test_input_budget() -> None:
    b = InputBudget(100)
    assert b.resize(0, 60)
    assert not b.resize(0, 50)  # another holder: over the limit
    assert b.resize(60, 90)  # the same holder grows within the limit
    assert b.resize(90, 10)
    b.release(10)
    assert b.statistics().used_bytes == 0 and b.statistics().refused == 1
    b.check_invariants()


def test_batch_mask_ignores_bits_beyond_the_batch_and_negative_entries() -> None:
    s = AckState(Position(1, -1))
    assert not s.ack_batch_mask(Position(1, 0), 3, (1 << 100_000) | 0b001)
    assert s.batch_sets[Position(1, 0)] == (3, 0b001)
    assert s.ack_batch_mask(Position(1, 0), 3, 0b110)
    assert not s.ack_batch_mask(Position(1, -1), 3, 0b1)
    assert Position(1, -1) not in s.batch_sets
    s.encode_snapshot()


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_policy_schema() -> None:
    check_policies(
        {"retention_policies": {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}}, 128
    )
    for bad in (
        {"retention_policies": {"retentionTimeInMinutes": "abc"}},
        {"bundles": {"numBundles": 129}},
        {"bundles": {"boundaries": ["0x00000000", "0x80000000"]}},
        {"message_ttl_in_seconds": 1 << 63},
        {"a": _nested(40)},
    ):
        with pytest.raises(PolicyError):
            check_policies(bad, 128)
    assert json_depth({"a": [1, {"b": 2}]}) == 3


def test_repair_strings_in_nested_and_repeated_fields() -> None:
    cmd = pb.BaseCommand(
        type=pb.BaseCommand.PRODUCER,
        producer=pb.CommandProducer(
            topic="tt", producer_id=1, request_id=1, metadata=[pb.KeyValue(key="kk", value="v")]
        ),
    )
    raw = cmd.SerializeToString().replace(b"tt", b"t\xff").replace(b"kk", b"k\xfe")
    got = pb.BaseCommand()
    got.ParseFromString(raw)
    assert repair_strings(got) == 2
    assert got.producer.topic == "t\ufffd" and got.producer.metadata[0].key == "k\ufffd"
