"""The connection handler never lets bad input escape: random bytes and mutated frames after
a good handshake either get answers or close that connection, without raising."""

from __future__ import annotations

import asyncio
import logging
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fake_transport import CONNECT, PING, PONG, FakeTransport
from support.waiting import wait_for

from magnetar.broker.config import BrokerConfig
from magnetar.broker.protocol.connection import ServerConnection
from magnetar.broker.service import BrokerService
from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.zk.memory import MemoryMetadataServer

T = pb.BaseCommand


class Errors(logging.Handler):
    """Collects ERROR records of the protocol's modules: a bug, not a refused input."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


ERRORS = Errors()
logging.getLogger("magnetar.broker.protocol").addHandler(ERRORS)


def new_connection() -> tuple[ServerConnection, FakeTransport]:
    service = BrokerService(
        BrokerConfig(keep_alive_interval_seconds=0),
        MemoryMetadataServer().connect(),
        MemoryStorageFactory(),
    )
    cnx = ServerConnection(service)
    transport = FakeTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    cnx.data_received(CONNECT)
    return cnx, transport


def settled(cnx: ServerConnection, transport: FakeTransport) -> bool:
    return transport.closed or transport.written.endswith(PONG) or cnx.codec.buffered_bytes > 0


def test_handshake_and_ping() -> None:
    async def run() -> None:
        cnx, transport = new_connection()
        cnx.data_received(PING[:5])  # split frames are reassembled
        cnx.data_received(PING[5:])
        await wait_for(lambda: transport.written.endswith(PONG), what="the PONG")
        data = bytes(transport.written)
        (size,) = struct.unpack_from(">I", data, 4)
        first = T()
        first.ParseFromString(data[8 : 8 + size])
        assert first.type == T.CONNECTED and first.connected.protocol_version == 20
        assert data.endswith(bytes.fromhex("00000009000000050813 9a0100".replace(" ", "")))

    asyncio.run(run())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=1, max_size=300))
def test_random_bytes_never_escape(garbage: bytes) -> None:
    async def run() -> None:
        cnx, transport = new_connection()
        cnx.data_received(garbage)  # must not raise
        cnx.data_received(PING)
        # refused (closed), still answering, or waiting for the rest of a (garbage) frame
        await wait_for(lambda: settled(cnx, transport), 5, "closed, answered or buffering")

    ERRORS.records.clear()
    asyncio.run(run())
    assert not ERRORS.records, ERRORS.records[0].getMessage()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(PING) - 1), st.integers(0, 255))
def test_mutated_frames_never_escape(index: int, value: int) -> None:
    mutated = bytearray(PING)
    mutated[index] = value

    async def run() -> None:
        cnx, transport = new_connection()
        cnx.data_received(bytes(mutated))
        cnx.data_received(PING)
        await wait_for(lambda: settled(cnx, transport), 5, "closed, answered or buffering")

    ERRORS.records.clear()
    asyncio.run(run())
    assert not ERRORS.records, ERRORS.records[0].getMessage()
