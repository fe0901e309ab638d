"""The broker's per-message fast paths give the same results as the plain ones.

- ``encode_message_frames`` / ``encode_send_receipt_frames`` (frames with shared parts encoded once)
  produce exactly the bytes of the protocol codec's per-frame encoders.
- ``PersistentTopic.publish_message`` reports each completed append to its sinks in runs of
  consecutive SENDs, in arrival order, with duplicates (deduplication) as None and failures
  to every SEND of the failed append.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
from typing import Any

import pytest
from support.waiting import wait_for

from magnetar.broker.dispatch.consumer import OutMessage
from magnetar.broker.ledger.position import Position
from magnetar.broker.naming import TopicName
from magnetar.broker.storage.contract import AddedCallback
from magnetar.broker.storage.memory import MemoryLedger
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.producer import AccessMode, Producer
from magnetar.client.protocol import (
    encode_message_frame,
    encode_message_frames,
    encode_send_receipt_frame,
    encode_send_receipt_frames,
    encode_varint,
)
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

VALUES = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**35, 2**63 - 1, -1, -7]


def test_varint_matches_protobuf() -> None:
    for v in VALUES:
        m = pb.MessageIdData(ledgerId=v & ((1 << 64) - 1), entryId=0)
        assert m.SerializeToString() == b"\x08" + encode_varint(v) + b"\x10\x00", v


def test_message_frames_equal_one_by_one() -> None:
    rng = random.Random(7)
    msgs = [
        OutMessage(
            Position(rng.choice([0, 5, 300, 2**33]), rng.randrange(0, 3_000_000)),
            b"x" * rng.randrange(0, 300),
            rng.choice([0, 0, 3, 200]),
            rng.choice([None, None, [], [1, -1, 2**62], [-1] * 20]),  # 20 words: body > 127 B
        )
        for _ in range(500)
    ]
    for cid in (0, 7, 100_000):
        for part in (-1, 0, 3):
            expected = [
                encode_message_frame(
                    cid,
                    m.position.ledger_id,
                    m.position.entry_id,
                    m.data,
                    partition=part,
                    redelivery_count=m.redelivery_count,
                    ack_set=m.ack_set or (),
                )
                for m in msgs
            ]
            assert encode_message_frames(cid, part, msgs) == expected


def test_send_receipt_frames_equal_the_codec() -> None:
    rng = random.Random(8)
    receipts = [
        (
            rng.choice([0, 1, 200]),
            rng.randrange(0, 10**7),
            rng.randrange(0, 10**7),
            rng.choice([1, 400, 2**40, (1 << 64) - 1]),
            rng.choice([rng.randrange(0, 10**6), (1 << 64) - 1]),
        )
        for _ in range(500)
    ]
    expected = [
        encode_send_receipt_frame(p, s, ledger, e, highest_sequence_id=h)
        for p, s, h, ledger, e in receipts
    ]
    assert encode_send_receipt_frames(receipts) == expected
    assert [
        encode_send_receipt_frame(r[0], r[1], r[3], r[4], highest_sequence_id=r[2])
        for r in receipts
    ] == expected


class _Sink:
    def __init__(self, log: list[Any], name: str) -> None:
        self.log, self.name = log, name

    def on_published(self, items: list[Any], positions: list[Position | None]) -> None:
        self.log.append((self.name, [p.sequence_id for p in items], positions))

    def on_publish_failed(self, items: list[Any], exc: Exception) -> None:
        self.log.append((self.name, [p.sequence_id for p in items], str(exc)))


class _FailingLedger(MemoryLedger):
    fail = False

    def add_entries_then(self, datas: list[bytes], then: AddedCallback) -> None:
        if self.fail:
            asyncio.get_running_loop().call_soon(then, None, OSError("disk gone"))
            return
        super().add_entries_then(datas, then)


def _producer(pid: int, name: str) -> Producer:
    return Producer(pid, name, AccessMode.SHARED)


async def test_publish_message_reports_runs_in_order_with_duplicates() -> None:
    ledger = _FailingLedger("t", 3)
    topic = PersistentTopic(TopicName.parse("persistent://a/b/t"), ledger, dedup_enabled=True)
    log: list[Any] = []
    a, b = _Sink(log, "a"), _Sink(log, "b")
    pa, pb_ = _producer(0, "pa"), _producer(1, "pb")
    topic.publish_message(a, pa, 0, 0, 1, b"a0")
    topic.publish_message(a, pa, 1, 1, 1, b"a1")
    topic.publish_message(b, pb_, 0, 0, 1, b"b0")
    topic.publish_message(a, pa, 1, 1, 1, b"a1 again")  # duplicate: acknowledged, not stored
    topic.publish_message(a, pa, 2, 2, 1, b"a2")
    await wait_for(lambda: len(log) == 3, what="three runs reported")
    assert log == [
        ("a", [0, 1], [Position(3, 0), Position(3, 1)]),
        ("b", [0], [Position(3, 2)]),
        ("a", [1, 2], [None, Position(3, 3)]),
    ]
    assert topic.counters.entries_in == 4
    assert topic.last_sequence_id("pa") == 2


async def test_publish_message_reports_a_failed_append_to_every_send() -> None:
    ledger = _FailingLedger("t", 3)
    topic = PersistentTopic(TopicName.parse("persistent://a/b/t"), ledger)
    log: list[Any] = []
    a, b = _Sink(log, "a"), _Sink(log, "b")
    ledger.fail = True
    topic.publish_message(a, _producer(0, "pa"), 5, 5, 1, b"x")
    topic.publish_message(b, _producer(1, "pb"), 6, 6, 1, b"y")
    await wait_for(lambda: len(log) == 2, what="both sends reported")
    assert log == [("a", [5], "disk gone"), ("b", [6], "disk gone")]


@pytest.mark.parametrize("n", [1, 3])
async def test_batch_counts_are_remembered(n: int) -> None:
    topic = PersistentTopic(TopicName.parse("persistent://a/b/t"), MemoryLedger("t", 5))
    log: list[Any] = []
    topic.publish_message(_Sink(log, "a"), _producer(0, "p"), 0, n - 1, n, b"x")
    await wait_for(lambda: log, what="the send reported")
    assert topic.counts.known(Position(5, 0)) == n
    assert topic.counters.msg_in == n


def _send_frame(send: bytes) -> bytes:
    """A SEND frame whose CommandSend body is ``send`` (raw bytes: fields may be missing)."""
    cmd = b"\x08\x06" + b"\x32" + bytes([len(send)]) + send  # type=SEND; field 6: send
    tail = b"\x00\x00\x00\x00"  # an empty metadata section
    return struct.pack(">II", 4 + len(cmd) + len(tail), len(cmd)) + cmd + tail


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"\x10\x01", "no producer_id"),
        (b"\x08\x00", "no sequence_id"),
        (b"\x08\x00\x10\x01\x4a\x02\x08\x01", "message_id without entryId"),
    ],
)
async def test_send_missing_required_fields_closes_the_connection(
    body: bytes, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    from support.fake_transport import CONNECT, FakeTransport

    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.protocol.connection import ServerConnection
    from magnetar.broker.service import BrokerService
    from magnetar.broker.storage.memory import MemoryStorageFactory
    from magnetar.zk.memory import MemoryMetadataServer

    service = BrokerService(
        BrokerConfig(keep_alive_interval_seconds=0),
        MemoryMetadataServer().connect(),
        MemoryStorageFactory(),
    )
    cnx = ServerConnection(service)
    transport = FakeTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    cnx.data_received(CONNECT)
    assert not transport.closed
    with caplog.at_level(logging.INFO, logger="magnetar.broker.protocol.connection"):
        cnx.data_received(_send_frame(body))
    assert transport.closed, why
    assert "misses required fields" in caplog.text, why


async def test_drain_waits_until_every_send_is_reported() -> None:
    topic = PersistentTopic(TopicName.parse("persistent://a/b/t"), MemoryLedger("t", 6))
    log: list[Any] = []
    sink = _Sink(log, "a")
    for seq in range(3):
        topic.publish_message(sink, _producer(0, "p"), seq, seq, 1, b"x")
    await topic._drain_publishes()  # what close() awaits before disconnecting producers
    assert [seqs for _, seqs, _ in log] == [[0, 1, 2]]


def _batch_entry(n: int) -> bytes:
    from magnetar.client.protocol import encode_headers_and_payload

    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    md.num_messages_in_batch = n
    return encode_headers_and_payload(md, b"x" * n)


async def test_an_entry_read_before_its_append_is_reported_is_counted_from_its_bytes() -> None:
    """A dispatcher may read an entry between its storage and the topic's report of the
    append: its count then comes from its bytes, not the "absent = one message" rule (a
    batch of 1,000 charged one permit overfilled a consumer's receiver queue)."""
    from magnetar.broker.storage.contract import Entry

    ledger = MemoryLedger("t", 6)
    topic = PersistentTopic(TopicName.parse("persistent://a/b/t"), ledger)
    log: list[Any] = []
    topic.publish_message(_Sink(log, "a"), _producer(0, "p"), 0, 0, 1, _batch_entry(1))
    await wait_for(lambda: log, what="the send reported")
    assert topic.counts.known(Position(6, 0)) == 1
    # stored, not yet reported (the topic's completion callback has not run)
    data = _batch_entry(1000)
    [pos] = await ledger.add_entries([data])
    assert topic.counts.known(pos) is None
    assert topic.count_of(Entry(pos, data)) == 1000
    assert topic.last_message_id(None).batch_index in (-2, 999)  # resolved by a read
