"""The broker's keep-alive (Pulsar's ``keepAliveIntervalSeconds``) on virtual time: a
connection without a handshake is closed after one interval; a connected client is sent a
PING every interval and closed when the previous PING got no PONG. The timer runs on the
connection's injected clock, so nothing here waits in real time."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest
from support.broker_connection import running_service
from support.fake_transport import CONNECT, PONG, FakeTransport
from support.waiting import wait_for

from magnetar.broker.config import BrokerConfig
from magnetar.broker.dispatch.consumer import Consumer, SubType
from magnetar.broker.protocol.connection import ServerConnection
from magnetar.broker.protocol.consumers import ConsumerSession
from magnetar.broker.service import BrokerService
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.clock import VirtualClock

T = pb.BaseCommand
INTERVAL_S = 30


@pytest.fixture
async def service() -> AsyncIterator[BrokerService]:
    config = BrokerConfig(broker_service_port=0, keep_alive_interval_seconds=INTERVAL_S)
    async with running_service(config) as svc:
        yield svc


def connect(service: BrokerService) -> tuple[ServerConnection, FakeTransport, VirtualClock]:
    clock = VirtualClock()
    cnx = ServerConnection(service, clock=clock)
    transport = FakeTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    return cnx, transport, clock


def pings(transport: FakeTransport) -> int:
    data, count, off = bytes(transport.written), 0, 0
    while off < len(data):
        total, size = struct.unpack_from(">II", data, off)
        cmd = T()
        cmd.ParseFromString(data[off + 8 : off + 8 + size])
        count += cmd.type == T.PING
        off += 4 + total
    return count


async def test_no_handshake_within_one_interval_closes(service: BrokerService) -> None:
    _cnx, transport, clock = connect(service)
    clock.advance(INTERVAL_S - 0.001)
    assert not transport.closed
    clock.advance(0.001)
    await wait_for(lambda: transport.closed, what="the connection closed")


async def test_ping_every_interval_and_close_without_pong(service: BrokerService) -> None:
    cnx, transport, clock = connect(service)
    cnx.data_received(CONNECT)
    clock.advance(INTERVAL_S - 0.001)
    await wait_for(lambda: bool(transport.written), what="the CONNECTED answer")
    assert pings(transport) == 0
    clock.advance(0.001)
    await wait_for(lambda: pings(transport) == 1, what="the first PING")
    cnx.data_received(PONG)
    clock.advance(INTERVAL_S)
    await wait_for(lambda: pings(transport) == 2, what="the second PING")
    assert not transport.closed  # the first was answered: still alive
    clock.advance(INTERVAL_S)  # the second PING got no PONG
    await wait_for(lambda: transport.closed, what="the connection closed")


async def _barrier(
    cnx: ServerConnection, transport: FakeTransport, timeout_s: float
) -> tuple[asyncio.Future[None], Consumer]:
    consumer = Consumer(7, "c", SubType.EXCLUSIVE, sink=cnx.consumers)
    # subscription and topic are not used here
    cnx.consumers.sessions[7] = ConsumerSession(consumer, None, None)  # type: ignore[arg-type]
    before = pings(transport)
    barrier = asyncio.ensure_future(
        cnx.consumers.close_consumer_with_ack_barrier(consumer, timeout_s)
    )
    await wait_for(lambda: pings(transport) == before + 1, what="the barrier's PING")
    return barrier, consumer


async def test_the_ack_barrier_passes_on_the_pong_to_its_own_ping(service: BrokerService) -> None:
    """A keep-alive PING is outstanding when CLOSE_CONSUMER and the barrier's PING are
    written: the first PONG answers the keep-alive one (PONGs come in order), so the
    consumer's ACKs are still taken; the second passes the barrier."""
    cnx, transport, clock = connect(service)
    cnx.data_received(CONNECT)
    clock.advance(INTERVAL_S)
    await wait_for(lambda: pings(transport) == 1, what="the keep-alive PING")
    barrier, _ = await _barrier(cnx, transport, 5)
    assert (
        cnx.consumers.get(7) is None and 7 in cnx.consumers.acks.closing
    )  # ACKs for it are still taken
    cnx.data_received(PONG)  # the keep-alive PING's answer
    for _ in range(10):
        await asyncio.sleep(0)  # let anything the PONG woke run (ordering only)
    assert not barrier.done() and 7 in cnx.consumers.acks.closing
    cnx.data_received(PONG)
    await wait_for(barrier.done, what="the barrier passed")
    assert 7 not in cnx.consumers.acks.closing


async def test_the_ack_barrier_is_bounded_for_a_client_that_does_not_answer(
    service: BrokerService,
) -> None:
    cnx, transport, clock = connect(service)
    cnx.data_received(CONNECT)
    await wait_for(lambda: bool(transport.written), what="the CONNECTED answer")
    barrier, _ = await _barrier(cnx, transport, 0.5)
    clock.advance(0.499)
    for _ in range(10):
        await asyncio.sleep(0)
    assert not barrier.done()
    clock.advance(0.001)
    await wait_for(barrier.done, what="the barrier given up")
    assert 7 not in cnx.consumers.acks.closing
