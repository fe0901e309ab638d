"""PRODUCER on a connection (issue 32 §4): every PRODUCER gets an answer, and a topic epoch
the wire cannot carry never reaches the topic. Requests are encoded and answers decoded with
the codec (a client-role ``Connection``), against a ``ServerConnection`` on a fake transport
and a service on in-memory storage."""

from __future__ import annotations

import logging

import pytest
from support.broker_connection import Client

from magnetar.broker.protocol.producers import TOPIC_EPOCH_MAX
from magnetar.broker.service import BrokerService
from magnetar.broker.topics.persistent import TOPIC_EPOCH_PROPERTY
from magnetar.client.protocol import (
    Command,
    CommandType,
    ServerError,
    commands,
    pb,
)

UINT64_MAX = (1 << 64) - 1
EXCLUSIVE = pb.ProducerAccessMode.Exclusive
WAIT_FOR_EXCLUSIVE = pb.ProducerAccessMode.WaitForExclusive


def producer(
    topic: str, pid: int, rid: int, mode: int = EXCLUSIVE, topic_epoch: int | None = None
) -> pb.BaseCommand:
    cmd = commands.producer(topic, pid, rid, access_mode=mode)
    if topic_epoch is not None:
        cmd.producer.topic_epoch = topic_epoch
    return cmd


async def created(client: Client, cmd: pb.BaseCommand) -> pb.CommandProducerSuccess:
    got = await client.request(cmd, cmd.producer.request_id)
    assert got.type is CommandType.PRODUCER_SUCCESS, got.base
    return got.base.producer_success


def error_of(got: Command) -> pb.CommandError:
    assert got.type is CommandType.ERROR, got.base
    return got.base.error


async def refused(client: Client, cmd: pb.BaseCommand) -> pb.CommandError:
    return error_of(await client.request(cmd, cmd.producer.request_id))


async def close_producer(client: Client, pid: int, rid: int) -> None:
    close = commands.make_command(CommandType.CLOSE_PRODUCER, producer_id=pid, request_id=rid)
    assert (await client.request(close, rid)).type is CommandType.SUCCESS


async def test_an_epoch_beyond_a_java_long_is_refused_and_never_stored(
    service: BrokerService, caplog: pytest.LogCaptureFixture
) -> None:
    """The fuzzer's PRODUCER: topic_epoch 2^64-1 was stored, and every later Exclusive
    producer moved it past the wire's uint64: ERROR tracebacks, no answer, forever."""
    topic = "persistent://public/default/epoch-absurd"
    client = await Client(service).connect()
    with caplog.at_level(logging.ERROR):
        for epoch in (UINT64_MAX, TOPIC_EPOCH_MAX + 1):
            error = await refused(client, producer(topic, 1, 10, topic_epoch=epoch))
            assert error.error == ServerError.NotAllowedError
            assert str(epoch) in error.message
        loaded = service.topics[topic]
        assert loaded.producers.topic_epoch is None
        assert TOPIC_EPOCH_PROPERTY not in loaded.ledger.properties
        assert not loaded.producers.producers
        # the topic is not poisoned: the next exclusive producers get epochs 0, then 1
        assert (await created(client, producer(topic, 2, 20))).topic_epoch == 0
        await close_producer(client, 2, 21)
        assert (await created(client, producer(topic, 3, 30))).topic_epoch == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_the_largest_epoch_is_taken_and_the_next_one_still_fits(
    service: BrokerService,
) -> None:
    topic = "persistent://public/default/epoch-largest"
    client = await Client(service).connect()
    got = await created(client, producer(topic, 1, 10, topic_epoch=TOPIC_EPOCH_MAX))
    assert got.topic_epoch == TOPIC_EPOCH_MAX
    await close_producer(client, 1, 11)
    assert (await created(client, producer(topic, 2, 20))).topic_epoch == TOPIC_EPOCH_MAX + 1
    assert service.topics[topic].ledger.properties[TOPIC_EPOCH_PROPERTY] == str(TOPIC_EPOCH_MAX + 1)


async def _poisoned(service: BrokerService, topic: str) -> None:
    """A topic whose stored epoch is 2^64-1 (stored before epochs were bounded)."""
    loaded = await service.get_topic(topic, create=True)
    assert loaded is not None
    await loaded.ledger.set_property(TOPIC_EPOCH_PROPERTY, str(UINT64_MAX))
    await service.unload_topic(topic)


async def test_a_poisoned_topic_answers_exclusive_producers_and_stays_usable(
    service: BrokerService, caplog: pytest.LogCaptureFixture
) -> None:
    topic = "persistent://public/default/epoch-poisoned"
    await _poisoned(service, topic)
    client = await Client(service).connect()
    with caplog.at_level(logging.ERROR):
        for pid in (1, 2):  # each attempt used to move the stored epoch one further
            error = await refused(client, producer(topic, pid, pid * 10))
            assert error.error == ServerError.NotAllowedError
            assert "beyond" in error.message
        loaded = service.topics[topic]
        assert loaded.ledger.properties[TOPIC_EPOCH_PROPERTY] == str(UINT64_MAX)
        assert loaded.producers.topic_epoch == UINT64_MAX  # back to the stored one
        assert not loaded.producers.producers  # nobody left behind
        shared = producer(topic, 3, 30, mode=pb.ProducerAccessMode.Shared)
        assert not (await created(client, shared)).HasField("topic_epoch")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_a_waiting_producer_admitted_past_the_wire_range_is_answered(
    service: BrokerService,
) -> None:
    topic = "persistent://public/default/epoch-waiting"
    await _poisoned(service, topic)
    client = await Client(service).connect()
    await created(client, producer(topic, 1, 10, mode=pb.ProducerAccessMode.Shared))
    waiting = producer(topic, 2, 20, mode=WAIT_FOR_EXCLUSIVE)
    assert not (await created(client, waiting)).producer_ready
    await close_producer(client, 1, 11)  # admits the waiting one: epoch 2^64
    error = error_of(await client.answer(20))  # answered on its PRODUCER's request id
    assert error.error == ServerError.NotAllowedError
    assert client.cnx.producers.get(2) is None
    loaded = service.topics[topic]
    assert not loaded.producers.producers
    assert loaded.ledger.properties[TOPIC_EPOCH_PROPERTY] == str(UINT64_MAX)


async def test_an_unforeseen_failure_is_answered_and_leaves_no_producer(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    topic = "persistent://public/default/unforeseen"
    loaded = await service.get_topic(topic, create=True)
    assert loaded is not None

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(loaded, "create_subscription", broken)
    client = await Client(service).connect()
    cmd = producer(topic, 1, 10)
    cmd.producer.initial_subscription_name = "s"
    error = await refused(client, cmd)
    assert error.error == ServerError.ServiceNotReady
    assert "boom" in error.message
    assert not loaded.producers.producers

    def no_sequence_ids(name: str) -> int:
        raise RuntimeError("no sequence ids")

    monkeypatch.setattr(loaded, "last_sequence_id", no_sequence_ids)
    with caplog.at_level(logging.ERROR):
        error = await refused(client, producer(topic, 2, 20))
    assert error.error == ServerError.UnknownError
    assert "no sequence ids" in error.message
    assert not loaded.producers.producers
    assert client.cnx.producers.get(2) is None
    assert "producer 2" in caplog.text  # logged with its traceback: a bug, not a refusal
