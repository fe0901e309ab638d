"""One client connection: the Pulsar binary protocol, server side (Pulsar's ``ServerCnx``).

Owns: frame splitting and validation (size <= max message size + 10 KiB padding, command
size within the frame, protobuf parse with required fields), the handshake (CONNECT ->
CONNECTED with protocol_version = min(client, 20) and max_message_size), keep-alive (answer
PING; send our own PING every ``keep_alive_interval_seconds`` and close a connection whose
previous PING got no command back, or that never completed the handshake), the per-connection
producer and consumer id maps, and turning commands into calls on ``BrokerService`` /
topics / subscriptions and their results into responses.

Ack barrier (topic unload): ``close_consumer_with_ack_barrier`` writes CLOSE_CONSUMER then
a PING, and keeps taking the consumer's ACKs until the PONG to that PING: TCP keeps order
and a client answers PINGs in order, so the PONG proves every ACK the client wrote before it
read CLOSE_CONSUMER has arrived (and each was handed to the cursor before the topic closes
it). Our PINGs (keep-alive and barriers) are answered in order: one FIFO matches PONGs.

Output is coalesced: every frame produced while handling a loop iteration's input (receipts,
dispatched MESSAGE frames, responses) is joined into one ``transport.write``. Input is
back-pressured: reading pauses while more than ``max_pending_publish_requests_per_connection``
SENDs await their receipt and resumes at half.

Ordering: commands for one producer id (or one consumer id) run in arrival order, each
awaiting the previous (a chain per id); commands for different ids run concurrently. ACK and
FLOW join a chain only while one is pending (e.g. a SUBSCRIBE still loading its topic): an
ACK's state change happens before its first await, so FLOWs never wait for cursor I/O.
Bad input never raises out of here: a protocol violation closes this connection only. A
SEND's metadata and message count are checked before anything is stored
(``validation.check_entry``); partial frames held between reads count against the
broker-wide ``InputBudget``; invalid UTF-8 in command strings becomes U+FFFD.
Must not know: storage, dispatch policy.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import functools
import itertools
import logging
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import crc32c

from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.errors import BrokerError, CodedError, ServerError
from magnetar.broker.ledger.errors import LedgerError, ManagedLedgerTerminated
from magnetar.broker.ledger.position import EARLIEST, LATEST, Position
from magnetar.broker.protocol.connection_security import ConnectionSecurity
from magnetar.broker.protocol.input_budget import InputBudget
from magnetar.broker.schema import SchemaError
from magnetar.broker.schema import protocol as schema_protocol
from magnetar.broker.topics.producer import AccessMode, Admission, Producer, ProducerError
from magnetar.broker.topics.subscription import Subscription, SubscriptionError
from magnetar.broker.validation import (
    InvalidEntry,
    InvalidSubscriptionName,
    check_entry,
    check_subscription_name,
)
from magnetar.client.protocol import (
    MAGIC_CRC32C_BYTES,
    RemoteProtocolError,
    decode_command,
    encode_command,
    encode_message_frames,
    encode_send_receipt_frame,
    encode_send_receipt_frames,
    parse_entry_metadata,
)
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.clock import Clock, SystemClock, TimerHandle

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.persistent import PersistentTopic

log = logging.getLogger(__name__)

T = pb.BaseCommand
PROTOCOL_VERSION_MAX = 20
FRAME_PADDING = 10 * 1024
U64 = (1 << 64) - 1
INT64_MAX = (1 << 63) - 1
SERVER_VERSION = "Magnetar 0.1.0"
WRITE_BUFFER_HIGH = 8 << 20  # bytes queued in the transport before dispatch pauses
WRITE_BUFFER_LOW = 2 << 20
_U32 = struct.Struct(">I")
_names = itertools.count()


ProtocolViolation = RemoteProtocolError
"""A client broke the protocol: the connection is closed (the codec's error, one type)."""


def _failed_response(response_type: Any, request_id: int, exc: Exception, what: str) -> Any:
    """A ``response=Failed`` LOOKUP / PARTITIONED_METADATA answer: a refusal carries its own
    ServerError code; anything else is logged and answered as ServiceNotReady (retriable)."""
    from magnetar.broker.service import ServiceError

    if isinstance(exc, ServiceError):
        code, message = exc.code, exc.message
    else:
        log.exception("%s failed", what)
        code, message = ServerError.ServiceNotReady, f"{what} failed: {exc}"
    return response_type(
        request_id=request_id,
        response=response_type.Failed,
        error=_error_code(code),
        message=message,
    )


def _error_code(code: ServerError) -> Any:
    return int(code)


_I64 = 1 << 63

_FAIL_ONE_CODES = frozenset({ServerError.NotAllowedError})
"""SEND_ERROR codes that refuse one message (the producer stays usable)."""
_CPP_CORE_CLIENTS = ("Pulsar-CPP", "Pulsar-Python", "Pulsar-Node")


def _position(mid: Any) -> Position:
    """A MessageIdData as a Position; uint64 ids above INT64_MAX are the client's negatives."""
    ledger, entry = mid.ledgerId, mid.entryId
    if ledger >= _I64:
        ledger -= 1 << 64
    if entry >= _I64:
        entry -= 1 << 64
    return Position(ledger, entry)


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
        self.input_budget = (
            input_budget
            if input_budget is not None
            else InputBudget(service.config.max_buffered_partial_frames_size_in_mb << 20)
        )
        """Bytes of partial frames held between reads: shared by the listener's connections."""
        # the keep-alive timer's clock: real time unless a test injects one. Not the
        # service's clock: tests move that one by minutes at a time to age policies, which
        # would fire several keep-alive rounds in one step and close every connection
        self.clock: Clock = clock or SystemClock()
        self.security: ConnectionSecurity = ConnectionSecurity(self, service.authn, service.authz)
        cfg = service.config
        self.max_frame = cfg.max_message_size + FRAME_PADDING
        self.max_pending_sends = max(1, cfg.max_pending_publish_requests_per_connection)
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.connected = False
        self.closed = False
        self.protocol_version = 0
        self.client_version = ""
        self._buf = bytearray()
        self._buffered = 0  # bytes of self._buf counted in the service's input budget
        self._out: list[bytes] = []
        self._flush_handle: asyncio.Handle | None = None
        self._loop = asyncio.get_event_loop()
        self.producers: dict[int, Producer] = {}
        self.producer_topics: dict[int, PersistentTopic] = {}
        self.producer_persistent: dict[int, bool] = {}  # True: publish_to (batched receipts)
        self.producer_requests: dict[int, int] = {}
        self.producer_schema_versions: dict[int, bytes] = {}  # PRODUCER_SUCCESS.schema_version
        self._closed_by_broker: set[int] = set()  # producer ids we closed (unload): late SENDs
        self.consumers: dict[int, tuple[Consumer, Subscription, PersistentTopic]] = {}
        self._chains: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._acks_inflight: dict[int, set[asyncio.Task[None]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pending_sends = 0
        self._read_pauses: set[str] = set()
        """Why reading is paused (pending sends, publish throttling): resumes when empty."""
        self._ping_outstanding = False
        self._pings: collections.deque[asyncio.Future[None] | None] = collections.deque()
        """One per PING we wrote, oldest first: a barrier's future, None for keep-alive."""
        self._closing: dict[int, tuple[Consumer, Subscription, PersistentTopic]] = {}
        """Consumers told CLOSE_CONSUMER whose ACKs are taken until their barrier."""
        self._keepalive: TimerHandle | None = None
        self._write_paused = False

    def __repr__(self) -> str:
        return (
            f"<ServerConnection {self.peer} producers={len(self.producers)}"
            f" consumers={len(self.consumers)}>"
        )

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
        self._buf = bytearray()
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
        for pid in list(self.producers):
            self._drop_producer(pid)
        for cid in list(self.consumers):
            self._drop_consumer(cid)
        self._closing.clear()
        while self._pings:  # no ACK can come any more: barriers are passed
            fut = self._pings.popleft()
            if fut is not None and not fut.done():
                fut.set_result(None)
        for task in list(self._tasks):
            task.cancel()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._flush_out()
            self.transport.close()
        self.closed = True

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: stop dispatching to this
        connection's consumers (Shared picks others) until it drains."""
        self._write_paused = True
        for consumer, _, _ in self.consumers.values():
            consumer.paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for consumer, sub, _ in list(self.consumers.values()):
            consumer.paused = False
            sub.flow(consumer, 0)  # reschedules its dispatcher

    # ------------------------------------------------------------------ output
    def write(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush_out)

    def write_command(self, cmd: pb.BaseCommand) -> None:
        self.write(encode_command(cmd))

    def _flush_out(self) -> None:
        self._flush_handle = None
        if not self._out or self.transport is None or self.transport.is_closing():
            self._out.clear()
            return
        out, self._out = self._out, []
        self.transport.write(b"".join(out) if len(out) > 1 else out[0])

    # ------------------------------------------------------------------ keep-alive
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
            self.write_command(T(type=T.PING, ping=pb.CommandPing()))
        self._arm_keepalive()

    # ------------------------------------------------------------------ input
    def data_received(self, data: bytes) -> None:
        buf = self._buf
        if buf:  # the rest of a frame arrived: frames are sliced from one bytes object
            buf += data
            data = bytes(buf)
            buf.clear()
        offset = 0
        n = len(data)
        try:
            while n - offset >= 4:
                (total,) = _U32.unpack_from(data, offset)
                if total > self.max_frame or total < 4:
                    raise ProtocolViolation(f"frame size {total} out of bounds")
                if n - offset - 4 < total:
                    break
                start = offset + 4
                offset = start + total
                self._handle_frame(data, start, offset)
                if self.closed:
                    return
        except ProtocolViolation as exc:
            log.info("closing %s: %s", self.peer, exc)
            self.close()
            return
        except Exception:
            log.exception("closing %s: error handling a frame", self.peer)
            self.close()
            return
        if offset < n:
            buf += data[offset:] if offset else data
        if len(buf) != self._buffered:
            if not self.input_budget.resize(self._buffered, len(buf)):
                log.info("closing %s: broker-wide budget for partial frames exhausted", self.peer)
                buf.clear()
                self.close()
                return
            self._buffered = len(buf)

    def _handle_frame(self, data: bytes, start: int, end: int) -> None:
        """The frame ``data[start:end]`` (after its total size), decoded by the codec's
        ``decode_command`` (the client's rules too)."""
        cmd, payload_at = decode_command(data, start, end)
        self._ping_outstanding = False
        kind = cmd.type
        if not self.connected:
            if kind != T.CONNECT:
                raise ProtocolViolation(f"{T.Type.Name(kind)} before CONNECT")
            self._handle_connect(cmd.connect)
            return
        if kind == T.SEND:  # the hot path
            self._handle_send(cmd.send, data[payload_at:end])
            return
        handler = self._handlers.get(kind)
        if handler is None:
            raise ProtocolViolation(f"unsupported command {kind}")
        handler(self, cmd)

    # ------------------------------------------------------------------ helpers
    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("connection task failed on %s", self.peer, exc_info=task.exception())

    def _chain(self, key: tuple[str, int], fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        prev = self._chains.get(key)

        async def run() -> None:
            if prev is not None and not prev.done():
                await asyncio.wait([prev])
            await fn()

        task = self._loop.create_task(run())
        self._chains[key] = task
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._task_done(t)
            if self._chains.get(key) is t:
                del self._chains[key]

        task.add_done_callback(done)

    def _guarded(
        self, request_id: int, fn: Callable[[], Coroutine[Any, Any, None]]
    ) -> Callable[[], Coroutine[Any, Any, None]]:
        """``fn`` whose refusals and failures are answered with ERROR for ``request_id``."""

        async def run() -> None:
            try:
                await fn()
            except SubscriptionError as exc:
                self.error_response(request_id, exc.code, exc.message)
            except Exception as exc:
                log.exception("request %d failed on %s", request_id, self.peer)
                self.error_response(
                    request_id, ServerError.UnknownError, str(exc) or type(exc).__name__
                )

        return run

    def error_response(self, request_id: int, code: ServerError, message: str) -> None:
        self.write_command(
            T(
                type=T.ERROR,
                error=pb.CommandError(
                    request_id=request_id & U64, error=_error_code(code), message=message
                ),
            )
        )

    def _success(self, request_id: int) -> None:
        self.write_command(T(type=T.SUCCESS, success=pb.CommandSuccess(request_id=request_id)))

    # ------------------------------------------------------------------ handshake
    def _handle_connect(self, c: pb.CommandConnect) -> None:
        self.protocol_version = min(c.protocol_version, PROTOCOL_VERSION_MAX)
        self.client_version = c.client_version
        if not self.security.on_connect(c):
            return
        self.connected = True
        self.write_command(
            T(
                type=T.CONNECTED,
                connected=pb.CommandConnected(
                    server_version=SERVER_VERSION,
                    protocol_version=self.protocol_version,
                    max_message_size=self.service.config.max_message_size,
                ),
            )
        )

    def _on_ping(self, cmd: pb.BaseCommand) -> None:
        self.write_command(T(type=T.PONG, pong=pb.CommandPong()))

    def _on_pong(self, cmd: pb.BaseCommand) -> None:
        if self._pings:
            fut = self._pings.popleft()
            if fut is not None and not fut.done():
                fut.set_result(None)

    def _on_connect_again(self, cmd: pb.BaseCommand) -> None:
        raise ProtocolViolation("second CONNECT")

    # ------------------------------------------------------------------ lookups
    def _on_lookup(self, cmd: pb.BaseCommand) -> None:
        req = cmd.lookupTopic
        listener = req.advertised_listener_name if req.HasField("advertised_listener_name") else ""
        self._spawn(self._lookup(req.topic, req.request_id, req.authoritative, listener))

    async def _lookup(
        self, topic: str, request_id: int, authoritative: bool, listener_name: str = ""
    ) -> None:
        from magnetar.broker.service import ServiceError

        R = pb.CommandLookupTopicResponse
        try:
            denied = await self.security.denied_lookup(topic)
            if denied is not None:
                raise ServiceError(ServerError.AuthorizationError, denied)
            got = await self.service.lookup(topic, authoritative, listener_name)
            resp = R(
                request_id=request_id,
                response=R.Redirect if got.redirect else R.Connect,
                brokerServiceUrl=got.broker_url,
                brokerServiceUrlTls=got.broker_url_tls,
                authoritative=got.authoritative,
                proxy_through_service_url=False,
            )
        except Exception as exc:
            resp = _failed_response(R, request_id, exc, f"lookup of {topic}")
        self.write_command(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=resp))

    def _on_partitioned_metadata(self, cmd: pb.BaseCommand) -> None:
        req = cmd.partitionMetadata
        self._spawn(self._partitioned_metadata(req.topic, req.request_id))

    async def _partitioned_metadata(self, topic: str, request_id: int) -> None:
        from magnetar.broker.service import ServiceError

        R = pb.CommandPartitionedTopicMetadataResponse
        try:
            denied = await self.security.denied_lookup(topic, metadata=True)
            if denied is not None:
                raise ServiceError(ServerError.AuthorizationError, denied)
            n = await self.service.partitioned_metadata(topic)
            resp = R(request_id=request_id, response=R.Success, partitions=n)
        except Exception as exc:
            resp = _failed_response(R, request_id, exc, f"partitioned metadata of {topic}")
        self.write_command(T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=resp))

    def _on_get_topics_of_namespace(self, cmd: pb.BaseCommand) -> None:
        req = cmd.getTopicsOfNamespace
        self._spawn(self._topics_of_namespace(req.request_id, req.namespace, req.mode))

    async def _topics_of_namespace(self, request_id: int, namespace: str, mode: int) -> None:
        tenant, _, ns = namespace.partition("/")
        if not tenant or not ns or "/" in ns:
            self.error_response(
                request_id, ServerError.MetadataError, f"Invalid namespace {namespace!r}"
            )
            return
        denied = await self.security.denied_list_topics(tenant, ns)
        if denied is not None:
            self.error_response(request_id, ServerError.AuthorizationError, denied)
            return
        topics: list[str] = []
        by_mode: dict[int, tuple[str, ...]] = {
            pb.CommandGetTopicsOfNamespace.PERSISTENT: ("persistent",),
            pb.CommandGetTopicsOfNamespace.NON_PERSISTENT: ("non-persistent",),
        }
        domains = by_mode.get(int(mode), ("persistent", "non-persistent"))
        try:
            for domain in domains:
                topics += await self.service.list_topics(tenant, ns, domain)
        except Exception as exc:
            self.error_response(request_id, ServerError.MetadataError, str(exc))
            return
        self.write_command(
            T(
                type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(
                    request_id=request_id, topics=topics, filtered=False, changed=True
                ),
            )
        )

    def _on_get_schema(self, cmd: pb.BaseCommand) -> None:
        req = cmd.getSchema

        async def answer() -> None:
            denied = await self.security.denied_lookup(req.topic)
            if denied is not None:
                self.write_command(schema_protocol.denied(T.GET_SCHEMA_RESPONSE, req, denied))
                return
            self.write_command(await schema_protocol.get_schema_response(self.service.schemas, req))

        self._spawn(answer())

    def _on_get_or_create_schema(self, cmd: pb.BaseCommand) -> None:
        req = cmd.getOrCreateSchema

        async def answer() -> None:
            denied = await self.security.denied_produce(req.topic)
            if denied is not None:
                self.write_command(
                    schema_protocol.denied(T.GET_OR_CREATE_SCHEMA_RESPONSE, req, denied)
                )
                return
            resp = await schema_protocol.get_or_create_response(self.service.schemas, req)
            self.write_command(resp)

        self._spawn(answer())

    # ------------------------------------------------------------------ producers
    def _on_producer(self, cmd: pb.BaseCommand) -> None:
        req = cmd.producer
        self._chain(("p", req.producer_id), lambda: self._create_producer(req))

    async def _topic_or_error(self, rid: int, name: str, what: str) -> PersistentTopic | None:
        """The topic a PRODUCER or SUBSCRIBE names (loaded here if this broker owns it), or
        None after answering request ``rid`` with the error (the service's code, else
        ServiceNotReady)."""
        from magnetar.broker.service import ServiceError

        try:
            return await self.service.topic_for_client(name)
        except ServiceError as exc:
            self.error_response(rid, exc.code, exc.message)
        except LedgerError as exc:  # storage not available (no bookies, ...): no traceback
            reason = f"cannot open topic {name}: {type(exc).__name__}: {exc}"
            log.warning("%s failed: %s", what, reason)
            self.error_response(rid, ServerError.ServiceNotReady, reason)
        except Exception as exc:
            log.exception("%s on %s failed", what, name)
            self.error_response(rid, ServerError.ServiceNotReady, str(exc))
        return None

    async def _create_producer(self, req: pb.CommandProducer) -> None:
        pid, rid = req.producer_id, req.request_id
        self._closed_by_broker.discard(pid)
        existing = self.producers.get(pid)
        if existing is not None:
            self._producer_success(rid, existing, self.producer_topics[pid])
            return
        denied = await self.security.denied_produce(req.topic)
        if denied is not None:
            self.error_response(rid, ServerError.AuthorizationError, denied)
            return
        topic = await self._topic_or_error(rid, req.topic, "producer")
        if topic is None or self.closed:
            return
        if getattr(topic, "terminated", False):
            self.error_response(
                rid, ServerError.TopicTerminatedError, f"Topic {req.topic} was already terminated"
            )
            return
        if req.HasField("producer_name") and req.producer_name:
            name = req.producer_name
        else:
            name = f"{self.service.config.cluster_name}-{self.service.port}-{next(_names)}"
        try:
            mode = AccessMode(req.producer_access_mode)
        except ValueError:
            self.error_response(rid, ServerError.NotAllowedError, "Unknown producer access mode")
            return
        try:
            schema_version = await schema_protocol.producer_version(
                self.service.schemas, topic.name, req
            )
        except SchemaError as exc:
            self.error_response(rid, exc.code, exc.message)
            return
        if self.closed:
            return
        if getattr(topic, "closed", False):  # unloaded while the schema was checked: retry
            self.error_response(
                rid, ServerError.ServiceNotReady, f"Topic {req.topic} is being unloaded"
            )
            return
        producer = Producer(
            pid,
            name,
            mode,
            cnx=self,
            user_provided_name=req.user_provided_producer_name,
            topic_epoch=req.topic_epoch if req.HasField("topic_epoch") else None,
        )
        try:
            self.service.policies.check_producer(topic)  # max producers, backlog quota
            admission = topic.add_producer(producer)
        except ProducerError as exc:
            self.error_response(rid, exc.code, exc.message)
            return
        for evicted in topic.producers.take_fenced():
            if evicted.cnx is not None:
                evicted.cnx.send_close_producer(evicted)
        if admission is Admission.ADMITTED and mode is not AccessMode.SHARED:
            try:  # as Pulsar's, the producer is ready once its epoch is stored
                await topic.persist_topic_epoch()
            except Exception as exc:
                log.warning("[%s] storing the topic epoch failed: %s", topic.name, exc)
                self._notify_admitted(topic.remove_producer(producer))
                topic.epoch_not_stored()
                self.error_response(
                    rid, ServerError.ServiceNotReady, f"cannot store the topic epoch: {exc}"
                )
                return
        if req.HasField("initial_subscription_name") and req.initial_subscription_name:
            try:
                check_subscription_name(req.initial_subscription_name)
                await topic.create_subscription(req.initial_subscription_name, earliest=True)
            except InvalidSubscriptionName as exc:
                topic.remove_producer(producer)
                self.error_response(rid, exc.code, str(exc))
                return
            except Exception as exc:
                topic.remove_producer(producer)
                self.error_response(
                    rid, ServerError.ServiceNotReady, f"cannot create subscription: {exc}"
                )
                return
        if self.closed:
            self._notify_admitted(topic.remove_producer(producer))
            return
        self.producers[pid] = producer
        self.producer_topics[pid] = topic
        log.info("[%s] created producer %r (id %d) for %s", topic.name, name, pid, self.peer)
        self.producer_persistent[pid] = hasattr(topic, "publish_to")  # a PublishSink topic
        self.producer_requests[pid] = rid
        if schema_version is not None:
            self.producer_schema_versions[pid] = schema_version
        if admission is Admission.QUEUED:
            self.write_command(
                T(
                    type=T.PRODUCER_SUCCESS,
                    producer_success=pb.CommandProducerSuccess(
                        request_id=rid,
                        producer_name=name,
                        last_sequence_id=-1,
                        producer_ready=False,
                    ),
                )
            )
            return
        self._producer_success(rid, producer, topic)

    def _producer_success(self, rid: int, producer: Producer, topic: PersistentTopic) -> None:
        resp = pb.CommandProducerSuccess(
            request_id=rid,
            producer_name=producer.name,
            last_sequence_id=topic.last_sequence_id(producer.name),
            producer_ready=True,
        )
        epoch = topic.producers.topic_epoch
        if producer.access_mode is not AccessMode.SHARED and epoch is not None:
            resp.topic_epoch = epoch
        schema_version = self.producer_schema_versions.get(producer.producer_id)
        if schema_version is not None:
            resp.schema_version = schema_version
        self.write_command(T(type=T.PRODUCER_SUCCESS, producer_success=resp))

    def producer_admitted(self, producer: Producer) -> None:
        """A WaitForExclusive producer got the topic: ready once its epoch is stored."""
        pid = producer.producer_id
        topic = self.producer_topics.get(pid)
        if topic is None or self.producers.get(pid) is not producer:
            return

        async def ready() -> None:
            try:
                await topic.persist_topic_epoch()
            except Exception as exc:
                log.warning("[%s] storing the topic epoch failed: %s", topic.name, exc)
                if self.producers.get(pid) is producer:
                    rid = self.producer_requests.get(pid, 0)
                    self._drop_producer(pid)
                    topic.epoch_not_stored()
                    self.error_response(
                        rid, ServerError.ServiceNotReady, f"cannot store the topic epoch: {exc}"
                    )
                return
            if self.producers.get(pid) is producer:
                self._producer_success(self.producer_requests.get(pid, 0), producer, topic)

        self._spawn(ready())

    @staticmethod
    def _notify_admitted(admitted: list[Producer]) -> None:
        for p in admitted:
            if p.cnx is not None:
                p.cnx.producer_admitted(p)

    def _drop_producer(self, pid: int) -> None:
        producer = self.producers.pop(pid, None)
        topic = self.producer_topics.pop(pid, None)
        self.producer_persistent.pop(pid, None)
        self.producer_requests.pop(pid, None)
        self.producer_schema_versions.pop(pid, None)
        if producer is not None and topic is not None:
            log.info("[%s] closed producer %r (id %d)", topic.name, producer.name, pid)
            self._notify_admitted(topic.remove_producer(producer))

    def _on_close_producer(self, cmd: pb.BaseCommand) -> None:
        req = cmd.close_producer

        async def close() -> None:
            self._drop_producer(req.producer_id)
            self._success(req.request_id)

        self._chain(("p", req.producer_id), close)

    def send_close_producer(self, producer: Producer) -> None:
        """Broker-initiated close (unload): the client looks up again and reconnects."""
        pid = producer.producer_id
        if self.producers.get(pid) is producer:
            self.producers.pop(pid, None)
            self.producer_topics.pop(pid, None)
            self.producer_persistent.pop(pid, None)
            self.producer_requests.pop(pid, None)
            self._closed_by_broker.add(pid)
            self.write_command(
                T(
                    type=T.CLOSE_PRODUCER,
                    close_producer=pb.CommandCloseProducer(producer_id=pid, request_id=U64),
                )
            )

    # ------------------------------------------------------------------ publish
    def _handle_send(self, send: pb.CommandSend, tail: bytes) -> None:
        pid = send.producer_id
        producer = self.producers.get(pid)
        topic = self.producer_topics.get(pid)
        seq = send.sequence_id
        if producer is None or topic is None:
            if pid in self._closed_by_broker:
                return  # in flight when we closed it; the client resends after reconnecting
            raise ProtocolViolation(f"SEND for unknown producer {pid}")
        if tail[:2] == MAGIC_CRC32C_BYTES:
            if len(tail) < 10:
                raise ProtocolViolation("truncated checksum")
            (expected,) = _U32.unpack_from(tail, 2)
            if crc32c.crc32c(memoryview(tail)[6:]) != expected:
                self._send_error(
                    pid, seq, ServerError.ChecksumError, "Checksum failed on the broker"
                )
                return
        elif len(tail) < 4:
            raise ProtocolViolation("SEND without metadata")
        try:  # metadata and message count checked before anything is stored
            num = check_entry(tail, send.num_messages, self.service.config.max_message_size)
        except InvalidEntry as exc:
            self._send_error(pid, seq, exc.code, exc.message)
            return
        refused = self.service.policies.admit_send(topic, tail)  # backlog quota, max delay
        if refused is not None:
            self._send_error(pid, seq, *refused)
            return
        check_dedup = True
        if send.is_chunk and topic.dedup.enabled:
            try:
                md = parse_entry_metadata(tail)
                check_dedup = md.chunk_id == md.num_chunks_from_msg - 1
            except Exception:
                raise ProtocolViolation("bad chunk metadata") from None
        producer.msg_in += num
        producer.bytes_in += len(tail)
        self._pending_sends += 1
        if self._pending_sends >= self.max_pending_sends:
            self.pause_reads("pending-sends")
        if self.producer_persistent.get(pid, False):
            held = self.service.policies.hold_queue(topic, self, num, len(tail))
            if held is None:  # the hot path: no callable made
                topic.publish_to(  # type: ignore[attr-defined]
                    self, producer, seq, send.highest_sequence_id, num, tail, check_dedup
                )
            else:  # held by the backlog quota
                held.append(
                    functools.partial(
                        topic.publish_to,  # type: ignore[attr-defined]
                        self,
                        producer,
                        seq,
                        send.highest_sequence_id,
                        num,
                        tail,
                        check_dedup,
                    )
                )
            return
        publish = functools.partial(
            topic.publish,
            producer,
            seq,
            send.highest_sequence_id,
            num,
            tail,
            functools.partial(self._published_one, pid, seq, send.highest_sequence_id),
            check_dedup=check_dedup,
        )
        # held by the backlog quota, publish throttling
        self.service.policies.publish(topic, self, num, len(tail), publish)

    # PublishSink of persistent topics: one call per run of this connection's SENDs
    def on_published(self, items: list[Any], positions: list[Position | None]) -> None:
        self._sends_done(len(items))
        if self.closed:
            return
        receipts = []
        for p, pos in zip(items, positions, strict=True):
            if pos is None:  # duplicate: acknowledged, not stored
                receipts.append(
                    (p.producer.producer_id, p.sequence_id, p.highest_sequence_id, U64, U64)
                )
            else:
                receipts.append(
                    (
                        p.producer.producer_id,
                        p.sequence_id,
                        p.highest_sequence_id,
                        pos.ledger_id,
                        pos.entry_id,
                    )
                )
        self._out.append(b"".join(encode_send_receipt_frames(receipts)))
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush_out)

    def on_publish_failed(self, items: list[Any], exc: Exception) -> None:
        self._sends_done(len(items))
        code = (
            ServerError.TopicTerminatedError
            if isinstance(exc, ManagedLedgerTerminated)
            else (ServerError.PersistenceError)
        )
        for p in items:
            self._send_error(p.producer.producer_id, p.sequence_id, code, f"write failed: {exc}")

    def _published_one(
        self, pid: int, seq: int, highest: int, pos: Position | None, exc: Exception | None
    ) -> None:
        """Completion of one SEND to a non-persistent topic."""
        self._sends_done(1)
        if exc is not None:
            self._send_error(pid, seq, ServerError.PersistenceError, f"write failed: {exc}")
        elif pos is None:
            self.write(encode_send_receipt_frame(pid, seq, U64, U64, highest_sequence_id=highest))
        else:
            self.write(
                encode_send_receipt_frame(
                    pid, seq, pos.ledger_id, pos.entry_id, highest_sequence_id=highest
                )
            )

    def _sends_done(self, n: int) -> None:
        self._pending_sends -= n
        if self._pending_sends <= self.max_pending_sends // 2:
            self.resume_reads("pending-sends")

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

    def _send_error(self, pid: int, seq: int, code: ServerError, message: str) -> None:
        if code in _FAIL_ONE_CODES and self.client_version.startswith(_CPP_CORE_CLIENTS):
            # The C++ client core (C++, Python, Node.js) fails one message only on
            # ChecksumError and answers any other SEND_ERROR by reconnecting and resending,
            # forever. It logs the message text, so the reason stays visible.
            code, message = ServerError.ChecksumError, f"{code.name}: {message}"
        self.write_command(
            T(
                type=T.SEND_ERROR,
                send_error=pb.CommandSendError(
                    producer_id=pid, sequence_id=seq, error=_error_code(code), message=message
                ),
            )
        )

    # ------------------------------------------------------------------ consumers
    def _on_subscribe(self, cmd: pb.BaseCommand) -> None:
        req = cmd.subscribe
        self._chain(("c", req.consumer_id), lambda: self._subscribe(req))

    async def _subscribe(self, req: pb.CommandSubscribe) -> None:
        """SUBSCRIBE: admit it (``_subscription_target``), make the consumer, attach it;
        every refusal is a ``BrokerError`` answered with its code."""
        cid, rid = req.consumer_id, req.request_id
        if cid in self.consumers:
            self._success(rid)
            return
        try:
            topic = await self._subscription_target(req)
            if topic is None:  # answered already, or the connection closed
                return
            consumer = self._new_consumer(req, topic)
            sub = await self._attach(req, topic, consumer)
        except BrokerError as exc:
            self.error_response(rid, exc.code, exc.message)
            return
        if self.closed:
            topic.remove_consumer(sub, consumer)
            return
        if getattr(topic, "closed", False):
            # the topic began closing (an unload) while the subscription was made: its close
            # told the consumers it had then, not this one, which would wait on a topic that
            # is gone; the client retries and finds the next owner
            topic.remove_consumer(sub, consumer)
            self.error_response(
                rid, ServerError.ServiceNotReady, f"Topic {req.topic} is being unloaded"
            )
            return
        self.consumers[cid] = (consumer, sub, topic)
        log.info(
            "[%s][%s] created %s consumer %r (id %d) for %s",
            topic.name,
            sub.name,
            consumer.sub_type.name,
            consumer.name,
            cid,
            self.peer,
        )
        self.service.policies.after_subscribe(topic, sub)  # dispatch rate on a new dispatcher
        self._success(rid)

    async def _subscription_target(self, req: pb.CommandSubscribe) -> PersistentTopic | None:
        """The topic a SUBSCRIBE may attach to, after the checks Pulsar makes (name,
        permission, auto-creation of subscriptions, read_compacted, schema); raises the
        refusal, or None when the topic lookup answered the client itself."""
        check_subscription_name(req.subscription)
        denied = await self.security.denied_consume(req.topic, req.subscription)
        if denied is not None:
            raise CodedError(ServerError.AuthorizationError, denied)
        topic = await self._topic_or_error(req.request_id, req.topic, "subscribe")
        if topic is None or self.closed:
            return None
        if (
            not self.service.config.allow_auto_subscription_creation
            and req.durable
            and topic.name.persistent
            and req.subscription not in topic.subscriptions
        ):
            raise CodedError(ServerError.SubscriptionNotFound, "Subscription does not exist")
        if req.read_compacted and not topic.name.persistent:
            raise CodedError(
                ServerError.NotAllowedError, "readCompacted is only supported on persistent topics"
            )
        await schema_protocol.check_consumer(self.service.schemas, topic, req)
        if self.closed:
            return None
        if req.HasField("schema") and getattr(topic, "closed", False):  # unloaded meanwhile
            raise CodedError(ServerError.ServiceNotReady, f"Topic {req.topic} is being unloaded")
        return topic

    def _new_consumer(self, req: pb.CommandSubscribe, topic: PersistentTopic) -> Consumer:
        """The consumer a SUBSCRIBE describes (type, priority, Key_Shared metadata)."""
        consumer = Consumer(
            req.consumer_id,
            req.consumer_name or f"consumer-{req.consumer_id}",
            SubType(req.subType),
            priority=req.priority_level,
            sink=self,
            max_unacked=self.service.config.max_unacked_messages_per_consumer,
            address=self.peer,
            is_reader=not req.durable,
            partition_index=topic.name.partition_index,
        )
        consumer.paused = self._write_paused
        now_ms = self.clock.now_ms()
        consumer.connected_since = (
            datetime.datetime.fromtimestamp(now_ms / 1000, datetime.UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )
        if req.HasField("keySharedMeta"):
            meta = req.keySharedMeta
            consumer.key_shared_mode = int(meta.keySharedMode)
            consumer.hash_ranges = [(r.start, r.end) for r in meta.hashRanges]
            consumer.allow_out_of_order = bool(meta.allowOutOfOrderDelivery)
        return consumer

    async def _attach(
        self, req: pb.CommandSubscribe, topic: PersistentTopic, consumer: Consumer
    ) -> Subscription:
        """Attach ``consumer`` to its subscription (created if needed) from the requested
        start; a storage failure is ServiceNotReady (the client retries)."""
        start: Position | None = None
        if req.HasField("start_message_id"):
            pos = _position(req.start_message_id)
            start = (
                EARLIEST if pos.ledger_id < 0 else (LATEST if pos.ledger_id >= INT64_MAX else pos)
            )
        self.service.policies.check_consumer(topic, consumer)  # max consumers, unacked
        extra = {"read_compacted": True} if req.read_compacted else {}
        try:
            return await topic.subscribe(
                consumer,
                req.subscription,
                durable=req.durable,
                initial_earliest=req.initialPosition == pb.CommandSubscribe.Earliest,
                start=start,
                **extra,
            )
        except BrokerError:
            raise
        except Exception as exc:  # storage trouble: retryable for the client
            log.exception("subscribe %s on %s failed", req.subscription, req.topic)
            raise CodedError(ServerError.ServiceNotReady, f"cannot subscribe: {exc}") from None

    def _consumer(self, cid: int) -> tuple[Consumer, Subscription, PersistentTopic] | None:
        return self.consumers.get(cid)

    def _consumer_or_error(
        self, cid: int, rid: int
    ) -> tuple[Consumer, Subscription, PersistentTopic] | None:
        """The consumer a request names, or None after answering ConsumerNotFound."""
        got = self.consumers.get(cid)
        if got is None:
            self.error_response(rid, ServerError.ConsumerNotFound, "Consumer not found")
        return got

    def _on_flow(self, cmd: pb.BaseCommand) -> None:
        req = cmd.flow
        key = ("c", req.consumer_id)
        if key in self._chains:

            async def later() -> None:
                got = self._consumer(req.consumer_id)
                if got is not None:
                    got[1].flow(got[0], req.messagePermits)

            self._chain(key, later)
            return
        got = self._consumer(req.consumer_id)
        if got is not None:
            got[1].flow(got[0], req.messagePermits)

    def _on_ack(self, cmd: pb.BaseCommand) -> None:
        req = cmd.ack
        cid = req.consumer_id

        async def ack() -> None:
            got = self.consumers.get(cid) or self._closing.get(cid)
            if got is None:
                if req.HasField("request_id"):
                    self._ack_response(
                        cid, req.request_id, ServerError.ConsumerNotFound, "Consumer not found"
                    )
                return
            consumer, sub, _ = got
            try:
                if req.ack_type == pb.CommandAck.Cumulative:
                    if req.message_id:
                        await sub.ack_cumulative(consumer, _position(req.message_id[0]))
                else:
                    whole: list[Position] = []
                    partial: list[tuple[Position, list[int]]] = []
                    add = whole.append
                    for m in req.message_id:
                        ledger, entry = m.ledgerId, m.entryId
                        if ledger >= _I64 or entry >= _I64:  # the client's negative ids
                            pos = _position(m)
                        else:
                            pos = Position(ledger, entry)
                        if m.ack_set:
                            partial.append((pos, list(m.ack_set)))
                        else:
                            add(pos)
                    await sub.ack_positions(consumer, whole, partial)
            except LedgerError as exc:
                # the topic is closing (an unload): its cursor takes no more acks; the
                # consumer hears CLOSE_CONSUMER and the next owner redelivers (at least once)
                log.info("ack on %s dropped: %s", self.peer, exc)
                if req.HasField("request_id"):
                    self._ack_response(cid, req.request_id, ServerError.ServiceNotReady, str(exc))
                return
            if req.HasField("request_id"):
                self._ack_response(cid, req.request_id, None, None)

        # An ACK applies its state changes before its first await (the cursor persists in
        # the background), so it needs no chain unless a SUBSCRIBE for this id is pending:
        # later commands of the same consumer still see it applied, and FLOWs never wait
        # behind a durable cursor write.
        if ("c", cid) in self._chains:
            self._chain(("c", cid), ack)
        else:
            task = self._loop.create_task(ack())
            self._tasks.add(task)
            task.add_done_callback(self._task_done)
            inflight = self._acks_inflight.setdefault(cid, set())
            inflight.add(task)
            task.add_done_callback(inflight.discard)

    async def _acks_settled(self, cid: int) -> None:
        """Wait for this consumer's ACKs in flight: a confirmed close or unsubscribe means
        its acknowledgements are durable."""
        inflight = self._acks_inflight.get(cid)
        if inflight:
            await asyncio.wait(list(inflight))
        if not inflight:
            self._acks_inflight.pop(cid, None)

    def _ack_response(
        self, cid: int, rid: int, code: ServerError | None, message: str | None
    ) -> None:
        resp = pb.CommandAckResponse(consumer_id=cid, request_id=rid)
        if code is not None:
            resp.error = _error_code(code)
            resp.message = message or ""
        self.write_command(T(type=T.ACK_RESPONSE, ackResponse=resp))

    def _on_redeliver(self, cmd: pb.BaseCommand) -> None:
        req = cmd.redeliverUnacknowledgedMessages
        cid = req.consumer_id

        async def redeliver() -> None:
            got = self._consumer(cid)
            if got is None:
                return
            positions = [_position(m) for m in req.message_ids] or None
            got[1].redeliver(got[0], positions)

        self._chain(("c", cid), redeliver)

    def _on_close_consumer(self, cmd: pb.BaseCommand) -> None:
        req = cmd.close_consumer

        async def close() -> None:
            await self._acks_settled(req.consumer_id)
            got = self.consumers.get(req.consumer_id)
            if got is not None:
                await got[1].settle_acks()
            self._drop_consumer(req.consumer_id)
            self._success(req.request_id)

        self._chain(("c", req.consumer_id), close)

    def _drop_consumer(self, cid: int) -> None:
        got = self.consumers.pop(cid, None)
        if got is not None:
            consumer, sub, topic = got
            log.info(
                "[%s][%s] closed consumer %r (id %d)", topic.name, sub.name, consumer.name, cid
            )
            topic.remove_consumer(sub, consumer)

    def _on_unsubscribe(self, cmd: pb.BaseCommand) -> None:
        req = cmd.unsubscribe

        async def unsubscribe() -> None:
            got = self._consumer_or_error(req.consumer_id, req.request_id)
            if got is None:
                return
            consumer, sub, topic = got
            await self._acks_settled(req.consumer_id)
            try:
                await topic.unsubscribe(sub, consumer)
            except SubscriptionError as exc:
                self.error_response(req.request_id, exc.code, exc.message)
                return
            except Exception as exc:
                log.exception("unsubscribe failed")
                self.error_response(
                    req.request_id, ServerError.UnknownError, f"unsubscribe failed: {exc}"
                )
                return
            self.consumers.pop(req.consumer_id, None)
            self._success(req.request_id)

        self._chain(("c", req.consumer_id), unsubscribe)

    def _on_seek(self, cmd: pb.BaseCommand) -> None:
        req = cmd.seek

        async def seek() -> None:
            got = self._consumer_or_error(req.consumer_id, req.request_id)
            if got is None:
                return
            _, sub, topic = got
            if req.HasField("message_publish_time"):
                pos = await topic.find_position_by_time(req.message_publish_time)
            elif req.HasField("message_id"):
                pos = _position(req.message_id)
                if pos.ledger_id < 0:
                    pos = EARLIEST
                elif pos.ledger_id >= INT64_MAX:
                    pos = LATEST
            else:
                self.error_response(
                    req.request_id, ServerError.MetadataError, "Seek needs a message id or a time"
                )
                return
            for consumer in sub.consumers:
                if consumer.sink is not None:
                    consumer.sink.send_close_consumer(consumer)
            await sub.reset_cursor(pos)
            self._success(req.request_id)

        self._chain(("c", req.consumer_id), self._guarded(req.request_id, seek))

    def _on_get_last_message_id(self, cmd: pb.BaseCommand) -> None:
        req = cmd.getLastMessageId

        async def last() -> None:
            got = self._consumer_or_error(req.consumer_id, req.request_id)
            if got is None:
                return
            _, sub, topic = got
            lm = await topic.resolve_last_message_id(sub)
            resp = pb.CommandGetLastMessageIdResponse(
                request_id=req.request_id,
                last_message_id=pb.MessageIdData(
                    ledgerId=lm.ledger_id & U64,
                    entryId=lm.entry_id & U64,
                    partition=topic.name.partition_index,
                    batch_index=lm.batch_index,
                ),
            )
            if lm.mark_delete is not None:
                resp.consumer_mark_delete_position.ledgerId = lm.mark_delete.ledger_id & U64
                resp.consumer_mark_delete_position.entryId = lm.mark_delete.entry_id & U64
            self.write_command(
                T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=resp)
            )

        self._chain(("c", req.consumer_id), self._guarded(req.request_id, last))

    def _on_consumer_stats(self, cmd: pb.BaseCommand) -> None:
        req = cmd.consumerStats
        got = self._consumer(req.consumer_id)
        resp = pb.CommandConsumerStatsResponse(request_id=req.request_id)
        if got is None:
            resp.error_code = _error_code(ServerError.ConsumerNotFound)
            resp.error_message = "Consumer not found"
        else:
            consumer, sub, _ = got
            resp.consumerName = consumer.name
            resp.availablePermits = max(0, consumer.permits)
            resp.unackedMessages = consumer.unacked
            resp.blockedConsumerOnUnackedMsgs = consumer.blocked
            resp.address = consumer.address
            resp.type = sub.sub_type.name.title() if sub.sub_type else ""
            resp.msgBacklog = sub.cursor.backlog()
        self.write_command(T(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=resp))

    # ------------------------------------------------------------------ ConsumerSink
    def send_messages(self, consumer: Consumer, messages: list[OutMessage]) -> None:
        if self.closed:
            return
        out = self._out
        out += encode_message_frames(consumer.consumer_id, consumer.partition_index, messages)
        if self._flush_handle is None and out:
            self._flush_handle = self._loop.call_soon(self._flush_out)

    def send_active_consumer_change(self, consumer: Consumer, is_active: bool) -> None:
        if self.protocol_version < 12:
            return
        self.write_command(
            T(
                type=T.ACTIVE_CONSUMER_CHANGE,
                active_consumer_change=pb.CommandActiveConsumerChange(
                    consumer_id=consumer.consumer_id, is_active=is_active
                ),
            )
        )

    async def close_consumer_with_ack_barrier(self, consumer: Consumer, timeout_s: float) -> None:
        """Unload: CLOSE_CONSUMER, then take the consumer's ACKs until the client proves it
        read CLOSE_CONSUMER (the PONG to a PING written after it; at most ``timeout_s``), and
        until those ACKs reached the cursor. The caller closes the cursor after this."""
        cid = consumer.consumer_id
        got = self.consumers.get(cid)
        self.send_close_consumer(consumer)
        if got is None or got[0] is not consumer or self.closed or self.protocol_version < 1:
            return
        self._closing[cid] = got
        fut: asyncio.Future[None] = self._loop.create_future()
        self._pings.append(fut)
        self.write_command(T(type=T.PING, ping=pb.CommandPing()))

        def give_up() -> None:  # a client that does not answer: its later ACKs are dropped
            if not fut.done():
                log.info(
                    "%s: no PONG after CLOSE_CONSUMER %d within %.1f s", self.peer, cid, timeout_s
                )
                fut.set_result(None)

        bound = self.clock.call_later(timeout_s, give_up)
        try:
            await fut
            await self._acks_settled(cid)
            chain = self._chains.get(("c", cid))
            if chain is not None:
                await asyncio.wait([chain])
        finally:
            bound.cancel()
            if self._closing.get(cid) is got:
                del self._closing[cid]

    def send_reached_end_of_topic(self, consumer: Consumer) -> None:
        if self.client_version.startswith(_CPP_CORE_CLIENTS):
            # The C++ client core (3.x) takes REACHED_END_OF_TOPIC for an invalid message
            # and closes the connection: every resubscription would hear it again, a
            # reconnect loop. Those consumers simply receive nothing more.
            return
        self.write_command(
            T(
                type=T.REACHED_END_OF_TOPIC,
                reachedEndOfTopic=pb.CommandReachedEndOfTopic(consumer_id=consumer.consumer_id),
            )
        )

    def send_close_consumer(self, consumer: Consumer) -> None:
        got = self.consumers.get(consumer.consumer_id)
        if got is not None and got[0] is consumer:
            del self.consumers[consumer.consumer_id]
        self.write_command(
            T(
                type=T.CLOSE_CONSUMER,
                close_consumer=pb.CommandCloseConsumer(
                    consumer_id=consumer.consumer_id, request_id=U64
                ),
            )
        )

    _handlers: dict[int, Callable[[ServerConnection, pb.BaseCommand], None]] = {
        T.CONNECT: _on_connect_again,
        T.PING: _on_ping,
        T.PONG: _on_pong,
        T.LOOKUP: _on_lookup,
        T.PARTITIONED_METADATA: _on_partitioned_metadata,
        T.GET_TOPICS_OF_NAMESPACE: _on_get_topics_of_namespace,
        T.GET_SCHEMA: _on_get_schema,
        T.GET_OR_CREATE_SCHEMA: _on_get_or_create_schema,
        T.PRODUCER: _on_producer,
        T.CLOSE_PRODUCER: _on_close_producer,
        T.SUBSCRIBE: _on_subscribe,
        T.FLOW: _on_flow,
        T.ACK: _on_ack,
        T.REDELIVER_UNACKNOWLEDGED_MESSAGES: _on_redeliver,
        T.CLOSE_CONSUMER: _on_close_consumer,
        T.UNSUBSCRIBE: _on_unsubscribe,
        T.SEEK: _on_seek,
        T.GET_LAST_MESSAGE_ID: _on_get_last_message_id,
        T.CONSUMER_STATS: _on_consumer_stats,
        T.AUTH_RESPONSE: lambda self, cmd: self.security.on_auth_response(cmd),
    }


__all__ = ["ServerConnection"]
