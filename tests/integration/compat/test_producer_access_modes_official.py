"""Producer access modes against a real standalone, seen by the official client: which
refusal is ``ProducerFenced`` and which ``ProducerBusy`` (Pulsar's
``AbstractTopic.incrementTopicEpochIfNeeded``), waiting exclusive producers seen by shared
ones, fencing, and the topic epoch in the topic stats, stored with the topic across an
unload and a restart."""

from __future__ import annotations

import pathlib
import threading
import urllib.parse
import uuid

import pulsar
import pytest
from support.admin import http
from support.raw_client import RawClient
from support.standalone import StandaloneProcess
from support.waiting import wait_until

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

Mode = pulsar.ProducerAccessMode


def _topic() -> str:
    return f"persistent://public/default/am-{uuid.uuid4().hex[:8]}"


def _stats(server: StandaloneProcess, topic: str) -> dict:  # type: ignore[type-arg]
    path = urllib.parse.urlsplit(topic.replace("://", "/")).path
    status, body = http(server.web_url, "GET", f"/admin/v2/{path}/stats")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def test_second_exclusive_producer_is_fenced(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = _topic()
    holder = client.create_producer(topic, producer_name="holder", access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):  # a shared producer is busy, not fenced
        client.create_producer(topic)
    holder.send(b"still the holder")
    stats = _stats(server, topic)
    assert stats["topicEpoch"] == 0
    assert [(p["producerName"], p["accessMode"]) for p in stats["publishers"]] == [
        ("holder", "Exclusive")
    ]


def test_exclusive_after_shared_is_fenced(client: pulsar.Client) -> None:
    topic = _topic()
    client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)


def test_shared_producer_sees_a_waiting_exclusive_producer(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = _topic()
    shared = client.create_producer(topic)
    made: list[pulsar.Producer] = []
    waiter = threading.Thread(
        target=lambda: made.append(client.create_producer(topic, access_mode=Mode.WaitForExclusive))
    )
    waiter.start()
    try:
        # the waiting producer is not in the stats' publishers: a shared newcomer is
        # refused once it queues (Pulsar: waitingExclusiveProducers is not empty)
        def refused() -> bool:
            try:
                client.create_producer(topic).close()
            except pulsar.ProducerBusy:
                return True
            return False

        wait_until(refused, 60, "a shared producer refused while one waits for exclusive")
        assert not made
    finally:
        shared.close()
        waiter.join(60)
    assert made, "the waiting producer got the topic once the shared one left"
    made[0].send(b"exclusive now")
    assert _stats(server, topic)["topicEpoch"] == 0


def test_fencing_producer_takes_the_topic_and_moves_the_epoch(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = _topic()
    consumer = client.subscribe(topic, "s")
    first = client.create_producer(topic, access_mode=Mode.Exclusive)
    first.send(b"first")
    fencer = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
    fencer.send(b"fencer")
    assert _stats(server, topic)["topicEpoch"] == 1
    with pytest.raises(pulsar.PulsarException):
        first.send(b"fenced")  # its reconnect carries epoch 0 < 1: ProducerFenced
    assert [consumer.receive(30_000).data() for _ in range(2)] == [b"first", b"fencer"]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(500)


def _raw_exclusive_producer(server: StandaloneProcess, topic: str, epoch: int) -> pb.BaseCommand:
    """A PRODUCER (Exclusive) carrying ``epoch``, as a reconnecting client sends it."""
    raw = RawClient(server.port)
    try:
        raw.connect()
        req = pb.CommandProducer(
            topic=topic,
            producer_id=1,
            request_id=1,
            producer_access_mode=pb.Exclusive,
            topic_epoch=epoch,
        )
        raw.send(pb.BaseCommand(type=pb.BaseCommand.PRODUCER, producer=req))
        return raw.recv()
    finally:
        raw.sock.close()


def test_the_epoch_survives_unload_and_restart(tmp_path: pathlib.Path) -> None:
    """Pulsar stores the epoch in the managed ledger (``pulsar.topic.epoch``): a producer
    fenced before an unload or a restart is still fenced after it."""
    server = StandaloneProcess(tmp_path / "data", tmp_path / "standalone.log")
    server.start()
    try:
        topic = _topic()
        c = pulsar.Client(server.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
        try:
            c.create_producer(topic, access_mode=Mode.Exclusive).send(b"epoch 0")
            fencer = c.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
            fencer.send(b"epoch 1")
            fencer.close()
        finally:
            c.close()
        local = topic.replace("persistent://", "")
        assert http(server.web_url, "PUT", f"/admin/v2/persistent/{local}/unload")[0] == 204
        answer = _raw_exclusive_producer(server, topic, epoch=0)
        assert answer.type == pb.BaseCommand.ERROR, answer
        assert answer.error.error == pb.ProducerFenced
        server.stop()
        server.start()
        answer = _raw_exclusive_producer(server, topic, epoch=0)
        assert answer.error.error == pb.ProducerFenced, answer
        c = pulsar.Client(server.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
        try:
            c.create_producer(topic, access_mode=Mode.Exclusive).send(b"epoch 2")
        finally:
            c.close()
        assert _stats(server, topic)["topicEpoch"] == 2
    finally:
        server.stop()
