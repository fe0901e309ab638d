"""Hostile binary-protocol input (issue 13): one request must never freeze, exhaust or
corrupt the broker. Each test reproduces one report against an in-process broker whose
topics are managed ledgers on fake bookies (three entries per ledger, so topics span
several ledgers), over real sockets."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from support.broker import InProcessBroker
from support.fuzz import BrokerWatch
from support.hostile import Tracebacks, batch_payload, entry, ml_broker
from support.raw_client import RawClient, T
from support.standalone import StandaloneFactory
from support.waiting import wait_until

from magnetar.broker.ledger.position import Position
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

U64 = (1 << 64) - 1


@pytest.fixture(scope="module")
def broker() -> Iterator[InProcessBroker]:
    b = ml_broker()
    try:
        yield b
    finally:
        b.stop()


_ids = iter(range(1, 1 << 30))


def _topic() -> str:
    return f"persistent://public/default/hostile-{next(_ids)}"


def _producer(c: RawClient, topic: str, pid: int = 0) -> None:
    c.send(
        T(
            type=T.PRODUCER,
            producer=pb.CommandProducer(topic=topic, producer_id=pid, request_id=pid + 100),
        )
    )
    got = c.recv()
    assert got.type == T.PRODUCER_SUCCESS, got


def _subscribe(
    c: RawClient, topic: str, sub: str = "s", cid: int = 0, kind: int = pb.CommandSubscribe.Shared
) -> None:
    c.send(
        T(
            type=T.SUBSCRIBE,
            subscribe=pb.CommandSubscribe(
                topic=topic,
                subscription=sub,
                subType=kind,
                consumer_id=cid,
                request_id=cid + 200,
                initialPosition=pb.CommandSubscribe.Earliest,
            ),
        )
    )
    got = c.recv()
    assert got.type == T.SUCCESS, got


def _send(
    c: RawClient, tail: bytes, seq: int, num: int | None = None, pid: int = 0
) -> pb.BaseCommand:
    send = pb.CommandSend(producer_id=pid, sequence_id=seq)
    if num is not None:
        send.num_messages = num
    c.send(T(type=T.SEND, send=send), tail)
    return c.recv()


def _position(got: pb.BaseCommand) -> Position:
    assert got.type == T.SEND_RECEIPT, got
    mid = got.send_receipt.message_id
    return Position(mid.ledgerId, mid.entryId)


def _cursor(broker: InProcessBroker, topic: str, sub: str = "s"):  # type: ignore[no-untyped-def]
    assert broker.service is not None
    # the managed cursor, under the subscription's marker filter
    return broker.service.topics[topic].subscriptions[sub].cursor.inner.cursor


def test_batch_declaring_more_messages_than_its_bytes_is_refused(broker: InProcessBroker) -> None:
    """A SEND declaring num_messages = 10^6 (or 2^31-1) in a few bytes: a later batch ack
    would build that many indexes on the loop. The entry's real content bounds it."""
    c = RawClient(broker.port)
    c.connect()
    topic = _topic()
    _producer(c, topic)
    for n in (1_000_000, (1 << 31) - 1):
        got = _send(c, entry(batch_payload(3), num_messages_in_batch=n), seq=n, num=n)
        assert got.type == T.SEND_ERROR, got
        assert got.send_error.error == pb.ChecksumError
        assert "num_messages" in got.send_error.message
    got = _send(c, entry(batch_payload(3), num_messages_in_batch=3), seq=1, num=3)
    assert got.type == T.SEND_RECEIPT
    c.ping_pong()
    c.close()


def test_negative_num_messages_refused_and_consumer_stats_still_answered(
    broker: InProcessBroker,
) -> None:
    c = RawClient(broker.port)
    c.connect()
    topic = _topic()
    _producer(c, topic)
    _subscribe(c, topic)
    got = _send(c, entry(), seq=0, num=-5)
    assert got.type == T.SEND_ERROR and got.send_error.error == pb.ChecksumError
    c.send(
        T(type=T.CONSUMER_STATS, consumerStats=pb.CommandConsumerStats(request_id=9, consumer_id=0))
    )
    got = c.recv()
    assert got.type == T.CONSUMER_STATS_RESPONSE
    assert not got.consumerStatsResponse.HasField("error_code")
    c.close()


def test_batch_ack_set_is_bounded_by_the_entrys_real_batch(broker: InProcessBroker) -> None:
    c = RawClient(broker.port)
    c.connect()
    topic = _topic()
    _producer(c, topic)
    pos = _position(_send(c, entry(batch_payload(3), num_messages_in_batch=3), seq=0, num=3))
    _subscribe(c, topic, cid=1)
    # an ack set of 100,000 words with index 0 acknowledged: only the batch's 3 bits count
    words = [-2] + [0] * 99_999
    ack = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, request_id=5)
    ack.message_id.add(ledgerId=pos.ledger_id, entryId=pos.entry_id, ack_set=words)
    c.send(T(type=T.ACK, ack=ack))
    got = c.recv()
    while got.type == T.MESSAGE:
        got = c.recv()
    assert got.type == T.ACK_RESPONSE and not got.ackResponse.HasField("error")
    size, mask = _cursor(broker, topic).batch_ack_set(pos)
    assert (size, mask) == (3, 1)
    c.close()


def test_ack_of_an_absurd_entry_in_an_older_ledger_is_ignored(broker: InProcessBroker) -> None:
    """On a topic of several ledgers, ACK(first ledger, 2^30) grew the ack bitmap to 128 MB."""
    c = RawClient(broker.port)
    c.connect()
    topic = _topic()
    _producer(c, topic)
    _subscribe(c, topic, cid=2)
    positions = [_position(_send(c, entry(sequence_id=i), seq=i)) for i in range(7)]
    first = positions[0].ledger_id
    assert positions[-1].ledger_id != first  # the topic spans several ledgers
    absurd = Position(first, 1 << 30)
    ack = pb.CommandAck(consumer_id=2, ack_type=pb.CommandAck.Individual, request_id=6)
    ack.message_id.add(ledgerId=absurd.ledger_id, entryId=absurd.entry_id)
    ack.message_id.add(ledgerId=first, entryId=U64)  # entry -1
    ack.message_id.add(ledgerId=first, entryId=U64, ack_set=[-2])  # batch ack of entry -1
    ack.message_id.add(ledgerId=1 << 40, entryId=0)  # a ledger that does not exist
    with Tracebacks() as tb:
        c.send(T(type=T.ACK, ack=ack))
        got = c.recv()
        while got.type == T.MESSAGE:
            got = c.recv()
        assert got.type == T.ACK_RESPONSE
        cursor = _cursor(broker, topic)
        assert not cursor.is_acknowledged(absurd)
        assert not cursor.is_acknowledged(Position(1 << 40, 0))
        broker.call(cursor.flush)  # the cursor's next durable write encodes its state
    assert not tb.records, tb.text()
    c.ping_pong()
    c.close()


def test_metadata_without_producer_name_is_refused_before_storing(broker: InProcessBroker) -> None:
    c = RawClient(broker.port)
    c.connect()
    topic = _topic()
    _producer(c, topic)
    for extra in ({"uuid": "u-1", "num_chunks_from_msg": 2, "chunk_id": 0}, {"deliver_at_time": 5}):
        got = _send(c, entry(producer_name=None, **extra), seq=0)
        assert got.type == T.SEND_ERROR and got.send_error.error == pb.ChecksumError, got
        assert "producer_name" in got.send_error.message
    got = _send(c, entry(uuid="u", num_chunks_from_msg=2, chunk_id=7), seq=1)
    assert got.type == T.SEND_ERROR, got
    c.close()


@pytest.mark.parametrize(
    "poison",
    [
        entry(producer_name=None, uuid="u-1", num_chunks_from_msg=2, checksum=False),
        entry(producer_name=None, deliver_at_time=5, checksum=False),
        b"\x00\x00\x00\x05garbage",
    ],
    ids=["uuid", "deliver-at", "garbage"],
)
def test_dispatch_skips_an_entry_it_cannot_parse(broker: InProcessBroker, poison: bytes) -> None:
    """An unparseable entry already stored (from before validation) must not stall the
    subscription: the entries after it (same ledger) are delivered, with no traceback."""
    assert broker.service is not None
    service = broker.service
    topic = _topic()
    broker.call(lambda: service.create_topic(topic))
    poisoned = service.topics[topic]
    c = RawClient(broker.port)
    c.connect()
    with Tracebacks() as tb:
        _subscribe(c, topic, cid=3)
        broker.call(lambda: poisoned.ledger.add_entries([poison]))
        _producer(c, topic)
        _send(c, entry(payload=b"after"), seq=0)
        c.send(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=3, messagePermits=100)))
        seen: list[bytes] = []
        while not any(d.endswith(b"after") for d in seen):
            got = c.recv()  # times out (5 s) if the subscription stalls
            if got.type == T.MESSAGE:
                seen.append(c.last_payload)
    assert not tb.records, tb.text()
    c.close()


def test_ack_on_a_non_persistent_subscription_is_answered(broker: InProcessBroker) -> None:
    c = RawClient(broker.port)
    c.connect()
    topic = "non-persistent://public/default/np-ack"
    with Tracebacks() as tb:
        _subscribe(c, topic, cid=4)
        ack = pb.CommandAck(consumer_id=4, ack_type=pb.CommandAck.Individual, request_id=11)
        ack.message_id.add(ledgerId=1, entryId=2)
        c.send(T(type=T.ACK, ack=ack))
        got = c.recv()
        assert got.type == T.ACK_RESPONSE and got.ackResponse.request_id == 11
    assert not tb.records, tb.text()
    c.close()


def _with_bad_utf8(cmd: pb.BaseCommand, good: bytes) -> bytes:
    return cmd.SerializeToString().replace(good, good[:1] + b"\xff" + good[2:])


@pytest.mark.parametrize("kind", ["lookup", "producer", "topics", "subscribe"])
def test_invalid_utf8_in_string_fields_is_answered(broker: InProcessBroker, kind: str) -> None:
    name = b"persistent://public/default/utf8-topic"
    commands = {
        "lookup": T(
            type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic=name.decode(), request_id=21)
        ),
        "producer": T(
            type=T.PRODUCER,
            producer=pb.CommandProducer(topic=name.decode(), producer_id=1, request_id=21),
        ),
        "topics": T(
            type=T.GET_TOPICS_OF_NAMESPACE,
            getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
                namespace="public/default", request_id=21
            ),
        ),
        "subscribe": T(
            type=T.SUBSCRIBE,
            subscribe=pb.CommandSubscribe(
                topic="persistent://public/default/utf8-sub",
                subscription="subname",
                subType=pb.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=21,
            ),
        ),
    }
    target = {"topics": b"public/default", "subscribe": b"subname"}.get(kind, name)
    body = _with_bad_utf8(commands[kind], target)
    c = RawClient(broker.port)
    c.connect()
    with Tracebacks() as tb:
        c.send_raw(struct.pack(">II", 4 + len(body), len(body)) + body)
        got = c.recv()
    assert got.type != T.PONG
    answered = {
        T.LOOKUP_RESPONSE: lambda g: g.lookupTopicResponse.request_id,
        T.PRODUCER_SUCCESS: lambda g: g.producer_success.request_id,
        T.ERROR: lambda g: g.error.request_id,
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE: lambda g: g.getTopicsOfNamespaceResponse.request_id,
        T.SUCCESS: lambda g: g.success.request_id,
    }
    assert got.type in answered, got
    assert answered[got.type](got) == 21
    if got.type == T.LOOKUP_RESPONSE:
        assert got.lookupTopicResponse.error != pb.ServiceNotReady
    assert not tb.records, tb.text()
    c.ping_pong()
    c.close()


def _unsubscribe(c: RawClient, cid: int) -> pb.BaseCommand:
    c.send(
        T(
            type=T.UNSUBSCRIBE,
            unsubscribe=pb.CommandUnsubscribe(consumer_id=cid, request_id=cid + 300),
        )
    )
    return c.recv()


def test_subscription_names_are_encoded_in_metadata_paths(broker: InProcessBroker) -> None:
    """Subscribing ``a`` and ``a/b`` then unsubscribing ``a`` failed ("node has children");
    after an unload ``a/b`` was gone; a name could collide with ``__delayed_index``."""
    assert broker.service is not None
    service = broker.service
    topic = _topic()
    c = RawClient(broker.port)
    c.connect()
    names = ["a", "a/b", "a/b/__delayed_index", "__delayed_index", "50%25/x%2F"]
    for cid, name in enumerate(names, start=10):
        _subscribe(c, topic, sub=name, cid=cid)
    got = _unsubscribe(c, 10)
    assert got.type == T.SUCCESS, got
    broker.call(lambda: service.unload_topic(topic))
    c2 = RawClient(broker.port)
    c2.connect()
    _subscribe(c2, topic, sub="a/b", cid=1)  # loads the topic again, recovering cursors
    assert sorted(service.topics[topic].subscriptions) == sorted(names[1:])
    c.close()
    c2.close()


@pytest.mark.parametrize("name", ["", "  ", "a\x00b", "pulsar.dedup", "pulsar.repl.x", "x" * 1025])
def test_subscription_names_pulsar_refuses(broker: InProcessBroker, name: str) -> None:
    c = RawClient(broker.port)
    c.connect()
    c.send(
        T(
            type=T.SUBSCRIBE,
            subscribe=pb.CommandSubscribe(
                topic=_topic(),
                subscription=name,
                subType=pb.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=31,
            ),
        )
    )
    got = c.recv()
    assert got.type == T.ERROR and got.error.request_id == 31, got
    assert got.error.error == pb.InvalidTopicName
    c.ping_pong()
    c.close()


def test_partial_frames_have_a_broker_wide_budget() -> None:
    """60 connections each holding a 5 MiB - 1 byte partial frame added 313 MB: the bytes
    all connections hold between reads have one broker-wide budget."""
    b = ml_broker(max_buffered_partial_frames_size_in_mb=1)
    try:
        assert b.listener is not None
        budget = b.listener.input_budget
        partial = struct.pack(">I", 900_000) + b"\x00" * 400_000  # a frame's first 400 KB
        holders = [RawClient(b.port) for _ in range(2)]
        for c in holders:
            c.connect()
            c.send_raw(partial)
        wait_until(lambda: budget.used_bytes >= 800_000, 30, "two partial frames held")
        third = RawClient(b.port)
        third.connect()
        third.send_raw(partial)
        assert third.is_closed()  # 1.2 MB would be held: over the 1 MiB budget
        assert budget.statistics().refused == 1
        healthy = RawClient(b.port)
        healthy.connect()
        healthy.ping_pong()
        for c in (*holders, healthy):
            c.close()
        wait_until(lambda: budget.used_bytes == 0, 30, "budget released")
    finally:
        b.stop()


def test_batch_ack_of_entry_minus_one_never_breaks_cursor_persistence(
    broker: InProcessBroker,
) -> None:
    """Batch acks and redeliveries of (ledger, -1) and (-1, -1) never reach the cursor's
    encodings (whose varints refuse negative entry ids: "negative varint -1" tracebacks):
    later acks are still made durable, with no error logged. A regression guard: this exact
    sequence did not reproduce the report before the fix."""
    c = RawClient(broker.port)
    c.connect()
    topic = _topic()
    _producer(c, topic)
    pos = _position(_send(c, entry(sequence_id=0), seq=0))
    _subscribe(c, topic, cid=5)
    with Tracebacks() as tb:
        ack = pb.CommandAck(consumer_id=5, ack_type=pb.CommandAck.Individual, request_id=41)
        ack.message_id.add(ledgerId=pos.ledger_id, entryId=U64, ack_set=[-2])
        c.send(T(type=T.ACK, ack=ack))
        got = c.recv()
        while got.type == T.MESSAGE:
            got = c.recv()
        assert got.type == T.ACK_RESPONSE
        redeliver = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=5)
        redeliver.message_ids.add(ledgerId=pos.ledger_id, entryId=U64)
        redeliver.message_ids.add(ledgerId=U64, entryId=U64)
        c.send(
            T(
                type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                redeliverUnacknowledgedMessages=redeliver,
            )
        )
        c.send(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=5, messagePermits=10)))
        ack = pb.CommandAck(consumer_id=5, ack_type=pb.CommandAck.Individual, request_id=42)
        ack.message_id.add(ledgerId=pos.ledger_id, entryId=pos.entry_id)
        c.send(T(type=T.ACK, ack=ack))
        got = c.recv()
        while got.type == T.MESSAGE:
            got = c.recv()
        assert got.type == T.ACK_RESPONSE and not got.ackResponse.HasField("error"), got
        cursor = _cursor(broker, topic)
        broker.call(cursor.flush)
        assert cursor.is_acknowledged(pos)
    assert not tb.records, tb.text()
    c.close()


def test_an_absurd_topic_epoch_is_refused_by_a_real_standalone(
    standalone_factory: StandaloneFactory,
) -> None:
    """Issue 32 §4, as the fuzzer found it: a raw PRODUCER carrying topic_epoch 2^64-1 was
    stored, and from then on every Exclusive producer on the topic failed with a traceback
    and no answer. Now it is refused, the topic keeps serving exclusive producers (epochs 0,
    1), and the broker logs no error."""
    standalone = standalone_factory.create("epoch").start()
    assert standalone.proc is not None
    watch = BrokerWatch(standalone.proc.pid, standalone.log_path)
    watch.mark()
    topic = "persistent://public/default/absurd-epoch"
    c = RawClient(standalone.port)
    c.connect()

    def produce(pid: int, epoch: int | None = None) -> pb.BaseCommand:
        req = pb.CommandProducer(
            topic=topic,
            producer_id=pid,
            request_id=pid + 100,
            producer_access_mode=pb.ProducerAccessMode.Exclusive,
        )
        if epoch is not None:
            req.topic_epoch = epoch
        c.send(T(type=T.PRODUCER, producer=req))
        return c.recv()

    for pid in (1, 2):  # each attempt used to push the stored epoch further
        got = produce(pid, epoch=U64)
        assert got.type == T.ERROR and got.error.request_id == pid + 100, got
        assert got.error.error == pb.NotAllowedError
    got = produce(3)
    assert got.type == T.PRODUCER_SUCCESS and got.producer_success.topic_epoch == 0, got
    c.send(
        T(
            type=T.CLOSE_PRODUCER,
            close_producer=pb.CommandCloseProducer(producer_id=3, request_id=7),
        )
    )
    assert c.recv().type == T.SUCCESS
    got = produce(4)
    assert got.type == T.PRODUCER_SUCCESS and got.producer_success.topic_epoch == 1, got
    c.ping_pong()
    c.close()
    tracebacks = watch.tracebacks_since_mark()
    assert not tracebacks, "\n\n".join(tracebacks)
