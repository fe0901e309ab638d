"""SUBSCRIBE refused with ServiceNotReady (a bundle being unloaded or split, storage not ready):
the client must be able to retry. The C++ client core (pulsar-client 3.x) keeps the connection
it sent its first SUBSCRIBE on after such a refusal and takes its own retry for "already
connected", so it waited out the whole operation timeout (a CI run: a subscribe during an
automatic bundle split timed out after 60 s); the broker follows the refusal with
CLOSE_CONSUMER, which makes that client look the topic up again."""

from __future__ import annotations

import pytest
from support.broker_connection import Client

from magnetar.broker.service import BrokerService
from magnetar.client.protocol import CommandType, ServerError, commands

TOPIC = "persistent://public/default/refused"


async def _refused_subscribe(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch, client_version: str
) -> Client:
    topic = await service.get_topic(TOPIC, create=True)
    assert topic is not None

    async def storage_down(*args: object, **kwargs: object) -> None:
        raise RuntimeError("bookies unavailable")

    monkeypatch.setattr(topic, "subscribe", storage_down)
    client = await Client(service).connect(client_version)
    got = await client.request(commands.subscribe(TOPIC, "sub", 7, 70), 70)
    assert got.type is CommandType.ERROR, got.base
    assert got.base.error.error == ServerError.ServiceNotReady
    return client


async def test_a_cpp_core_client_refused_as_not_ready_is_told_to_reconnect(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _refused_subscribe(service, monkeypatch, "Pulsar-Python-v3.13.0")
    client.send(commands.ping())
    await client.next_of(CommandType.PONG)  # everything the broker wrote before it is read
    closes = [a for a in client.answers if a.type is CommandType.CLOSE_CONSUMER]
    assert [c.base.close_consumer.consumer_id for c in closes] == [7]


async def test_other_clients_get_the_refusal_alone(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await _refused_subscribe(service, monkeypatch, "Pulsar-Java-v4.0.0")
    client.send(commands.ping())
    await client.next_of(CommandType.PONG)
    assert not [a for a in client.answers if a.type is CommandType.CLOSE_CONSUMER]
