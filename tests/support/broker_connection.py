"""An in-process client for broker connection tests: frames through the client codec into a
``ServerConnection`` on a ``FakeTransport``, answers read back by request id; and a broker
service on in-memory metadata and storage for it to talk to."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.protocol.connection import ServerConnection
from magnetar.broker.runtime import BrokerServiceRunner
from magnetar.broker.service import BrokerService
from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.client.protocol import (
    NEED_DATA,
    Command,
    CommandType,
    Connection,
    ConnectionState,
    Role,
    commands,
    pb,
)
from magnetar.zk.memory import MemoryMetadataServer
from support.fake_transport import FakeTransport
from support.waiting import wait_for


class Client:
    """A client speaking through the codec to a ``ServerConnection``."""

    def __init__(self, service: BrokerService) -> None:
        self.cnx = ServerConnection(service)
        self.transport = FakeTransport()
        self.cnx.connection_made(self.transport)  # type: ignore[arg-type]
        self.codec = Connection(Role.CLIENT)
        self._read = 0
        self.answers: list[Command] = []

    async def connect(self, client_version: str = "test-client") -> Client:
        self.send(commands.connect(client_version))

        def connected() -> bool:
            self._receive()
            return self.codec.state is ConnectionState.CONNECTED

        await wait_for(connected, what="CONNECTED")
        return self

    def send(self, cmd: pb.BaseCommand) -> None:
        self.cnx.data_received(self.codec.send(cmd))

    def _receive(self) -> None:
        data = bytes(self.transport.written[self._read :])
        self._read += len(data)
        if data:
            self.codec.receive_data(data)
        while (event := self.codec.next_event()) is not NEED_DATA:
            assert isinstance(event, Command)
            self.answers.append(event)

    async def request(self, cmd: pb.BaseCommand, request_id: int) -> Command:
        self.send(cmd)
        return await self.answer(request_id)

    async def answer(self, request_id: int) -> Command:
        """The answer to ``request_id``."""

        def found() -> Command | None:
            self._receive()
            for event in self.answers:
                body = event.command
                if getattr(body, "request_id", None) == request_id:
                    self.answers.remove(event)
                    return event
            return None

        return await wait_for(found, what=f"the answer to request {request_id}")

    async def next_of(self, kind: CommandType) -> Command:
        """The first command of ``kind`` read (and kept in ``answers``, as everything before
        it)."""

        def found() -> Command | None:
            self._receive()
            return next((a for a in self.answers if a.type is kind), None)

        return await wait_for(found, what=f"a {kind.name}")


@contextlib.asynccontextmanager
async def running_service(config: BrokerConfig | None = None) -> AsyncIterator[BrokerService]:
    """A started broker service on in-memory metadata and storage (by default: any port, no
    keep-alive pings)."""
    svc = BrokerService(
        config or BrokerConfig(broker_service_port=0, keep_alive_interval_seconds=0),
        MemoryMetadataServer().connect(),
        MemoryStorageFactory(),
    )
    runner = BrokerServiceRunner(svc)
    await runner.start()
    try:
        yield svc
    finally:
        await runner.close()


@pytest.fixture
async def service() -> AsyncIterator[BrokerService]:
    async with running_service() as svc:
        yield svc


__all__ = ["Client", "running_service", "service"]
