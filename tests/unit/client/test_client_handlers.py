"""The consumer's and producer's per-partition logic driven with codec-built frames and a
recording stand-in for the connection (no sockets): batches, chunks, compression, duplicate
filtering, redelivered batches, receipts in and out of order, pending-queue back-pressure."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.waiting import wait_for

from magnetar.client import (
    AlreadyClosed,
    CompressionType,
    ConsumerType,
    MessageId,
    ProducerQueueIsFull,
)
from magnetar.client._compression import compress
from magnetar.client._consumer import Consumer, ConsumerConfig, PartitionConsumer
from magnetar.client._handler import ClientContext, HandlerState
from magnetar.client._producer import Producer, ProducerConfig
from magnetar.client.protocol import (
    CommandType,
    PayloadCommand,
    TopicName,
    batch_metadata,
    build_batch,
    decode_frame_body,
    encode_headers_and_payload,
    encode_message_frame,
    pb,
)
from magnetar.clock import SystemClock


class RecordingConnection:
    max_message_size = 5 * 1024 * 1024

    def __init__(self) -> None:
        self.commands: list[pb.BaseCommand] = []
        self.frames: list[bytes] = []
        self.closed_reason: str | None = None

    def send_command(self, base: pb.BaseCommand) -> None:
        self.commands.append(base)

    def send_raw(self, frame: bytes) -> None:
        self.frames.append(frame)

    async def drain(self) -> None:
        return None

    def write_buffer_size(self) -> int:
        return 0

    async def close(self, reason: str = "") -> None:
        self.closed_reason = reason

    def of_type(self, t: CommandType) -> list[pb.BaseCommand]:
        return [c for c in self.commands if c.type == int(t)]


def _ctx() -> ClientContext:
    return ClientContext(None, None, SystemClock(), 30_000)  # type: ignore[arg-type]


def _consumer(**config: Any) -> tuple[Consumer, PartitionConsumer, RecordingConnection]:
    ctx = _ctx()
    cfg = ConsumerConfig("sub", **config)
    consumer = Consumer(
        ctx,
        cfg,
        topic_label="t",
        resolve_partitions=None,  # type: ignore[arg-type]
        list_topics=None,
        pattern=None,
        producer_factory=None,  # type: ignore[arg-type]
        on_close=lambda c: None,
    )
    part = PartitionConsumer(
        ctx, TopicName.parse("t"), cfg, consumer, partition=-1, queue_size=cfg.receiver_queue_size
    )
    consumer._parts[part.topic_name] = part
    cnx = RecordingConnection()
    part.state = HandlerState.READY
    part.cnx = cnx  # type: ignore[assignment]
    return consumer, part, cnx


def _message(
    entry: int, metadata: pb.MessageMetadata, payload: bytes, **kwargs: Any
) -> PayloadCommand:
    tail = encode_headers_and_payload(metadata, payload, checksum=True)
    event = decode_frame_body(encode_message_frame(0, 1, entry, tail, **kwargs)[4:])
    assert isinstance(event, PayloadCommand)
    return event


def _batch(entry: int, n: int, *, codec: CompressionType = CompressionType.NONE) -> PayloadCommand:
    smms = [pb.SingleMessageMetadata(payload_size=2, sequence_id=i) for i in range(n)]
    md = batch_metadata("p", 0, 1000, smms)
    raw = build_batch((s, f"m{i}".encode()) for i, s in enumerate(smms))
    if codec != CompressionType.NONE:
        md.compression = int(codec)  # type: ignore[assignment]
        md.uncompressed_size = len(raw)
        raw = compress(codec, raw)
    return _message(entry, md, raw)


async def _drain(consumer: Consumer) -> list[bytes]:
    out = []
    while consumer._queue:
        out.append((await consumer.receive(0)).data())
    return out


@pytest.mark.parametrize("codec", list(CompressionType)[:5])
async def test_batches_are_split_and_decompressed(codec: CompressionType) -> None:
    consumer, part, _ = _consumer()
    part.on_message(_batch(7, 3, codec=codec))
    msgs = [await consumer.receive(0) for _ in range(3)]
    assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.message_id().batch_index() for m in msgs] == [0, 1, 2]
    assert msgs[0].publish_timestamp() == 1000


async def test_batch_entry_acked_only_when_all_members_are() -> None:
    consumer, part, cnx = _consumer()
    part.on_message(_batch(7, 3))
    msgs = [await consumer.receive(0) for _ in range(3)]
    await consumer.acknowledge(msgs[0])
    await consumer.acknowledge(msgs[2])
    part.flush_acks()
    assert cnx.of_type(CommandType.ACK) == []
    await consumer.acknowledge(msgs[1])
    part.flush_acks()
    (ack,) = cnx.of_type(CommandType.ACK)
    assert [(m.ledgerId, m.entryId) for m in ack.ack.message_id] == [(1, 7)]
    part.check_invariants()


async def test_redelivered_batch_skips_members_already_acked() -> None:
    consumer, part, _ = _consumer()
    part.on_message(_batch(7, 3))
    msgs = [await consumer.receive(0) for _ in range(3)]
    await consumer.acknowledge(msgs[1])
    part.on_message(_batch(7, 3))  # the broker sends the whole entry again
    assert await _drain(consumer) == [b"m0", b"m2"]


async def test_acked_entry_sent_again_is_dropped_and_reacked() -> None:
    consumer, part, cnx = _consumer()
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    part.on_message(_message(3, md, b"x"))
    await consumer.acknowledge(await consumer.receive(0))
    part.flush_acks()
    part.on_message(_message(3, md, b"x"))
    assert await _drain(consumer) == []
    assert len(cnx.of_type(CommandType.ACK)) == 2  # the duplicate is acked again


async def test_chunks_are_reassembled_and_acked_together() -> None:
    consumer, part, cnx = _consumer()
    whole = b"abcdefgh"
    for i in range(4):
        md = pb.MessageMetadata(
            producer_name="p",
            sequence_id=0,
            publish_time=1,
            uuid="p-0",
            chunk_id=i,
            num_chunks_from_msg=4,
            total_chunk_msg_size=len(whole),
        )
        part.on_message(_message(10 + i, md, whole[2 * i : 2 * i + 2]))
    msg = await consumer.receive(0)
    assert msg.data() == whole
    assert msg.message_id().entry_id() == 13
    await consumer.acknowledge(msg)
    part.flush_acks()
    (ack,) = cnx.of_type(CommandType.ACK)
    assert [m.entryId for m in ack.ack.message_id] == [10, 11, 12, 13]


async def test_undecompressable_payload_is_acked_with_validation_error() -> None:
    consumer, part, cnx = _consumer()
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    md.compression = int(CompressionType.ZLIB)  # type: ignore[assignment]
    md.uncompressed_size = 10
    part.on_message(_message(4, md, b"not zlib"))
    assert await _drain(consumer) == []
    (ack,) = cnx.of_type(CommandType.ACK)
    assert ack.ack.validation_error == pb.CommandAck.DecompressionError


async def test_permits_are_returned_in_half_queue_flows() -> None:
    consumer, part, cnx = _consumer(receiver_queue_size=4)
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    for e in range(4):
        part.on_message(_message(e, md, b"x"))
    await consumer.receive(0)
    assert cnx.of_type(CommandType.FLOW) == []
    await consumer.receive(0)
    (flow,) = cnx.of_type(CommandType.FLOW)
    assert flow.flow.messagePermits == 2


async def test_cumulative_ack_in_a_batch_acks_the_previous_entry() -> None:
    consumer, part, cnx = _consumer(consumer_type=ConsumerType.Exclusive)
    part.on_message(_batch(7, 3))
    msgs = [await consumer.receive(0) for _ in range(3)]
    await consumer.acknowledge_cumulative(msgs[1])
    part.flush_acks()
    (ack,) = cnx.of_type(CommandType.ACK)
    assert ack.ack.ack_type == pb.CommandAck.Cumulative
    assert (ack.ack.message_id[0].ledgerId, ack.ack.message_id[0].entryId) == (1, 6)


async def test_nack_on_shared_redelivers_those_ids() -> None:
    consumer, part, cnx = _consumer(
        consumer_type=ConsumerType.Shared, negative_ack_redelivery_delay_ms=0
    )
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    part.on_message(_message(5, md, b"x"))
    await consumer.negative_acknowledge(await consumer.receive(0))
    part.tick()
    (redeliver,) = cnx.of_type(CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    ids = redeliver.redeliverUnacknowledgedMessages.message_ids
    assert [(m.ledgerId, m.entryId) for m in ids] == [(1, 5)]


def _producer(**config: Any) -> tuple[Producer, RecordingConnection]:
    prod = Producer(_ctx(), TopicName.parse("t"), ProducerConfig(**config), 0, lambda p: None)
    part = prod.partitions[0]
    cnx = RecordingConnection()
    part.state = HandlerState.READY
    part.cnx = cnx  # type: ignore[assignment]
    part.producer_name = "p"
    part._sequence_known = True
    return prod, cnx


def _receipt(sequence_id: int, entry: int) -> pb.CommandSendReceipt:
    return pb.CommandSendReceipt(
        producer_id=0,
        sequence_id=sequence_id,
        message_id=pb.MessageIdData(ledgerId=1, entryId=entry),
    )


async def test_receipts_complete_in_order_stale_ignored_ahead_drops_connection() -> None:
    prod, cnx = _producer()
    part = prod.partitions[0]
    f0 = await prod.send_async(b"a")
    f1 = await prod.send_async(b"b")
    assert len(cnx.frames) == 2
    part.on_send_receipt(_receipt(0, 10))
    assert f0.result() == MessageId(-1, 1, 10)
    part.on_send_receipt(_receipt(0, 10))  # stale: ignored
    assert not f1.done()
    part.on_send_receipt(_receipt(5, 11))  # ahead of the head: reconnect
    await wait_for(lambda: cnx.closed_reason is not None, what="the connection closed")
    assert cnx.closed_reason == "out-of-order receipt"
    assert not f1.done()


async def test_batch_receipt_gives_batch_indexes() -> None:
    prod, cnx = _producer(batching_enabled=True, batching_max_messages=3)
    futures = [await prod.send_async(f"m{i}".encode()) for i in range(3)]
    assert len(cnx.frames) == 1  # full batch sent at once
    prod.partitions[0].check_invariants()
    prod.partitions[0].on_send_receipt(_receipt(0, 4))
    prod.partitions[0].check_invariants()
    assert [f.result().batch_index() for f in futures] == [0, 1, 2]
    assert prod.last_sequence_id() == 2


async def test_pending_queue_is_bounded() -> None:
    prod, _ = _producer(max_pending_messages=2)
    await prod.send_async(b"a")
    await prod.send_async(b"b")
    with pytest.raises(ProducerQueueIsFull):
        await prod.send_async(b"c")
    prod.partitions[0].check_invariants()
    prod2, _ = _producer(max_pending_messages=1, block_if_queue_full=True)
    await prod2.send_async(b"a")
    blocked = asyncio.ensure_future(prod2.send_async(b"b"))
    await asyncio.sleep(0)
    assert not blocked.done()
    prod2.partitions[0].on_send_receipt(_receipt(0, 1))
    await asyncio.wait_for(blocked, 1)
    prod2.partitions[0].on_send_receipt(_receipt(1, 2))
    await prod2.close()
    with pytest.raises(AlreadyClosed):
        await prod2.send_async(b"c")


def test_the_reconnection_back_off_stops_at_the_client_s_maximum() -> None:
    """``Client(max_backoff_interval_ms=...)`` (the Java client's ``maxBackoffInterval``):
    a replicator's client comes back to a returned remote within that much."""
    from magnetar.client import Client, InvalidConfiguration
    from magnetar.client._handler import Handler

    ctx = ClientContext(None, None, SystemClock(), 1000, max_backoff_ms=2_000)  # type: ignore[arg-type]
    handler = Handler(ctx, TopicName.parse("t"))
    waits = [handler.backoff.next_ms() for _ in range(20)]
    assert max(waits) <= 2_000 and waits[-1] > 1_500
    with pytest.raises(InvalidConfiguration):
        Client("pulsar://localhost:6650", max_backoff_interval_ms=10)
