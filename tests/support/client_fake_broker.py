"""A scriptable fake broker on the protocol codec (real sockets on 127.0.0.1), for client
behaviours a real broker does not let us provoke: auth challenges, redirects, silence on PING,
missing receipts, out-of-order receipts, refusals, TLS."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from magnetar.client.protocol import (
    NEED_DATA,
    Command,
    CommandType,
    Connection,
    ConnectionClosed,
    PayloadCommand,
    Role,
    commands,
    pb,
)

Handler = Callable[["FakeBroker", "FakeConnection", Command], list[pb.BaseCommand] | None]


class FakeConnection:
    def __init__(self, broker: FakeBroker, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.writer = writer
        self.codec = Connection(Role.BROKER)
        self.entry = 0

    def send(self, base: pb.BaseCommand) -> None:
        self.writer.write(self.codec.send(base))

    def send_receipt(self, producer_id: int, sequence_id: int) -> None:
        self.entry += 1
        self.writer.write(self.codec.send_receipt(producer_id, sequence_id, 1, self.entry))


class FakeBroker:
    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.received: list[Command] = []
        self.connects = 0
        self.connections: list[FakeConnection] = []
        self.handlers: dict[CommandType, Handler] = {}
        self.answer_ping = True
        self.lookup_target: str | None = None  # redirect LOOKUP there
        self.port = 0
        self._server: asyncio.Server | None = None
        self.changed = asyncio.Event()

    @property
    def url(self) -> str:
        scheme = "pulsar+ssl" if self.ssl_context else "pulsar"
        return f"{scheme}://127.0.0.1:{self.port}"

    def of_type(self, t: CommandType) -> list[Command]:
        return [c for c in self.received if c.type is t]

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5) -> None:
        async def poll() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(poll(), timeout_s)

    async def start(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        for c in self.connections:
            c.writer.close()
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cnx = FakeConnection(self, writer)
        self.connections.append(cnx)
        try:
            while True:
                data = await reader.read(65536)
                cnx.codec.receive_data(data)
                while (event := cnx.codec.next_event()) is not NEED_DATA:
                    if isinstance(event, ConnectionClosed):
                        return
                    self.received.append(event)
                    self.changed.set()
                    self._handle(cnx, event)
                if not data:
                    return
        except (ConnectionError, OSError):
            return
        finally:
            writer.close()
            self.changed.set()

    def _handle(self, cnx: FakeConnection, event: Command) -> None:
        custom = self.handlers.get(event.type)
        if custom is not None:
            out = custom(self, cnx, event)
            if out is not None:
                for base in out:
                    cnx.send(base)
                return
        b = event.base
        t = event.type
        if t is CommandType.CONNECT:
            self.connects += 1
            cnx.send(commands.connected("fake", 20))
        elif t is CommandType.PING:
            if self.answer_ping:
                cnx.send(commands.pong())
        elif t is CommandType.PARTITIONED_METADATA:
            cnx.send(commands.partitioned_metadata_response(b.partitionMetadata.request_id, 0))
        elif t is CommandType.LOOKUP:
            rid = b.lookupTopic.request_id
            if self.lookup_target is not None:
                cnx.send(commands.lookup_response(rid, self.lookup_target, redirect=True))
            else:
                cnx.send(commands.lookup_response(rid, self.url))
        elif t is CommandType.PRODUCER:
            p = b.producer
            cnx.send(commands.producer_success(p.request_id, p.producer_name or "fake-producer"))
        elif t is CommandType.SEND:
            assert isinstance(event, PayloadCommand)
            cnx.send_receipt(b.send.producer_id, b.send.sequence_id)
        elif t is CommandType.SUBSCRIBE:
            cnx.send(commands.success(b.subscribe.request_id))
        elif t in (CommandType.CLOSE_PRODUCER, CommandType.CLOSE_CONSUMER):
            cnx.send(commands.success(event.command.request_id))  # type: ignore[attr-defined]
