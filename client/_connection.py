"""One TCP (or TLS) connection to a broker: the codec plus asyncio I/O.

Owns: the socket, the codec ``Connection(Role.CLIENT)``, the handshake (CONNECT with auth,
AUTH_CHALLENGE answers), keep-alive (PING every ``keep_alive_interval_s``; a PING still
unanswered at the next tick closes the connection, as the C++ client), the table of pending
requests (request id -> future, each with the operation timeout on the injected clock), and
the routing of broker commands to the producer/consumer handlers registered on it by id.

Invariants: every pending request completes exactly once (response, ERROR, timeout, or
``Disconnected`` when the connection closes); after ``closed`` is set no handler is called again
except ``connection_closed``; a handler learns of the loss of its connection exactly once.

Must not know: lookup, topics, batching, acknowledgement state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from typing import Any, Protocol

from magnetar.client._config import Authentication
from magnetar.client._errors import (
    ConnectError,
    Disconnected,
    PulsarException,
    Timeout,
    for_code,
)
from magnetar.client.protocol import (
    NEED_DATA,
    ChecksumMismatchError,
    Command,
    CommandType,
    Connection,
    ConnectionClosed,
    PayloadCommand,
    ProtocolError,
    Role,
    commands,
    pb,
)
from magnetar.clock import Clock, TimerHandle

log = logging.getLogger(__name__)

CLIENT_VERSION = "Magnetar-Python-v0.1.0"
_READ_CHUNK = 256 * 1024
_DRAIN_ABOVE_BYTES = 1024 * 1024


class ProducerHandler(Protocol):
    def on_send_receipt(self, cmd: pb.CommandSendReceipt) -> None: ...
    def on_send_error(self, cmd: pb.CommandSendError) -> None: ...
    def on_closed_by_broker(self) -> None: ...
    def connection_closed(self, cnx: ClientConnection) -> None: ...


class ConsumerHandler(Protocol):
    def on_message(self, event: PayloadCommand) -> None: ...
    def on_corrupt_message(self, event: PayloadCommand) -> None: ...
    def on_active_consumer_change(self, is_active: bool) -> None: ...
    def on_reached_end_of_topic(self) -> None: ...
    def on_closed_by_broker(self) -> None: ...
    def connection_closed(self, cnx: ClientConnection) -> None: ...


class ClientConnection:
    """A handshaken connection; create with ``await ClientConnection.open(...)``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        logical_url: str,
        clock: Clock,
        operation_timeout_ms: int,
        auth: Authentication | None,
    ) -> None:
        self.logical_url = logical_url
        self._reader = reader
        self._writer = writer
        self._clock = clock
        self._operation_timeout_ms = operation_timeout_ms
        self._auth = auth
        self.codec = Connection(Role.CLIENT, max_frame_size=64 * 1024 * 1024)
        self._pending: dict[int, tuple[asyncio.Future[Any], TimerHandle | None]] = {}
        self.producers: dict[int, ProducerHandler] = {}
        self.consumers: dict[int, ConsumerHandler] = {}
        self.closed = asyncio.Event()
        self._connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting_pong = False
        self._read_task: asyncio.Task[None] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None
        self.max_message_size = 5 * 1024 * 1024
        self.close_reason: str = ""

    def __repr__(self) -> str:
        state = "closed" if self.closed.is_set() else "open"
        return (
            f"<ClientConnection {self.logical_url} {state} "
            f"producers={len(self.producers)} consumers={len(self.consumers)}>"
        )

    # ------------------------------------------------------------------ open / close

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        logical_url: str,
        clock: Clock,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connection_timeout_ms: int = 10_000,
        operation_timeout_ms: int = 30_000,
        keep_alive_interval_s: float = 30.0,
        auth: Authentication | None = None,
        proxy_to_broker_url: str | None = None,
    ) -> ClientConnection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host,
                    port,
                    ssl=ssl_context,
                    server_hostname=server_hostname if ssl_context else None,
                    limit=_READ_CHUNK,
                ),
                connection_timeout_ms / 1000,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ConnectError(f"cannot connect to {host}:{port}: {exc}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket

            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cnx = cls(
            reader,
            writer,
            logical_url=logical_url,
            clock=clock,
            operation_timeout_ms=operation_timeout_ms,
            auth=auth,
        )
        cnx._read_task = asyncio.create_task(cnx._read_loop(), name=f"pulsar-read {logical_url}")
        auth_name = auth.auth_method_name if auth is not None else "none"
        auth_data = auth.auth_data() if auth is not None else None
        cnx._write(
            cnx.codec.send(
                commands.connect(
                    CLIENT_VERSION,
                    auth_method_name=auth_name,
                    auth_data=auth_data,
                    proxy_to_broker_url=proxy_to_broker_url,
                )
            )
        )
        try:
            await asyncio.wait_for(asyncio.shield(cnx._connected), connection_timeout_ms / 1000)
        except TimeoutError:
            await cnx.close("handshake timeout")
            raise ConnectError(f"no CONNECTED from {host}:{port}") from None
        except BaseException:
            await cnx.close("handshake failed")
            raise
        if cnx.codec.connected is not None and cnx.codec.connected.HasField("max_message_size"):
            cnx.max_message_size = cnx.codec.connected.max_message_size
        if cnx.codec.protocol_version >= 1 and keep_alive_interval_s > 0:
            cnx._keepalive_task = asyncio.create_task(cnx._keepalive(keep_alive_interval_s))
        return cnx

    async def close(self, reason: str = "closed by client") -> None:
        self._shutdown(reason)
        with contextlib.suppress(Exception):
            self._writer.close()
            await asyncio.wait_for(self._writer.wait_closed(), 1)

    def _shutdown(self, reason: str) -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        log.debug("connection %s closed: %s", self.logical_url, reason)
        if not self._connected.done():
            self._connected.set_exception(ConnectError(reason))
            self._connected.exception()  # mark retrieved
        for fut, timer in self._pending.values():
            if timer is not None:
                timer.cancel()
            if not fut.done():
                fut.set_exception(Disconnected(f"connection closed: {reason}"))
        self._pending.clear()
        with contextlib.suppress(Exception):
            self._writer.close()
        for task in (self._keepalive_task,):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()
        handlers: list[ProducerHandler | ConsumerHandler] = [
            *self.producers.values(),
            *self.consumers.values(),
        ]
        self.producers.clear()
        self.consumers.clear()
        for h in handlers:
            try:
                h.connection_closed(self)
            except Exception:  # pragma: no cover - a handler bug must not stop the others
                log.exception("connection_closed handler failed")

    # ------------------------------------------------------------------ writing

    def _write(self, data: bytes) -> None:
        if self.closed.is_set():
            raise Disconnected(f"connection closed: {self.close_reason}")
        self._writer.write(data)

    def send_command(self, base: pb.BaseCommand) -> None:
        """Write a command that has no response (FLOW, ACK, REDELIVER, SEND...)."""
        self._write(self.codec.send(base))

    def send_raw(self, frame: bytes) -> None:
        """Write an already-encoded frame (SEND frames are built once and kept for resends)."""
        self._write(frame)

    def write_buffer_size(self) -> int:
        return int(self._writer.transport.get_write_buffer_size())

    async def drain(self) -> None:
        """Wait for the socket's write buffer to go down (producer back-pressure)."""
        transport = self._writer.transport
        if transport.get_write_buffer_size() > _DRAIN_ABOVE_BYTES and not self.closed.is_set():
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._writer.drain()

    async def request(
        self, base: pb.BaseCommand, request_id: int, *, timeout_ms: int | None = None
    ) -> Command:
        """Send a command with a request id and await its response command."""
        if self.closed.is_set():
            raise Disconnected(f"connection closed: {self.close_reason}")
        fut: asyncio.Future[Command] = asyncio.get_running_loop().create_future()
        timeout_ms = self._operation_timeout_ms if timeout_ms is None else timeout_ms

        def expire() -> None:
            entry = self._pending.pop(request_id, None)
            if entry is not None and not entry[0].done():
                entry[0].set_exception(Timeout(f"request {request_id} timed out"))

        timer = self._clock.call_later(timeout_ms / 1000, expire) if timeout_ms > 0 else None
        self._pending[request_id] = (fut, timer)
        try:
            self._write(self.codec.send(base))
        except BaseException:
            self._pending.pop(request_id, None)
            if timer is not None:
                timer.cancel()
            raise
        return await fut

    def expect(self, request_id: int) -> asyncio.Future[Command]:
        """A future for a further response to an already answered request id (no timeout):
        WaitForExclusive producers get a second PRODUCER_SUCCESS when they become ready."""
        if self.closed.is_set():
            raise Disconnected(f"connection closed: {self.close_reason}")
        fut: asyncio.Future[Command] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (fut, None)
        return fut

    # ------------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        reason = "connection closed by broker"
        try:
            while True:
                data = await self._reader.read(_READ_CHUNK)
                self.codec.receive_data(data)
                if not self._drain_events():
                    break
                if not data:
                    break
        except asyncio.CancelledError:
            reason = self.close_reason or "cancelled"
        except (OSError, ProtocolError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # pragma: no cover - a bug; log and drop the connection
            log.exception("connection %s: unexpected error", self.logical_url)
            reason = f"{type(exc).__name__}: {exc}"
        self._shutdown(reason)

    def _drain_events(self) -> bool:
        while True:
            try:
                event = self.codec.next_event()
            except ChecksumMismatchError as exc:
                self._on_corrupt(exc.event)
                continue
            if event is NEED_DATA:
                return True
            if isinstance(event, ConnectionClosed):
                return False
            self._waiting_pong = False
            self._dispatch(event)

    def _on_corrupt(self, event: PayloadCommand) -> None:
        if event.type is CommandType.MESSAGE:
            handler = self.consumers.get(event.base.message.consumer_id)
            if handler is not None:
                handler.on_corrupt_message(event)

    def _complete(self, request_id: int, result: Command | PulsarException) -> None:
        entry = self._pending.pop(request_id, None)
        if entry is None:
            return
        fut, timer = entry
        if timer is not None:
            timer.cancel()
        if fut.done():
            return
        if isinstance(result, PulsarException):
            fut.set_exception(result)
        else:
            fut.set_result(result)

    def _dispatch(self, event: Command) -> None:
        t = event.type
        base = event.base
        if t is CommandType.MESSAGE:
            assert isinstance(event, PayloadCommand)
            consumer = self.consumers.get(base.message.consumer_id)
            if consumer is not None:
                consumer.on_message(event)
        elif t is CommandType.SEND_RECEIPT:
            producer = self.producers.get(base.send_receipt.producer_id)
            if producer is not None:
                producer.on_send_receipt(base.send_receipt)
        elif t is CommandType.SEND_ERROR:
            producer = self.producers.get(base.send_error.producer_id)
            if producer is not None:
                producer.on_send_error(base.send_error)
        elif t is CommandType.CONNECTED:
            if not self._connected.done():
                self._connected.set_result(None)
        elif t is CommandType.AUTH_CHALLENGE:
            self._answer_challenge()
        elif t is CommandType.PING:
            self._write(self.codec.send(commands.pong()))
        elif t is CommandType.PONG:
            pass
        elif t is CommandType.ERROR:
            err = base.error
            exc = for_code(err.error, err.message)
            if not self._connected.done():  # authentication refused during the handshake
                self._connected.set_exception(exc)
                return
            self._complete(err.request_id, exc)
        elif t is CommandType.CLOSE_PRODUCER:
            producer = self.producers.pop(base.close_producer.producer_id, None)
            if producer is not None:
                producer.on_closed_by_broker()
        elif t is CommandType.CLOSE_CONSUMER:
            consumer = self.consumers.pop(base.close_consumer.consumer_id, None)
            if consumer is not None:
                consumer.on_closed_by_broker()
        elif t is CommandType.ACTIVE_CONSUMER_CHANGE:
            change = base.active_consumer_change
            consumer = self.consumers.get(change.consumer_id)
            if consumer is not None:
                consumer.on_active_consumer_change(change.is_active)
        elif t is CommandType.REACHED_END_OF_TOPIC:
            consumer = self.consumers.get(base.reachedEndOfTopic.consumer_id)
            if consumer is not None:
                consumer.on_reached_end_of_topic()
        else:
            request_id = _request_id_of(event)
            if request_id is not None:
                self._complete(request_id, event)
            else:
                log.debug("ignoring %s", t.name)

    def _answer_challenge(self) -> None:
        name = self._auth.auth_method_name if self._auth else "none"
        data = (self._auth.auth_data() if self._auth else None) or b""
        body = pb.CommandAuthResponse(client_version=CLIENT_VERSION, protocol_version=20)
        body.response.auth_method_name = name
        body.response.auth_data = data
        self._write(self.codec.send(commands.make_command(CommandType.AUTH_RESPONSE, body)))

    # ------------------------------------------------------------------ keep-alive

    async def _keepalive(self, interval_s: float) -> None:
        try:
            while not self.closed.is_set():
                await self._clock.sleep(interval_s)
                if self.closed.is_set():
                    return
                if self._waiting_pong:
                    self._shutdown("keep-alive: no PONG from broker")
                    return
                self._waiting_pong = True
                self._write(self.codec.send(commands.ping()))
        except (asyncio.CancelledError, PulsarException):
            return


def _request_id_of(event: Command) -> int | None:
    rid = getattr(event.command, "request_id", None)
    return None if rid is None else int(rid)


__all__ = ["CLIENT_VERSION", "ClientConnection", "ConsumerHandler", "ProducerHandler"]
