"""The bookie's gRPC service: the network face of a ``BookieStorage``.

Owns: ``BookieService`` (the ``magnetar.bookie.v1.Bookie`` servicer) and ``BookieServer``
(a grpc.aio server bound to one address). Translates protobuf messages to the value types of
``api.py``, and exceptions to status codes at one point (``_answer``): a ``BookieError``
answers with its code (a bad request: ``BAD_REQUEST``), an unexpected failure with
``IO_ERROR`` and a log line; no exception escapes a handler.
Must not know: how storage works (journal, caches, index), metadata, registration.

Add stream (one per client connection), pipelined:
- a reader task takes ``AddBatch`` messages off the stream, hands each batch's ``packed``
  buffer (layout: ``wire.py``) as it arrived to ``storage.submit_packed`` (the storage walks
  it once, validates every entry and reports entries and bytes), and queues the returned
  awaitable; a malformed buffer fails that batch whole (``BAD_REQUEST``, nothing of it
  stored), and so does a master key over ``MASTER_KEY_BYTES_MAX``; it stops reading while
  ``max_inflight_batches`` / ``max_inflight_bytes`` are pending (back-pressure reaches the
  client through gRPC flow control);
- the writer awaits the queued batches strictly in order and, once the head is done, also
  takes every following batch that is already done, answering them in one ``AddResponse``
  (OK is implicit; only failures are listed, per entry or ``whole_batch``).
The same Add stream is also carried by a plain TCP connection (``fast_add.py``): both
transports go through ``open_add_stream`` / ``accept_batch`` / ``drain_done`` /
``close_add_stream`` here, so checks, bounds, errors and counters are one code
(``statistics()`` also counts the fast transport's streams and batches apart).
Invariant: acks of one stream are sent in batch order; every received batch is answered
unless the stream itself dies.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from magnetar.bookie.api import NO_ENTRY_ID, BookieStorage, Entry
from magnetar.bookie.background import SHARE_PERCENT_DEFAULT, BackgroundReads
from magnetar.bookie.errors import (
    BadRequest,
    BookieError,
    BookieIOError,
    NoEntry,
    ReadOnly,
    StatusCode,
)
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.proto import bookie_pb2_grpc as pb_grpc
from magnetar.bookie.tls import GrpcTls, RoleCheck
from magnetar.bookie.wire import BatchHeader, MalformedBatch, parse_batch_header

log = logging.getLogger(__name__)

_Codes = asyncio.Future[list[int]] | list[int] | BookieError
"""A batch's result: one status per entry, their future, or one error for the whole batch."""

ENTRY_BYTES_MAX = 5 * 1024 * 1024 + 64 * 1024
"""Largest payload accepted (Pulsar's 5 MiB max message plus metadata headroom)."""

MESSAGE_BYTES_MAX = 32 * 1024 * 1024
"""gRPC message limit, both ways: one maximal entry or a full batch, plus framing."""

READ_BYTES_MAX = 16 * 1024 * 1024
"""Range reads are cut at this many payload bytes (at least one entry is returned)."""

LONG_POLL_MS_MAX = 60_000
MASTER_KEY_BYTES_MAX = 1024

GRPC_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    # Two bookies must never share a port silently.
    ("grpc.so_reuseport", 0),
    ("grpc.http2.lookahead_bytes", 8 * 1024 * 1024),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
]


@dataclass(frozen=True, slots=True)
class ServiceStatistics:
    add_streams_open: int
    add_batches_received: int
    add_entries_received: int
    add_entries_failed: int
    add_responses_sent: int
    reads: int
    bad_requests: int
    add_bytes_received: int = 0
    read_bytes_sent: int = 0
    fast_add_connections_open: int = 0
    """Add streams carried by the fast TCP transport (``fast_add.py``), also in the totals."""
    fast_add_batches_received: int = 0


def _entry_pb(entry: Entry) -> pb.Entry:
    return pb.Entry(
        ledger_id=entry.ledger_id,
        entry_id=entry.entry_id,
        lac=entry.lac,
        crc32c=entry.crc32c,
        payload=entry.payload,
    )


class AddStreamState:
    """State of one Add stream: ordered queue of in-flight batches."""

    __slots__ = (
        "error",
        "inflight_bytes",
        "pending",
        "reading_done",
        "space",
        "transport",
        "wake",
    )

    def __init__(self, transport: str = "grpc") -> None:
        self.transport = transport
        # (batch_id, entry count, size in bytes, codes: see ``BookieService._submit``)
        self.pending: collections.deque[tuple[int, int, int, _Codes]] = collections.deque()
        self.wake = asyncio.Event()
        self.space = asyncio.Event()
        self.space.set()
        self.reading_done = False
        self.inflight_bytes = 0
        self.error: str | None = None  # a message that could not be read ends the stream


class BookieService(pb_grpc.BookieServicer):
    """Serves one ``BookieStorage`` over gRPC."""

    def __init__(
        self,
        storage: BookieStorage,
        *,
        max_inflight_batches: int = 512,
        max_inflight_bytes: int = 64 * 1024 * 1024,
        background_read_share_percent: int = SHARE_PERCENT_DEFAULT,
    ) -> None:
        self.storage = storage
        self.max_inflight_batches = max_inflight_batches
        self.max_inflight_bytes = max_inflight_bytes
        self._streams_open = 0
        self._batches = 0
        self._entries = 0
        self._entries_failed = 0
        self._responses = 0
        self._reads = 0
        self._bad_requests = 0
        self._add_bytes = 0
        self._read_bytes = 0
        self.accepting = True
        # Health answers serving=False until the process finished starting (registration).
        self.ready = True
        self._draining = False
        self._streams: set[AddStreamState] = set()
        self._fast_streams_open = 0
        self._fast_batches = 0
        self._drain_hooks: list[Callable[[], None]] = []
        self.background = BackgroundReads(background_read_share_percent)
        """Spaces reads marked ``background`` while adds come in (``background.py``)."""

    def begin_shutdown(self) -> None:
        """Refuse new adds (READ_ONLY) and end every Add stream once its in-flight batches
        are answered, so a graceful server stop does not wait for idle streams."""
        self.accepting = False
        self._draining = True
        for state in self._streams:
            state.wake.set()
        for hook in self._drain_hooks:
            hook()

    def on_begin_shutdown(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` from ``begin_shutdown`` (other transports end their streams)."""
        self._drain_hooks.append(hook)

    def statistics(self) -> ServiceStatistics:
        return ServiceStatistics(
            add_streams_open=self._streams_open,
            add_batches_received=self._batches,
            add_entries_received=self._entries,
            add_entries_failed=self._entries_failed,
            add_responses_sent=self._responses,
            reads=self._reads,
            bad_requests=self._bad_requests,
            add_bytes_received=self._add_bytes,
            read_bytes_sent=self._read_bytes,
            fast_add_connections_open=self._fast_streams_open,
            fast_add_batches_received=self._fast_batches,
        )

    # -- Add --------------------------------------------------------------------------------

    def _submit(self, batch: BatchHeader, data: bytes) -> tuple[int, int, _Codes]:
        """Validate and hand one batch to storage; returns (entries, bytes, codes): codes are
        one status per entry, or their future, or one error for the whole batch (a malformed
        ``packed`` buffer: nothing of it is stored)."""
        if not self.accepting:
            return 0, 0, ReadOnly("bookie is shutting down")
        if len(batch.master_key) > MASTER_KEY_BYTES_MAX:
            self._bad_requests += 1
            return 0, 0, BadRequest(f"master key over {MASTER_KEY_BYTES_MAX} bytes")
        # The storage walks the buffer and validates every entry (ids, keys, fences, sizes,
        # checksums) in one pass; no per-entry object is built here.
        try:
            awaitable, count, size = self.storage.submit_packed(
                data, batch.master_key, batch.recovery, batch.packed_start, batch.packed_end
            )
        except MalformedBatch as exc:
            return 0, 0, self._malformed(batch.batch_id, exc)
        except BookieError as exc:
            return 0, 0, exc
        except Exception as exc:
            log.exception("add batch failed")
            return 0, 0, BookieIOError(f"add batch failed: {exc!r}")
        return count, size, asyncio.ensure_future(awaitable)

    def _malformed(self, batch_id: int, exc: MalformedBatch) -> BookieError:
        self._bad_requests += 1
        log.warning("malformed add batch %d: %s", batch_id, exc)
        return BadRequest(f"malformed add batch: {exc}")

    # -- one Add stream, whatever carries it (gRPC here, a TCP connection: fast_add.py) ----

    def open_add_stream(self, transport: str = "grpc") -> AddStreamState:
        """Register a new Add stream (``transport``: "grpc" or "tcp", counted apart)."""
        state = AddStreamState(transport)
        self._streams_open += 1
        if transport != "grpc":
            self._fast_streams_open += 1
        self._streams.add(state)
        return state

    def close_add_stream(self, state: AddStreamState) -> None:
        if state in self._streams:
            self._streams.discard(state)
            self._streams_open -= 1
            if state.transport != "grpc":
                self._fast_streams_open -= 1

    def accept_batch(self, state: AddStreamState, data: bytes) -> bool:
        """Take one raw ``AddBatch`` message off a stream: submit it and queue its result.
        False (with ``state.error`` set) if the message itself is unreadable: the stream
        must end. The caller keeps ``has_space`` true before calling (back-pressure)."""
        try:
            batch = parse_batch_header(data)
        except MalformedBatch as exc:
            self._bad_requests += 1
            state.error = f"malformed AddBatch message: {exc}"
            log.warning("add stream ended: %s", state.error)
            return False
        self._batches += 1
        self.background.note_add()
        if state.transport != "grpc":
            self._fast_batches += 1
        n, size, codes = self._submit(batch, data)
        self._entries += n
        self._add_bytes += size
        state.pending.append((batch.batch_id, n, size, codes))
        state.inflight_bytes += size
        return True

    def has_space(self, state: AddStreamState) -> bool:
        return (
            len(state.pending) < self.max_inflight_batches
            and state.inflight_bytes < self.max_inflight_bytes
        )

    async def _read_adds(
        self, request_iterator: AsyncIterator[bytes], state: AddStreamState
    ) -> None:
        try:
            async for data in request_iterator:
                # Raw message bytes (the Add method has no request deserializer): the header
                # fields are read by hand and ``packed`` stays a view of ``data``.
                while not self.has_space(state):
                    state.space.clear()
                    await state.space.wait()
                if not self.accept_batch(state, data):
                    return
                state.wake.set()
        finally:
            state.reading_done = True
            state.wake.set()

    async def Add(
        self, request_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AddResponse]:
        state = self.open_add_stream("grpc")
        reader = asyncio.create_task(self._read_adds(request_iterator, state))
        try:
            while True:
                if not state.pending:
                    if state.reading_done or self._draining:
                        break
                    state.wake.clear()
                    await state.wake.wait()
                    continue
                head = state.pending[0][3]
                if isinstance(head, asyncio.Future) and not head.done():
                    try:
                        await asyncio.shield(head)
                    except Exception:
                        pass
                yield self.drain_done(state)
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                exc = reader.exception()
                log.debug("add stream ended: %r", exc)
            if state.error is not None:
                # Earlier batches are answered above; the client fails what it has in flight.
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, state.error)
        finally:
            self.close_add_stream(state)
            reader.cancel()

    def head_done(self, state: AddStreamState) -> bool:
        """Is the oldest queued batch of ``state`` answered (so ``drain_done`` has work)?"""
        if not state.pending:
            return False
        head = state.pending[0][3]
        return not isinstance(head, asyncio.Future) or head.done()

    def drain_done(self, state: AddStreamState) -> pb.AddResponse:
        """Pop the head and every following finished batch into one response."""
        resp = pb.AddResponse()
        first = True
        pending = state.pending
        while pending:
            batch_id, n, size, codes_or_fut = pending[0]
            codes: list[int] | BookieError
            if isinstance(codes_or_fut, asyncio.Future):
                if not codes_or_fut.done():
                    break
                exc = codes_or_fut.exception()
                if exc is None:
                    codes = codes_or_fut.result()
                elif isinstance(exc, BookieError):
                    codes = exc
                else:
                    log.error("add batch failed: %r", exc)
                    codes = BookieIOError(f"add batch failed: {exc!r}")
            else:
                codes = codes_or_fut
            pending.popleft()
            state.inflight_bytes -= size
            if first:
                resp.first_batch_id = batch_id
                first = False
            resp.last_batch_id = batch_id
            if isinstance(codes, BookieError):
                self._entries_failed += n
                resp.failures.add(
                    batch_id=batch_id, status=codes.code, message=str(codes), whole_batch=True
                )
            elif len(codes) != n:
                self._entries_failed += n
                resp.failures.add(batch_id=batch_id, status=StatusCode.IO_ERROR, whole_batch=True)
            elif any(codes):
                for i, c in enumerate(codes):
                    if c:
                        self._entries_failed += 1
                        resp.failures.add(batch_id=batch_id, index=i, status=c)
        state.space.set()
        self._responses += 1
        return resp

    # -- reads ------------------------------------------------------------------------------

    async def Read(
        self, request: pb.ReadRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadResponse:
        self._reads += 1
        if request.background and not request.long_poll:
            work = self.background.run(lambda: self._read(request), _answer_bytes)
            return await _answer("read", work, _read_error)
        return await _answer("read", self._read(request), _read_error)

    async def _read(self, request: pb.ReadRequest) -> pb.ReadResponse:
        lid = request.ledger_id
        if lid < 0:
            raise _bad(f"invalid ledger id {lid}")
        if request.long_poll:
            return await self._long_poll(lid, request)
        first, last = request.first_entry_id, request.last_entry_id
        if first < NO_ENTRY_ID:
            raise _bad(f"invalid entry id {first}")
        if request.packed and first >= 0:
            return await self._read_packed(lid, first, max(first, last), request.max_bytes)
        if last <= first:
            entry = await self.storage.read_entry(lid, first)
            self._read_bytes += len(entry.payload)
            return pb.ReadResponse(status=0, entries=[_entry_pb(entry)], lac=NO_ENTRY_ID)
        if first < 0:
            raise _bad("a range read needs first_entry_id >= 0")
        max_bytes = request.max_bytes if request.max_bytes > 0 else READ_BYTES_MAX
        max_bytes = min(max_bytes, READ_BYTES_MAX)
        entries = await self.storage.read_range(lid, first, last, max_bytes)
        self._read_bytes += sum(len(e.payload) for e in entries)
        return pb.ReadResponse(status=0, entries=[_entry_pb(e) for e in entries], lac=NO_ENTRY_ID)

    async def _read_packed(
        self, lid: int, first: int, last: int, max_bytes: int
    ) -> pb.ReadResponse:
        """Entries first..last in one buffer (``ReadResponse.packed``): no message per entry;
        each entry's checksum is the reader's to verify."""
        limit = min(max_bytes if max_bytes > 0 else READ_BYTES_MAX, READ_BYTES_MAX)
        parts, _count = await self.storage.read_packed(lid, first, last, limit)
        packed = b"".join(parts)
        self._read_bytes += len(packed)
        return pb.ReadResponse(status=0, packed=packed, lac=NO_ENTRY_ID)

    async def _long_poll(self, lid: int, request: pb.ReadRequest) -> pb.ReadResponse:
        timeout_ms = min(max(0, request.timeout_ms), LONG_POLL_MS_MAX)
        prev = request.previous_lac
        lac = await self.storage.wait_for_lac(lid, prev, timeout_ms)
        resp = pb.ReadResponse(status=0, lac=lac)
        if lac > prev:
            try:
                entry = await self.storage.read_entry(lid, prev + 1)
                resp.entries.append(_entry_pb(entry))
                self._read_bytes += len(entry.payload)
            except NoEntry:
                pass
        return resp

    async def ReadLac(
        self, request: pb.LedgerRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadLacResponse:
        return await _answer("read_lac", self._read_lac(request), _read_lac_error)

    async def _read_lac(self, request: pb.LedgerRequest) -> pb.ReadLacResponse:
        if request.ledger_id < 0:
            raise _bad(f"invalid ledger id {request.ledger_id}")
        return pb.ReadLacResponse(status=0, lac=self.storage.read_lac(request.ledger_id))

    # -- ledger ops -------------------------------------------------------------------------

    async def Fence(
        self, request: pb.FenceRequest, context: grpc.aio.ServicerContext
    ) -> pb.FenceResponse:
        return await _answer("fence", self._fence(request), _fence_error)

    async def _fence(self, request: pb.FenceRequest) -> pb.FenceResponse:
        if request.ledger_id < 0 or len(request.master_key) > MASTER_KEY_BYTES_MAX:
            raise _bad("invalid fence request")
        last = await self.storage.fence(request.ledger_id, request.master_key)
        return pb.FenceResponse(status=0, last_entry_id=last)

    async def WriteLac(
        self, request: pb.WriteLacRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        return await _answer("write_lac", self._write_lac(request), _status_error)

    async def _write_lac(self, request: pb.WriteLacRequest) -> pb.StatusResponse:
        if request.ledger_id < 0 or len(request.master_key) > MASTER_KEY_BYTES_MAX:
            raise _bad("invalid write-lac request")
        if request.lac < NO_ENTRY_ID:
            raise _bad(f"invalid lac {request.lac}")
        await self.storage.write_lac(request.ledger_id, request.master_key, request.lac)
        return pb.StatusResponse(status=0)

    async def ForceLedger(
        self, request: pb.LedgerRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        return await _answer("force_ledger", self._force_ledger(request), _status_error)

    async def _force_ledger(self, request: pb.LedgerRequest) -> pb.StatusResponse:
        if request.ledger_id < 0:
            raise _bad(f"invalid ledger id {request.ledger_id}")
        await self.storage.force_ledger(request.ledger_id)
        return pb.StatusResponse(status=0)

    async def Health(
        self, request: pb.HealthRequest, context: grpc.aio.ServicerContext
    ) -> pb.HealthResponse:
        return await _answer("health check", self._health(), _health_error)

    async def _health(self) -> pb.HealthResponse:
        info = self.storage.info()
        return pb.HealthResponse(
            serving=self.ready and self.accepting,
            read_only=info.read_only,
            bookie_id=info.bookie_id,
        )

    async def Info(
        self, request: pb.InfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.InfoResponse:
        return await _answer("info", self._info(), _info_error)

    async def _info(self) -> pb.InfoResponse:
        info = self.storage.info()
        return pb.InfoResponse(
            status=0,
            bookie_id=info.bookie_id,
            read_only=info.read_only or not self.accepting,
            total_disk_bytes=info.total_disk_bytes,
            free_disk_bytes=info.free_disk_bytes,
            journal_lag_bytes=info.journal_lag_bytes,
        )


Reply = TypeVar("Reply")


async def _answer(what: str, work: Awaitable[Reply], error: Callable[[int, str], Reply]) -> Reply:
    """The one place a handler's exceptions become a status: a ``BookieError`` answers with
    its code, anything else with ``IO_ERROR`` (and a log line); nothing escapes."""
    try:
        return await work
    except BookieError as exc:
        return error(exc.code, str(exc))
    except Exception as exc:
        log.exception("%s failed", what)
        return error(StatusCode.IO_ERROR, repr(exc))


def _answer_bytes(resp: pb.ReadResponse) -> int:
    return len(resp.packed) + sum(len(e.payload) for e in resp.entries)


def _read_error(code: int, message: str) -> pb.ReadResponse:
    return pb.ReadResponse(status=code, message=message, lac=NO_ENTRY_ID)


def _read_lac_error(code: int, message: str) -> pb.ReadLacResponse:
    return pb.ReadLacResponse(status=code, message=message, lac=NO_ENTRY_ID)


def _fence_error(code: int, message: str) -> pb.FenceResponse:
    return pb.FenceResponse(status=code, message=message, last_entry_id=NO_ENTRY_ID)


def _status_error(code: int, message: str) -> pb.StatusResponse:
    return pb.StatusResponse(status=code, message=message)


def _health_error(code: int, message: str) -> pb.HealthResponse:
    return pb.HealthResponse(serving=False)


def _info_error(code: int, message: str) -> pb.InfoResponse:
    return pb.InfoResponse(status=code, message=message)


def _bad(message: str) -> BookieError:
    return BadRequest(message)


def add_service(service: BookieService, server: grpc.aio.Server) -> None:
    """``add_BookieServicer_to_server``, except that ``Add`` takes its requests as raw bytes
    (``request_deserializer=None``): a protobuf parse would copy every payload twice."""
    generated = pb_grpc.add_BookieServicer_to_server
    captured: list[Any] = []

    class _Capture:
        def add_generic_rpc_handlers(self, handlers: Any) -> None:
            captured.extend(handlers)

        def add_registered_method_handlers(self, name: str, handlers: Any) -> None:
            captured.append((name, handlers))

    generated(service, _Capture())  # type: ignore[arg-type]
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for item in captured:
        if isinstance(item, tuple):
            handlers = dict(item[1])
    if "Add" not in handlers:
        raise RuntimeError("generated Bookie service has no Add method")
    handlers["Add"] = grpc.stream_stream_rpc_method_handler(
        service.Add,
        request_deserializer=None,
        response_serializer=pb.AddResponse.SerializeToString,
    )
    name = "magnetar.bookie.v1.Bookie"
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
    server.add_registered_method_handlers(name, handlers)  # type: ignore[attr-defined]


class BookieServer:
    """A grpc.aio server serving one ``BookieService`` on ``host:port`` (0 = pick one)."""

    def __init__(
        self,
        service: BookieService,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls: GrpcTls | None = None,
    ) -> None:
        """``tls``: serve gRPC over TLS (optionally requiring client certificates)."""
        self.service = service
        self.tls = tls
        self.host = host
        self._requested_port = port
        self.port = 0
        self._server: grpc.aio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        roles = self.tls.authorized_roles if self.tls is not None else ()
        # (an earlier note blamed an empty interceptor list for stalled hand-overs; the
        # chaos hand-over test passes with one, and grpc treats [] as none: the stall was
        # the closing-topic SUBSCRIBE race fixed in the broker)
        server = grpc.aio.server(
            options=GRPC_OPTIONS, interceptors=[RoleCheck(roles)] if roles else None
        )
        add_service(self.service, server)
        bind = f"{self.host}:{self._requested_port}"
        if self.tls is not None:
            port = server.add_secure_port(bind, self.tls.server_credentials())
        else:
            port = server.add_insecure_port(bind)
        if port == 0:
            raise OSError(f"cannot bind {self.host}:{self._requested_port}")
        self.port = port
        await server.start()
        self._server = server
        log.info("bookie service listening address=%s", self.address)

    async def stop(self, grace_s: float | None = 5.0) -> None:
        """Stop accepting new RPCs; in-flight ones get ``grace_s`` to finish."""
        if self._server is None:
            return
        server, self._server = self._server, None
        await server.stop(grace_s)

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


__all__ = [
    "ENTRY_BYTES_MAX",
    "GRPC_OPTIONS",
    "MESSAGE_BYTES_MAX",
    "READ_BYTES_MAX",
    "AddStreamState",
    "BookieServer",
    "BookieService",
    "ServiceStatistics",
]
