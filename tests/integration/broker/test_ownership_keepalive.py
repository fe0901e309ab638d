"""Bundle ownership across two brokers on one metadata service (lookup redirects, a
non-owner refuses to serve, session loss closes the topics) and keep-alive."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from support.broker import InProcessBroker
from support.raw_client import RawClient, T
from support.waiting import wait_until

from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.zk.memory import MemoryMetadataServer


@pytest.fixture
def two_brokers() -> Iterator[tuple[InProcessBroker, InProcessBroker]]:
    metadata = MemoryMetadataServer()
    storage = MemoryStorageFactory()  # shared "bookies"; only the bundle owner touches a topic
    a = InProcessBroker(metadata, storage).start()
    b = InProcessBroker(metadata, storage).start()
    try:
        yield a, b
    finally:
        b.stop()
        a.stop()


def test_lookup_redirects_to_the_owner_and_the_client_follows(
    two_brokers: tuple[InProcessBroker, InProcessBroker],
) -> None:
    a, b = two_brokers
    topic = "persistent://public/default/owned"
    assert a.service is not None and b.service is not None
    sa, sb = a.service, b.service
    first = a.call(lambda: sa.namespaces.lookup(topic))
    assert not first.redirect and first.broker_url == a.service_url
    other = b.call(lambda: sb.namespaces.lookup(topic))
    assert other.redirect and other.broker_url == a.service_url
    client = pulsar.Client(b.service_url, operation_timeout_seconds=5)  # asks the non-owner
    try:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"hello")
        assert consumer.receive(5000).data() == b"hello"
    finally:
        client.close()
    assert topic in sa.topics and topic not in sb.topics


def test_non_owner_refuses_to_serve(two_brokers: tuple[InProcessBroker, InProcessBroker]) -> None:
    a, b = two_brokers
    topic = "persistent://public/default/elsewhere"
    assert a.service is not None
    sa = a.service
    a.call(lambda: sa.namespaces.lookup(topic))
    raw = RawClient(b.port)
    raw.connect()
    raw.send(
        T(type=T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=0, request_id=1))
    )
    got = raw.recv()
    assert got.type == T.ERROR and got.error.error == pb.ServiceNotReady
    raw.close()


def test_session_loss_closes_topics_and_disconnects_clients() -> None:
    metadata = MemoryMetadataServer()
    broker = InProcessBroker(metadata).start()
    try:
        assert broker.service is not None
        service = broker.service
        raw = RawClient(broker.port)
        raw.connect()
        topic = "persistent://public/default/lost"
        raw.send(
            T(
                type=T.PRODUCER,
                producer=pb.CommandProducer(topic=topic, producer_id=0, request_id=1),
            )
        )
        assert raw.recv().type == T.PRODUCER_SUCCESS
        broker.loop.call_soon_threadsafe(metadata.expire_session, service.store.session_id)
        got = raw.recv()
        assert got.type == T.CLOSE_PRODUCER and got.close_producer.producer_id == 0
        wait_until(lambda: topic not in service.topics)
        raw.close()
    finally:
        broker.stop()


def test_keepalive_pings_and_closes_silent_or_unconnected_peers() -> None:
    broker = InProcessBroker(keep_alive_interval_seconds=1).start()
    try:
        silent = RawClient(broker.port)
        silent.connect()
        assert silent.recv().type == T.PING  # our own PING after one interval
        assert silent.is_closed()  # no answer within the next interval: closed
        never = RawClient(broker.port)  # never sends CONNECT
        assert never.is_closed()
        polite = RawClient(broker.port)
        polite.connect()
        for _ in range(2):
            assert polite.recv().type == T.PING
            polite.send(T(type=T.PONG, pong=pb.CommandPong()))
        polite.ping_pong()
        polite.close()
    finally:
        broker.stop()
