"""One client connection, server side (Pulsar's ``ServerCnx``): the broker's wrapper of the
sans-I/O codec ``Connection(Role.BROKER)``, as ``client/_connection.py`` is the client's.

Owns: the transport (no Nagle, write-buffer marks), feeding the codec (it splits frames and
checks their size, command, direction and handshake state) and routing each command to the
module of its area: ``producers`` (PRODUCER, CLOSE_PRODUCER) and ``publish`` (SEND),
``consumers`` (SUBSCRIBE and the commands naming a consumer), ``lookups`` (LOOKUP,
PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE), ``admin_commands`` (CONSUMER_STATS, the schema
commands). It also owns the handshake (CONNECT, checked by ``ConnectionSecurity``, ->
CONNECTED with protocol_version = min(client, 20) and max_message_size), keep-alive (answer
PING; send our own PING every ``keep_alive_interval_seconds`` and close a connection whose
previous PING got no command back, or that never completed the handshake), PING barriers
(our PINGs are answered in order: one FIFO matches PONGs), and the tasks of its commands.

Output is coalesced: every frame produced while handling a loop iteration's input (receipts,
dispatched MESSAGE frames, responses) is joined into one ``transport.write``. Input is
back-pressured: reading pauses while any reason holds it (pending sends over
``max_pending_publish_requests_per_connection``, publish throttling); dispatch to this
connection's consumers pauses while the transport's buffer is over its high-water mark.
Bad input never raises out of here: a protocol violation closes this connection only; bytes
of partial frames held between reads count against the broker-wide ``InputBudget``.
Must not know: topics, subscriptions, storage or dispatch (the area modules do).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from typing import TYPE_CHECKING

from magnetar.broker.errors import ServerError
from magnetar.broker.protocol import admin_commands, lookups
from magnetar.broker.protocol.connection_security import ConnectionSecurity
from magnetar.broker.protocol.consumers import ConsumerCommands
from magnetar.broker.protocol.context import Handler
from magnetar.broker.protocol.input_budget import InputBudget
from magnetar.broker.protocol.producers import ProducerCommands
from magnetar.broker.protocol.publish import Publisher
from magnetar.broker.protocol.tasks import CommandTasks
from magnetar.client.protocol import (
    CPP_CLIENT_HANDLED_TYPES,
    FRAME_PADDING,
    NEED_DATA,
    PROTOCOL_VERSION_MAX,
    CommandType,
    Connection,
    ConnectionClosed,
    ConnectionState,
    RemoteProtocolError,
    Role,
    commands,
    pb,
)
from magnetar.clock import Clock, SystemClock, TimerHandle

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

T = pb.BaseCommand
SERVER_VERSION = "Magnetar 0.1.0"
WRITE_BUFFER_HIGH = 8 << 20  # bytes queued in the transport before dispatch pauses
WRITE_BUFFER_LOW = 2 << 20
BROKER_SENDS = CPP_CLIENT_HANDLED_TYPES | {
    CommandType.GET_OR_CREATE_SCHEMA_RESPONSE,  # to clients that ask (the Java client)
    CommandType.REACHED_END_OF_TOPIC,  # never to the C++ client core (see consumers)
}
"""What this broker sends: what the official C++ client handles, plus two answers only
other clients get."""
CPP_CORE_CLIENTS = ("Pulsar-CPP", "Pulsar-Python", "Pulsar-Node")
"""Client versions of the official clients built on the C++ client core."""
_SEND = T.SEND


class ServerConnection(asyncio.Protocol):
    def __init__(
        self,
        service: BrokerService,
        *,
        tls: bool = False,
        input_budget: InputBudget | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.service = service
        self.tls = tls
        cfg = service.config
        self.input_budget = (
            input_budget
            if input_budget is not None
            else InputBudget(cfg.max_buffered_partial_frames_size_in_mb << 20)
        )
        """Bytes of partial frames held between reads: shared by the listener's connections."""
        # the keep-alive timer's clock: real time unless a test injects one. Not the
        # service's clock: tests move that one by minutes at a time to age policies, which
        # would fire several keep-alive rounds in one step and close every connection
        self.clock: Clock = clock or SystemClock()
        self.codec = Connection(
            Role.BROKER,
            max_frame_size=cfg.max_message_size + FRAME_PADDING,
            sendable_types=BROKER_SENDS,
        )
        self.security: ConnectionSecurity = ConnectionSecurity(self, service.authn, service.authz)
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.closed = False
        self.write_paused = False
        """The transport's buffer is over its high-water mark: no dispatch to our consumers."""
        self._buffered = 0  # bytes the codec holds, counted in the input budget
        self._out: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None
        self._loop = asyncio.get_event_loop()
        self.tasks: CommandTasks = CommandTasks(self._loop, lambda: self.peer)
        self.producers = ProducerCommands(self)
        self.publisher = Publisher(self, self.producers.sessions, self.producers.closed_by_broker)
        self.consumers = ConsumerCommands(self)
        self._read_pauses: set[str] = set()
        """Why reading is paused (pending sends, publish throttling): resumes when empty."""
        self._ping_outstanding = False
        self._pings: collections.deque[asyncio.Future[None] | None] = collections.deque()
        """One per PING we wrote, oldest first: a barrier's future, None for keep-alive."""
        self._keepalive: TimerHandle | None = None
        self._handlers: dict[int, Handler] = {
            T.CONNECT: self._on_connect,
            T.PING: self._on_ping,
            T.PONG: self._on_pong,
            T.AUTH_RESPONSE: self.security.on_auth_response,
            **lookups.handlers(self),
            **self.producers.handlers(),
            **self.consumers.handlers(),
            **admin_commands.handlers(self, self.consumers.sessions),
        }

    def __repr__(self) -> str:
        return (
            f"<ServerConnection {self.peer} producers={len(self.producers)}"
            f" consumers={len(self.consumers)}>"
        )

    # ------------------------------------------------------------------ handshake facts
    @property
    def connected(self) -> bool:
        """CONNECTED was sent: commands other than the handshake's are served."""
        return self.codec.state is ConnectionState.CONNECTED

    @property
    def protocol_version(self) -> int:
        """min(the client's CONNECT.protocol_version, ours); 0 before CONNECT."""
        return min(self.codec.peer_protocol_version, PROTOCOL_VERSION_MAX)

    @property
    def client_version(self) -> str:
        connect = self.codec.connect
        return connect.client_version if connect is not None else ""

    @property
    def cpp_core_client(self) -> bool:
        """The client is built on the C++ client core (C++, Python, Node.js)."""
        return self.client_version.startswith(CPP_CORE_CLIENTS)

    # ------------------------------------------------------------------ transport
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        try:
            transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)  # type: ignore[attr-defined]
        except (AttributeError, NotImplementedError):
            pass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.service.connections.add(self)
        log.info("new connection from %s", self.peer)
        self._arm_keepalive()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.input_budget.release(self._buffered)
        self._buffered = 0
        self.service.connections.discard(self)
        log.info(
            "closed connection from %s (%d producers, %d consumers)",
            self.peer,
            len(self.producers),
            len(self.consumers),
        )
        self.security.close()
        if self._keepalive is not None:
            self._keepalive.cancel()
        self.producers.drop_all()
        self.consumers.drop_all()
        while self._pings:  # no ACK can come any more: barriers are passed
            fut = self._pings.popleft()
            if fut is not None and not fut.done():
                fut.set_result(None)
        self.tasks.cancel_all()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._flush_out()
            self.transport.close()
        self.closed = True

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: stop dispatching to this
        connection's consumers (Shared picks others) until it drains."""
        self.write_paused = True
        self.consumers.pause_dispatch()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.consumers.resume_dispatch()

    # ------------------------------------------------------------------ output
    def write(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush_out)

    def write_frames(self, frames: list[bytes]) -> None:
        """Queue frames made by the codec's fast paths (dispatch)."""
        if self.closed or not frames:
            return
        self._out += frames
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush_out)

    def write_command(self, cmd: pb.BaseCommand) -> None:
        self.write(self.codec.send(cmd))

    def error_response(self, request_id: int, code: ServerError, message: str) -> None:
        self.write_command(commands.error(request_id, code, message))

    def success(self, request_id: int) -> None:
        self.write_command(commands.success(request_id))

    def _flush_out(self) -> None:
        self._flush_handle = None
        if not self._out or self.transport is None or self.transport.is_closing():
            self._out.clear()
            return
        out, self._out = self._out, []
        self.transport.write(b"".join(out) if len(out) > 1 else out[0])

    # ------------------------------------------------------------------ input
    def data_received(self, data: bytes) -> None:
        codec = self.codec
        try:
            codec.receive_data(data)
            next_command = codec.next_command
            handlers = self._handlers
            while (cmd := next_command()) is not NEED_DATA:
                if isinstance(cmd, ConnectionClosed):  # never: EOF is not fed to the codec
                    return
                self._ping_outstanding = False
                kind = cmd.type
                if kind == _SEND:  # the hot path
                    self.publisher.on_send(cmd.send, codec.headers_and_payload)
                else:
                    handler = handlers.get(kind)
                    if handler is None:
                        raise RemoteProtocolError(f"unsupported command {T.Type.Name(kind)}")
                    handler(cmd)
                if self.closed:
                    return
        except RemoteProtocolError as exc:
            log.info("closing %s: %s", self.peer, exc)
            self.close()
            return
        except Exception:
            log.exception("closing %s: error handling a frame", self.peer)
            self.close()
            return
        held = codec.buffered_bytes
        if held != self._buffered:
            if not self.input_budget.resize(self._buffered, held):
                log.info("closing %s: broker-wide budget for partial frames exhausted", self.peer)
                self.close()
                return
            self._buffered = held

    def pause_reads(self, reason: str) -> bool:
        """Stop reading from the socket for ``reason`` (pending sends over the limit, publish
        throttling); False when already paused for it, closed or not connected."""
        if self.transport is None or self.closed or reason in self._read_pauses:
            return False
        if not self._read_pauses:
            self.transport.pause_reading()
        self._read_pauses.add(reason)
        return True

    def resume_reads(self, reason: str) -> None:
        """``reason`` no longer holds reading: it resumes once no other reason does."""
        if reason not in self._read_pauses:
            return
        self._read_pauses.discard(reason)
        if not self._read_pauses and self.transport is not None and not self.closed:
            self.transport.resume_reading()

    # ------------------------------------------------------------------ handshake
    def _on_connect(self, cmd: pb.BaseCommand) -> None:
        if not self.security.on_connect(cmd.connect):
            return
        self.write_command(
            commands.connected(
                SERVER_VERSION,
                self.protocol_version,
                max_message_size=self.service.config.max_message_size,
            )
        )

    # ------------------------------------------------------------------ keep-alive, PINGs
    def _arm_keepalive(self) -> None:
        interval = self.service.config.keep_alive_interval_seconds
        if interval > 0:
            self._keepalive = self.clock.call_later(interval, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        if self.closed:
            return
        if not self.connected:
            log.info("closing %s: no handshake within the keep-alive interval", self.peer)
            self.close()
            return
        if self._ping_outstanding:
            log.info("closing %s: no answer to PING", self.peer)
            self.close()
            return
        if self.protocol_version >= 1:
            self._ping_outstanding = True
            self._pings.append(None)
            self.write_command(commands.ping())
        self._arm_keepalive()

    def ping_barrier(self) -> asyncio.Future[None]:
        """Write a PING and return a future done at its PONG: every command the client wrote
        before reading what we wrote until now has then arrived (TCP keeps order, a client
        answers PINGs in order). Done at once when the connection is lost."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self._pings.append(fut)
        self.write_command(commands.ping())
        return fut

    def _on_ping(self, cmd: pb.BaseCommand) -> None:
        self.write_command(commands.pong())

    def _on_pong(self, cmd: pb.BaseCommand) -> None:
        if self._pings:
            fut = self._pings.popleft()
            if fut is not None and not fut.done():
                fut.set_result(None)


__all__ = ["BROKER_SENDS", "CPP_CORE_CLIENTS", "SERVER_VERSION", "ServerConnection"]
