"""CONSUMER_STATS and GET_SCHEMA on a connection: each is answered in its own response, also
when it is refused (the C++ client matches no ERROR against them)."""

from __future__ import annotations

import pytest
from support.fake_transport import FakeTransport
from support.waiting import wait_for

from magnetar.broker.protocol.connection import ServerConnection
from magnetar.broker.service import BrokerService, ServiceError
from magnetar.client.protocol import (
    NEED_DATA,
    Command,
    CommandType,
    Connection,
    ConnectionState,
    Role,
    ServerError,
    commands,
    pb,
)


async def connected(service: BrokerService) -> tuple[ServerConnection, FakeTransport, Connection]:
    cnx = ServerConnection(service)
    transport = FakeTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    client = Connection(Role.CLIENT)
    cnx.data_received(client.send(commands.connect("test-client")))
    await wait_for(lambda: transport.written, what="CONNECTED")
    client.receive_data(bytes(transport.written))
    transport.written.clear()
    assert isinstance(client.next_event(), Command)
    assert client.state is ConnectionState.CONNECTED
    return cnx, transport, client


async def answer(transport: FakeTransport, client: Connection) -> Command:
    await wait_for(lambda: transport.written, what="an answer")
    client.receive_data(bytes(transport.written))
    transport.written.clear()
    event = client.next_event()
    assert isinstance(event, Command)
    assert client.next_event() is NEED_DATA
    return event


async def test_consumer_stats_of_an_unknown_consumer(service: BrokerService) -> None:
    cnx, transport, client = await connected(service)
    ask = commands.make_command(CommandType.CONSUMER_STATS, request_id=4, consumer_id=9)
    cnx.data_received(client.send(ask))
    got = await answer(transport, client)
    assert got.type is CommandType.CONSUMER_STATS_RESPONSE
    stats = got.base.consumerStatsResponse
    assert (stats.request_id, stats.error_code) == (4, ServerError.ConsumerNotFound)


async def test_get_schema_of_a_tenant_that_does_not_exist_is_answered(
    service: BrokerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With authorization on, a lookup of a missing tenant's topic is TopicNotFound (as
    Pulsar's): GET_SCHEMA answers it in its own response instead of leaving it unanswered."""
    cnx, transport, client = await connected(service)

    async def missing_tenant(topic: str, metadata: bool = False) -> str | None:
        raise ServiceError(ServerError.TopicNotFound, "Tenant or namespace or topic does not exist")

    monkeypatch.setattr(cnx.security, "denied_lookup", missing_tenant)
    ask = commands.make_command(
        CommandType.GET_SCHEMA, pb.CommandGetSchema(request_id=5, topic="persistent://no/ns/t")
    )
    cnx.data_received(client.send(ask))
    got = await answer(transport, client)
    assert got.type is CommandType.GET_SCHEMA_RESPONSE
    resp = got.base.getSchemaResponse
    assert (resp.request_id, resp.error_code) == (5, ServerError.TopicNotFound)
    assert "does not exist" in resp.error_message
