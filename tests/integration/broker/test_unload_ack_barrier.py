"""Unload with acknowledgements in flight: an ACK the client wrote before it read
CLOSE_CONSUMER reaches the closing topic's cursor and is never redelivered.

A raw-protocol consumer holds its messages unacknowledged while the topic unloads; once the
broker has written CLOSE_CONSUMER (its consumer is gone from the subscription) and before the
client reads anything, the client writes its ACK, as a real client whose grouped acks are
flushed at that moment does. The broker keeps taking that consumer's ACKs until the client
answers the PING written after CLOSE_CONSUMER (the ack barrier); without it the ACK finds no
consumer, is dropped, and the reloaded topic delivers the acknowledged messages again.
"""

from __future__ import annotations

import asyncio

import pulsar
from support.broker import InProcessBroker
from support.raw_client import RawClient, T
from support.waiting import wait_until

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

TOPIC = "persistent://public/default/ack-barrier"


def _subscribed(raw: RawClient) -> None:
    raw.send(
        T(
            type=T.SUBSCRIBE,
            subscribe=pb.CommandSubscribe(
                topic=TOPIC,
                subscription="s",
                subType=pb.CommandSubscribe.Exclusive,
                consumer_id=1,
                request_id=1,
                initialPosition=pb.CommandSubscribe.Earliest,
            ),
        )
    )
    got = raw.recv()
    while got.type == T.ACTIVE_CONSUMER_CHANGE:
        got = raw.recv()
    assert got.type == T.SUCCESS, got


def test_an_ack_written_before_the_client_read_close_consumer_is_kept(
    magnetar_broker: InProcessBroker,
) -> None:
    b = magnetar_broker
    svc = b.service
    assert svc is not None
    raw = RawClient(b.port)
    raw.connect()
    _subscribed(raw)
    client = pulsar.Client(b.service_url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(5):
            producer.send(b"m%d" % i)
        raw.send(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=100)))
        ids = []
        while len(ids) < 5:
            cmd = raw.recv()
            if cmd.type == T.MESSAGE:
                ids.append(cmd.message.message_id)
        # unload while the consumer holds all five unacknowledged (the broker waits for its
        # acks a bounded time, then writes CLOSE_CONSUMER)
        unload = asyncio.run_coroutine_threadsafe(svc.unload_topic(TOPIC), b.loop)
        topic = svc.topics.get(TOPIC)

        async def close_consumer_written() -> bool:
            return topic is None or not topic.subscriptions["s"].consumers

        wait_until(lambda: b.call(close_consumer_written), 30, "CLOSE_CONSUMER written")
        # the client has not read CLOSE_CONSUMER yet: its ACK is in flight
        raw.send(
            T(
                type=T.ACK,
                ack=pb.CommandAck(
                    consumer_id=1,
                    ack_type=pb.CommandAck.Individual,
                    message_id=[
                        pb.MessageIdData(ledgerId=m.ledgerId, entryId=m.entryId) for m in ids
                    ],
                ),
            )
        )
        seen_close = False
        raw.sock.settimeout(0.2)
        while not (seen_close and unload.done()):
            try:
                cmd = raw.recv()
            except TimeoutError:
                continue
            if cmd.type == T.CLOSE_CONSUMER:
                seen_close = True
            elif cmd.type == T.PING:
                raw.send(T(type=T.PONG, pong=pb.CommandPong()))
        unload.result(30)
        # the topic loads again: the first message the subscription delivers is a new one
        consumer = client.subscribe(TOPIC, "s", consumer_type=pulsar.ConsumerType.Exclusive)
        producer.send(b"after")
        got = consumer.receive(30_000).data()
        assert got == b"after", f"an acknowledged message was delivered again: {got!r}"
    finally:
        raw.close()
        client.close()
