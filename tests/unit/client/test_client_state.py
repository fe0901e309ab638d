"""Pure tests of the client's state machines: accumulator, ack/nack/ack-timeout trackers,
backoff, handler transitions, key hashing, compression framing, error mapping."""

from __future__ import annotations

import random
import zlib

import pytest

from magnetar.client import CompressionType, ServiceUnitNotReady, TopicNotFound, for_code
from magnetar.client._accumulator import BatchAccumulator
from magnetar.client._backoff import Backoff
from magnetar.client._compression import DecompressionError, compress, decompress
from magnetar.client._config import MultiplierRedeliveryBackoff
from magnetar.client._handler import TRANSITIONS, HandlerState, InvalidTransition, next_state
from magnetar.client._message import MessageId
from magnetar.client._pool import parse_service_url
from magnetar.client._routing import HashingScheme, hash_key
from magnetar.client._trackers import (
    AckGroupingTracker,
    BatchAckTracker,
    NegativeAckTracker,
    UnackedMessageTracker,
    ack_set_words,
    unacked_from_ack_set,
)

# Partitions chosen by pulsar-client 3.13 for a 4-partition topic (observed on the wire).
OFFICIAL_PARTITION_OF = {
    "key-0": 2, "key-1": 1, "key-2": 0, "key-3": 2, "key-4": 0, "key-5": 2, "key-6": 1,
    "key-7": 2, "key-8": 1, "key-9": 2, "key-10": 3, "key-11": 0, "key-12": 2, "key-13": 2,
    "key-14": 1, "key-15": 1, "key-16": 2, "key-17": 0, "key-18": 1, "key-19": 0,
}  # fmt: skip


def test_key_routing_matches_the_official_client() -> None:
    for key, partition in OFFICIAL_PARTITION_OF.items():
        assert hash_key(key) % 4 == partition, key
    assert hash_key("hello", HashingScheme.JavaStringHash) == 99162322
    assert hash_key("x", HashingScheme.Murmur3_32Hash) >= 0


def test_accumulator_limits_and_order() -> None:
    acc: BatchAccumulator[int] = BatchAccumulator(3, 100)
    out = []
    for i in range(7):
        out += acc.add(i, 10)
        acc.check_invariants()
    assert [b.items for b in out] == [[0, 1, 2], [3, 4, 5]]
    assert [b.items for b in acc.drain()] == [[6]]
    assert len(acc) == 0
    acc2: BatchAccumulator[int] = BatchAccumulator(100, 25)
    assert acc2.add(1, 20) == []
    full = acc2.add(2, 20)  # would exceed the byte limit: the open batch goes first
    assert [b.items for b in full] == [[1]]
    assert [b.items for b in acc2.add(3, 50)] == [[2], [3]]


def test_key_based_accumulator_groups_by_key() -> None:
    acc: BatchAccumulator[str] = BatchAccumulator(4, 10_000, key_based=True)
    for item, key in [("a1", "a"), ("b1", "b"), ("a2", "a")]:
        assert acc.add(item, 1, key) == []
    batches = acc.add("b2", 1, "b")  # 4 messages in total: everything is flushed, per key
    assert [(b.key, b.items) for b in batches] == [("a", ["a1", "a2"]), ("b", ["b1", "b2"])]


def test_ack_grouping_and_duplicate_filter() -> None:
    t = AckGroupingTracker(max_pending=3)
    assert not t.add_individual((1, 1))
    assert not t.add_individual((1, 2))
    assert t.add_individual((1, 3))  # third pending id asks for a flush
    t.add_cumulative((1, 0))
    flushed = t.flush()
    assert flushed.individual == [(1, 1), (1, 2), (1, 3)]
    assert flushed.cumulative == (1, 0)
    assert len(t) == 0
    assert t.is_duplicate((1, 2)) and t.is_duplicate((1, 0)) and not t.is_duplicate((1, 9))
    t.check_invariants()


def test_batch_ack_tracker_acks_entry_only_when_complete() -> None:
    t = BatchAckTracker()
    t.received((1, 5), 3, {0, 1, 2})
    assert not t.ack((1, 5), 0)
    assert not t.ack((1, 5), 2)
    assert t.remaining((1, 5)) == {1}
    assert t.ack((1, 5), 1)
    assert len(t) == 0
    words = ack_set_words({1, 65}, 70)
    assert unacked_from_ack_set(words, 70) == {1, 65}
    assert ack_set_words({63}, 64) == [-(1 << 63)]


def test_negative_ack_and_unacked_trackers_use_injected_time() -> None:
    n = NegativeAckTracker()
    n.add((1, 1), now_ms=0, delay_ms=100)
    n.add((1, 2), now_ms=50, delay_ms=100)
    assert n.due(99) == []
    assert n.due(100) == [(1, 1)]
    assert n.next_deadline() == 150
    assert n.due(1000) == [(1, 2)]
    u = UnackedMessageTracker(1000)
    u.add((2, 1), 0)
    u.add((2, 2), 10)
    u.remove((2, 1))
    assert u.expired(1009) == []
    assert u.expired(1010) == [(2, 2)]


def test_redelivery_backoff_grows_and_caps() -> None:
    b = MultiplierRedeliveryBackoff(100, 1000, 2)
    assert [b.next_delay_ms(i) for i in range(6)] == [100, 200, 400, 800, 1000, 1000]


def test_backoff_doubles_with_bounded_jitter() -> None:
    b = Backoff(100, 1000, random.Random(1))
    delays = [b.next_ms() for _ in range(6)]
    assert 90 <= delays[0] <= 100
    assert 180 <= delays[1] <= 200
    assert all(d <= 1000 for d in delays)
    b.reset()
    assert b.next_ms() <= 100


def test_handler_transitions_every_pair() -> None:
    for current in HandlerState:
        for wanted in HandlerState:
            if wanted in TRANSITIONS[current]:
                assert next_state(current, wanted) is wanted
            else:
                with pytest.raises(InvalidTransition):
                    next_state(current, wanted)
    assert TRANSITIONS[HandlerState.CLOSED] == frozenset()


@pytest.mark.parametrize("kind", [c for c in CompressionType if c != CompressionType.NONE])
def test_compression_round_trip(kind: CompressionType) -> None:
    data = b"magnetar " * 1000
    packed = compress(kind, data)
    assert len(packed) < len(data)
    assert decompress(kind, packed, len(data)) == data
    with pytest.raises(DecompressionError):
        decompress(kind, packed, len(data) + 1)


def test_lz4_is_a_raw_block_and_zlib_has_a_header() -> None:
    import lz4.block

    data = b"abc" * 100
    assert lz4.block.decompress(compress(CompressionType.LZ4, data), uncompressed_size=300) == data
    assert zlib.decompress(compress(CompressionType.ZLIB, data)) == data


def test_errors_map_server_codes_with_retriable_flags() -> None:
    assert isinstance(for_code(11, "x"), TopicNotFound)
    assert not for_code(11).retriable
    assert isinstance(for_code(6), ServiceUnitNotReady)
    assert for_code(6).retriable
    assert for_code(999).retriable  # unknown codes are UnknownError, retried like C++


def test_service_urls_and_message_ids() -> None:
    a = parse_service_url("pulsar+ssl://h1:6651,h2")
    assert a.use_tls and a.hosts == (("h1", 6651), ("h2", 6651))
    assert parse_service_url("http://x").is_http
    mid = MessageId(2, 10, 20, 3)
    assert MessageId.deserialize(mid.serialize()) == mid
    assert MessageId.earliest < mid < MessageId.latest
    assert (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index()) == (2, 10, 20, 3)
