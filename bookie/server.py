"""The bookie's gRPC service: the network face of a ``BookieStorage``.

Owns: ``BookieService`` (the ``magnetar.bookie.v1.Bookie`` servicer) and ``BookieServer``
(a grpc.aio server bound to one address). Translates protobuf messages to the value types of
``api.py`` and ``BookieError`` to status codes; never lets an exception escape a handler
(a bad request gets ``BAD_REQUEST``; an unexpected failure gets ``IO_ERROR`` and a log line).
Must not know: how storage works (journal, caches, index), metadata, registration.

Add stream (one per client connection), pipelined:
- a reader task takes ``AddBatch`` messages off the stream, hands each batch to
  ``storage.submit_batch`` (the engine takes the protobuf entries as they are and reports the
  batch's bytes) or else ``storage.add_entries`` (synchronous validation + journal enqueue),
  and queues the returned awaitable; it stops reading while ``max_inflight_batches`` /
  ``max_inflight_bytes`` are pending (back-pressure reaches the client through gRPC flow
  control);
- the writer awaits the queued batches strictly in order and, once the head is done, also
  takes every following batch that is already done, answering them in one ``AddResponse``
  (OK is implicit; only failures are listed).
Invariant: acks of one stream are sent in batch order; every received batch is answered
unless the stream itself dies.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from magnetar.bookie.api import NO_ENTRY_ID, AddRequest, BookieStorage, Entry
from magnetar.bookie.errors import BookieError, NoEntry, StatusCode
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.proto import bookie_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

MAX_ENTRY_BYTES = 5 * 1024 * 1024 + 64 * 1024
"""Largest payload accepted (Pulsar's 5 MiB max message plus metadata headroom)."""

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""gRPC message limit, both ways: one maximal entry or a full batch, plus framing."""

MAX_READ_BYTES = 16 * 1024 * 1024
"""Range reads are cut at this many payload bytes (at least one entry is returned)."""

MAX_LONG_POLL_MS = 60_000
MAX_MASTER_KEY_BYTES = 1024

GRPC_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
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


_new_object = object.__new__
_SLOTS = ("ledger_id", "entry_id", "lac", "crc32c", "payload", "master_key", "recovery")
assert AddRequest.__slots__ == _SLOTS, "keep _new_add_request in step with AddRequest"
_set_lid, _set_eid, _set_lac, _set_crc, _set_payload, _set_key, _set_recovery = (
    AddRequest.__dict__[name].__set__ for name in _SLOTS
)


def _new_add_request(  # noqa: PLR0917 (mirrors the positional AddRequest constructor)
    ledger_id: int,
    entry_id: int,
    lac: int,
    crc: int,
    payload: bytes,
    master_key: bytes,
    recovery: bool,
) -> AddRequest:
    """``AddRequest(...)`` without the frozen dataclass ``__init__`` (a third cheaper: this
    runs once per received entry). Equal to the normal constructor's result."""
    r: AddRequest = _new_object(AddRequest)
    _set_lid(r, ledger_id)
    _set_eid(r, entry_id)
    _set_lac(r, lac)
    _set_crc(r, crc)
    _set_payload(r, payload)
    _set_key(r, master_key)
    _set_recovery(r, recovery)
    return r


def _entry_pb(entry: Entry) -> pb.Entry:
    return pb.Entry(
        ledger_id=entry.ledger_id,
        entry_id=entry.entry_id,
        lac=entry.lac,
        crc32c=entry.crc32c,
        payload=entry.payload,
    )


class _AddStream:
    """State of one Add stream: ordered queue of in-flight batches."""

    __slots__ = ("inflight_bytes", "pending", "reading_done", "space", "wake")

    def __init__(self) -> None:
        # (batch_id, entry count, size in bytes, future of per-entry codes)
        self.pending: collections.deque[
            tuple[int, int, int, asyncio.Future[list[int]] | list[int]]
        ] = collections.deque()
        self.wake = asyncio.Event()
        self.space = asyncio.Event()
        self.space.set()
        self.reading_done = False
        self.inflight_bytes = 0


class BookieService(pb_grpc.BookieServicer):
    """Serves one ``BookieStorage`` over gRPC."""

    def __init__(
        self,
        storage: BookieStorage,
        *,
        max_entry_bytes: int = MAX_ENTRY_BYTES,
        max_inflight_batches: int = 512,
        max_inflight_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.storage = storage
        # Fast path: an engine that takes the gRPC entries as they are (``AddEntryLike``:
        # AddRequest's attribute names, empty master_key = the batch's) needs no per-entry
        # AddRequest; it validates sizes, keys, fences and checksums itself.
        # ``submit_batch`` also returns the batch's bytes (for the in-flight bound), so the
        # message is never sized here (upb's ``ByteSize`` serialises the whole message).
        submit = getattr(storage, "submit_batch", None)
        self._submit_batch: Callable[[Any, bytes], tuple[Awaitable[list[int]], int]] | None = (
            submit if callable(submit) else None
        )
        self.max_entry_bytes = max_entry_bytes
        self.max_inflight_batches = max_inflight_batches
        self.max_inflight_bytes = max_inflight_bytes
        self._streams_open = 0
        self._batches = 0
        self._entries = 0
        self._entries_failed = 0
        self._responses = 0
        self._reads = 0
        self._bad_requests = 0
        self.accepting = True
        # Health answers serving=False until the process finished starting (registration).
        self.ready = True
        self._draining = False
        self._streams: set[_AddStream] = set()

    def begin_shutdown(self) -> None:
        """Refuse new adds (READ_ONLY) and end every Add stream once its in-flight batches
        are answered, so a graceful server stop does not wait for idle streams."""
        self.accepting = False
        self._draining = True
        for state in self._streams:
            state.wake.set()

    def statistics(self) -> ServiceStatistics:
        return ServiceStatistics(
            add_streams_open=self._streams_open,
            add_batches_received=self._batches,
            add_entries_received=self._entries,
            add_entries_failed=self._entries_failed,
            add_responses_sent=self._responses,
            reads=self._reads,
            bad_requests=self._bad_requests,
        )

    # -- Add --------------------------------------------------------------------------------

    def _submit(self, batch: pb.AddBatch) -> tuple[asyncio.Future[list[int]] | list[int], int]:
        """Validate and hand one batch to storage; returns (codes or their future, bytes)."""
        entries = batch.entries
        n = len(entries)
        submit = self._submit_batch
        if submit is not None and self.accepting and n:
            # The engine validates every entry (ids, keys, fences, sizes, checksums).
            try:
                awaitable, size = submit(entries, batch.master_key)
                return asyncio.ensure_future(awaitable), size
            except BookieError as exc:
                return [int(exc.code)] * n, 0
            except Exception:
                log.exception("add_batch failed")
                return [int(StatusCode.IO_ERROR)] * n, 0
        shared_key = batch.master_key
        max_entry = self.max_entry_bytes
        requests: list[AddRequest] = []
        append = requests.append
        make = _new_add_request
        # Entries refused here are answered without reaching storage.
        early: dict[int, int] = {}
        size = 0
        accepting = self.accepting
        for i, e in enumerate(entries):
            payload = e.payload
            plen = len(payload)
            size += plen
            lid = e.ledger_id
            eid = e.entry_id
            key = e.master_key or shared_key
            if lid < 0 or eid < 0 or len(key) > MAX_MASTER_KEY_BYTES:
                early[i] = StatusCode.BAD_REQUEST
            elif plen > max_entry:
                early[i] = StatusCode.ENTRY_TOO_LARGE
            elif not accepting:
                early[i] = StatusCode.READ_ONLY
            else:
                append(make(lid, eid, e.lac, e.crc32c, payload, key, e.recovery))
        if early:
            self._bad_requests += sum(1 for c in early.values() if c != StatusCode.READ_ONLY)
        if not requests:
            return [int(early.get(i, StatusCode.BAD_REQUEST)) for i in range(n)], size
        try:
            awaitable = self.storage.add_entries(requests)
            fut = asyncio.ensure_future(awaitable)
        except BookieError as exc:
            return [int(early.get(i, exc.code)) for i in range(n)], size
        except Exception:
            log.exception("add_entries failed")
            return [int(early.get(i, StatusCode.IO_ERROR)) for i in range(n)], size
        if not early:
            return fut, size
        return asyncio.ensure_future(_merge_codes(fut, early, n)), size

    async def _read_adds(
        self, request_iterator: AsyncIterator[pb.AddBatch], state: _AddStream
    ) -> None:
        try:
            async for batch in request_iterator:
                while (
                    len(state.pending) >= self.max_inflight_batches
                    or state.inflight_bytes >= self.max_inflight_bytes
                ):
                    state.space.clear()
                    await state.space.wait()
                self._batches += 1
                self._entries += len(batch.entries)
                codes, size = self._submit(batch)
                state.pending.append((batch.batch_id, len(batch.entries), size, codes))
                state.inflight_bytes += size
                state.wake.set()
        finally:
            state.reading_done = True
            state.wake.set()

    async def Add(
        self, request_iterator: AsyncIterator[pb.AddBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AddResponse]:
        state = _AddStream()
        self._streams_open += 1
        self._streams.add(state)
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
                if not isinstance(head, list) and not head.done():
                    try:
                        await asyncio.shield(head)
                    except Exception:
                        pass
                yield self._drain_done(state)
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                exc = reader.exception()
                log.debug("add stream ended: %r", exc)
        finally:
            self._streams_open -= 1
            self._streams.discard(state)
            reader.cancel()

    def _drain_done(self, state: _AddStream) -> pb.AddResponse:
        """Pop the head and every following finished batch into one response."""
        resp = pb.AddResponse()
        first = True
        pending = state.pending
        while pending:
            batch_id, n, size, codes_or_fut = pending[0]
            if isinstance(codes_or_fut, list):
                codes = codes_or_fut
            elif codes_or_fut.done():
                exc = codes_or_fut.exception()
                if exc is None:
                    codes = codes_or_fut.result()
                else:
                    code = exc.code if isinstance(exc, BookieError) else StatusCode.IO_ERROR
                    if not isinstance(exc, BookieError):
                        log.error("add batch failed: %r", exc)
                    codes = [int(code)] * n
            else:
                break
            pending.popleft()
            state.inflight_bytes -= size
            if first:
                resp.first_batch_id = batch_id
                first = False
            resp.last_batch_id = batch_id
            if len(codes) != n:
                codes = [int(StatusCode.IO_ERROR)] * n
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
        try:
            lid = request.ledger_id
            if lid < 0:
                raise _bad(f"invalid ledger id {lid}")
            if request.long_poll:
                timeout_ms = min(max(0, request.timeout_ms), MAX_LONG_POLL_MS)
                prev = request.previous_lac
                lac = await self.storage.wait_for_lac(lid, prev, timeout_ms)
                resp = pb.ReadResponse(status=0, lac=lac)
                if lac > prev:
                    try:
                        entry = await self.storage.read_entry(lid, prev + 1)
                        resp.entries.append(_entry_pb(entry))
                    except NoEntry:
                        pass
                return resp
            first, last = request.first_entry_id, request.last_entry_id
            if first < NO_ENTRY_ID:
                raise _bad(f"invalid entry id {first}")
            if last <= first:
                entry = await self.storage.read_entry(lid, first)
                return pb.ReadResponse(status=0, entries=[_entry_pb(entry)], lac=NO_ENTRY_ID)
            if first < 0:
                raise _bad("a range read needs first_entry_id >= 0")
            max_bytes = request.max_bytes if request.max_bytes > 0 else MAX_READ_BYTES
            max_bytes = min(max_bytes, MAX_READ_BYTES)
            entries = await self.storage.read_range(lid, first, last, max_bytes)
            return pb.ReadResponse(
                status=0, entries=[_entry_pb(e) for e in entries], lac=NO_ENTRY_ID
            )
        except BookieError as exc:
            return pb.ReadResponse(status=exc.code, message=str(exc), lac=NO_ENTRY_ID)
        except Exception as exc:
            log.exception("read failed")
            return pb.ReadResponse(status=StatusCode.IO_ERROR, message=repr(exc), lac=-1)

    async def ReadLac(
        self, request: pb.LedgerRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadLacResponse:
        try:
            if request.ledger_id < 0:
                raise _bad(f"invalid ledger id {request.ledger_id}")
            return pb.ReadLacResponse(status=0, lac=self.storage.read_lac(request.ledger_id))
        except BookieError as exc:
            return pb.ReadLacResponse(status=exc.code, message=str(exc), lac=NO_ENTRY_ID)
        except Exception as exc:
            log.exception("read_lac failed")
            return pb.ReadLacResponse(status=StatusCode.IO_ERROR, message=repr(exc), lac=-1)

    # -- ledger ops -------------------------------------------------------------------------

    async def Fence(
        self, request: pb.FenceRequest, context: grpc.aio.ServicerContext
    ) -> pb.FenceResponse:
        try:
            if request.ledger_id < 0 or len(request.master_key) > MAX_MASTER_KEY_BYTES:
                raise _bad("invalid fence request")
            last = await self.storage.fence(request.ledger_id, request.master_key)
            return pb.FenceResponse(status=0, last_entry_id=last)
        except BookieError as exc:
            return pb.FenceResponse(status=exc.code, message=str(exc), last_entry_id=-1)
        except Exception as exc:
            log.exception("fence failed")
            return pb.FenceResponse(status=StatusCode.IO_ERROR, message=repr(exc))

    async def WriteLac(
        self, request: pb.WriteLacRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        try:
            if request.ledger_id < 0 or len(request.master_key) > MAX_MASTER_KEY_BYTES:
                raise _bad("invalid write-lac request")
            if request.lac < NO_ENTRY_ID:
                raise _bad(f"invalid lac {request.lac}")
            await self.storage.write_lac(request.ledger_id, request.master_key, request.lac)
            return pb.StatusResponse(status=0)
        except BookieError as exc:
            return pb.StatusResponse(status=exc.code, message=str(exc))
        except Exception as exc:
            log.exception("write_lac failed")
            return pb.StatusResponse(status=StatusCode.IO_ERROR, message=repr(exc))

    async def ForceLedger(
        self, request: pb.LedgerRequest, context: grpc.aio.ServicerContext
    ) -> pb.StatusResponse:
        try:
            if request.ledger_id < 0:
                raise _bad(f"invalid ledger id {request.ledger_id}")
            await self.storage.force_ledger(request.ledger_id)
            return pb.StatusResponse(status=0)
        except BookieError as exc:
            return pb.StatusResponse(status=exc.code, message=str(exc))
        except Exception as exc:
            log.exception("force_ledger failed")
            return pb.StatusResponse(status=StatusCode.IO_ERROR, message=repr(exc))

    async def Health(
        self, request: pb.HealthRequest, context: grpc.aio.ServicerContext
    ) -> pb.HealthResponse:
        try:
            info = self.storage.info()
            return pb.HealthResponse(
                serving=self.ready and self.accepting,
                read_only=info.read_only,
                bookie_id=info.bookie_id,
            )
        except Exception:
            log.exception("health check failed")
            return pb.HealthResponse(serving=False)

    async def Info(
        self, request: pb.InfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.InfoResponse:
        try:
            info = self.storage.info()
            return pb.InfoResponse(
                status=0,
                bookie_id=info.bookie_id,
                read_only=info.read_only or not self.accepting,
                total_disk_bytes=info.total_disk_bytes,
                free_disk_bytes=info.free_disk_bytes,
                journal_lag_bytes=info.journal_lag_bytes,
            )
        except Exception as exc:
            log.exception("info failed")
            return pb.InfoResponse(status=StatusCode.IO_ERROR, message=repr(exc))


async def _merge_codes(fut: Awaitable[list[int]], early: dict[int, int], n: int) -> list[int]:
    """Interleave storage's codes (for the accepted entries) with the early refusals."""
    codes = iter(await fut)
    return [early[i] if i in early else next(codes) for i in range(n)]


def _bad(message: str) -> BookieError:
    from magnetar.bookie.errors import BadRequest

    return BadRequest(message)


class BookieServer:
    """A grpc.aio server serving one ``BookieService`` on ``host:port`` (0 = pick one)."""

    def __init__(self, service: BookieService, host: str = "127.0.0.1", port: int = 0) -> None:
        self.service = service
        self.host = host
        self._requested_port = port
        self.port = 0
        self._server: grpc.aio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        server = grpc.aio.server(options=GRPC_OPTIONS)
        pb_grpc.add_BookieServicer_to_server(self.service, server)
        port = server.add_insecure_port(f"{self.host}:{self._requested_port}")
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
    "GRPC_OPTIONS",
    "MAX_ENTRY_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_READ_BYTES",
    "BookieServer",
    "BookieService",
    "ServiceStatistics",
]
