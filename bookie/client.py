"""``BookieClient``: one remote bookie over gRPC, as the broker's ledger layer uses it.

Adds travel over the bookie's fast add port instead (``add_address``: a plain TCP connection
carrying the same messages, framing in ``add_frames.py``, server in ``fast_add.py``) when the
bookie announces one; everything else, and adds to bookies without one, over gRPC.

Owns: the channel to one bookie, its long-lived ``Add`` stream, batching of adds into
``AddBatch`` messages, matching batched acks to the futures of the ``add``/``add_batch``
calls, translation of gRPC failures into ``magnetar.bookie.errors`` types, and checksum
verification of what it reads.
Must not know: ledgers' ensembles, quorums or metadata (that is ``broker/bookkeeper``).

Batching (the accumulator is separate from the sender, as in aiokafka): ``add`` is not a
coroutine; it appends the entry to the current stream's queue and wakes the sender task,
which runs on a later loop iteration, so every add issued in the same iteration (and every
add issued while the previous message was being written) travels in one message, up to
``max_batch_entries`` / ``max_batch_bytes``.

Per-entry cost (the broker pays it once per entry and bookie): ``add_batch`` takes many
entries of one ledger with one future (no request object or future per entry) and packs
them once into the layout of ``AddBatch.packed`` (``wire.py``: a 32-byte struct header per
entry, then the payload; no protobuf message per entry); the same entry sequence sent to
several bookies (a write quorum) is packed once (``encode_entries``). A message is the
hand-written ``AddBatch`` header (batch id, master key, recovery, packed's length) followed by
the packed parts of its chunks, joined once: the only client-side copy of a payload.

Invariants: futures resolve in the order their adds were issued (acks are in batch order and
batches are sent in order); when a stream breaks, every add queued or in flight on it fails
with ``BookieUnavailable`` (or ``BookieTimeout``) and the next ``add`` opens a new stream;
a read result is returned only if each entry's crc32c matches its payload (``CorruptEntry``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar

import crc32c
import grpc
from google.protobuf.message import DecodeError

from magnetar.bookie.add_frames import (
    KIND_ERROR,
    MAGIC,
    FrameError,
    FrameReader,
)
from magnetar.bookie.add_frames import LENGTH as _FRAME_LENGTH
from magnetar.bookie.api import NO_ENTRY_ID, AddRequest, BookieInfo, Entry, EntryRun, EntryToAdd
from magnetar.bookie.errors import (
    BadRequest,
    BookieError,
    BookieTimeout,
    BookieUnavailable,
    CorruptEntry,
    StatusCode,
    TooManyRequests,
    Unauthorized,
)
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.proto import bookie_pb2_grpc as pb_grpc
from magnetar.bookie.tls import GrpcTls
from magnetar.bookie.wire import (
    ENTRY_HEADER,
    ENTRY_HEADER_LEN,
    MalformedBatch,
    pack_entries,
    run_spans,
)
from magnetar.clock import Clock, SystemClock

log = logging.getLogger(__name__)

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", 32 * 1024 * 1024),
    ("grpc.max_send_message_length", 32 * 1024 * 1024),
    ("grpc.http2.lookahead_bytes", 8 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Reconnect promptly after a bookie restart.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BookieClientStatistics:
    address: str
    adds_queued: int
    adds_inflight: int
    batches_sent: int
    entries_sent: int
    acks_received: int
    streams_opened: int
    stream_failures: int
    fast_add_streams_opened: int = 0
    """Add streams opened over the bookie's fast add transport (the others: gRPC)."""


AddEntryLike = EntryToAdd
"""What ``add_batch`` reads of each entry (``api.EntryToAdd``; the old name stays)."""


ADD_METHOD = "/magnetar.bookie.v1.Bookie/Add"

_encoded: tuple[object, int, list[bytes], int] | None = None
"""The last sequence encoded by ``encode_entries`` (a single slot: when a writer sends the
same entries to its Qw bookies, they are encoded once)."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_pack_header = ENTRY_HEADER.pack


def encode_entries(ledger_id: int, entries: Sequence[AddEntryLike]) -> tuple[list[bytes], int]:
    """(parts, bytes) of ``entries`` in the packed layout of ``AddBatch.packed``
    (``magnetar.bookie.wire``): header, payload, header, payload, ... The parts are joined
    once, into the message, when it is sent. The same (unchanged) sequence object passed again
    is not encoded again (a write quorum's bookies share one encoding)."""
    global _encoded
    last = _encoded
    if last is not None and last[0] is entries and last[1] == ledger_id:
        return last[2], last[3]
    parts, nbytes = pack_entries(ledger_id, entries)
    _encoded = (entries, ledger_id, parts, nbytes)
    return parts, nbytes


def encode_batch_header(
    batch_id: int, master_key: bytes, recovery: bool, packed_bytes: int
) -> bytes:
    """The ``AddBatch`` fields before ``packed``'s value: batch_id (1), master_key (2),
    recovery (5), and the tag and length of packed (4). Protobuf accepts fields in any order,
    so ``header + packed`` is the whole message (a test checks it against the runtime)."""
    out = [b"\x08", _varint(batch_id)]
    if master_key:
        out += [b"\x12", _varint(len(master_key)), master_key]
    if recovery:
        out.append(b"\x28\x01")
    out += [b"\x22", _varint(packed_bytes)]
    return b"".join(out)


class _Chunk:
    """The entries of one ``add``/``add_batch`` call: packed parts, and one future for them."""

    __slots__ = ("count", "future", "master_key", "nbytes", "parts", "recovery")

    def __init__(  # noqa: PLR0917 (one per add call; positional is cheapest)
        self,
        parts: list[bytes],
        nbytes: int,
        count: int,
        master_key: bytes,
        recovery: bool,
        future: asyncio.Future[None],
    ) -> None:
        self.parts = parts
        self.nbytes = nbytes
        self.count = count
        self.master_key = master_key
        self.recovery = recovery
        self.future = future


class _Stream:
    """One Add stream: queued adds, in-flight batches, its sender and receiver tasks."""

    def __init__(self, owner: BookieClient, call: Any) -> None:
        self.owner = owner
        self.call = call
        self.loop = asyncio.get_running_loop()
        self.queue: collections.deque[_Chunk] = collections.deque()
        self.queued_entries = 0
        self.queued_bytes = 0
        # (batch_id, chunks in entry order, send time ms)
        self.inflight: collections.deque[tuple[int, list[_Chunk], float]] = collections.deque()
        self.inflight_entries = 0
        self.next_batch_id = 1
        self.wake = asyncio.Event()
        self.broken: BookieError | None = None
        self.sender = asyncio.create_task(self._send_loop(), name=f"bookie-add-send {owner}")
        if isinstance(call, _FastAddCall):
            # responses are handled as they arrive (no reader task); the task waits for the end
            call.on_response = self._on_response
            receiver = self._await_end(call)
        else:
            receiver = self._recv_loop()
        self.receiver = asyncio.create_task(receiver, name=f"bookie-add-recv {owner}")

    # -- sending ----------------------------------------------------------------------------

    def _build(self) -> bytes:
        """The next ``AddBatch`` message (wire bytes): whole chunks sharing one master key and
        recovery flag, up to ``max_batch_entries`` / ``max_batch_bytes`` (a bigger chunk
        travels alone). Payloads are copied once, into the message."""
        owner = self.owner
        max_entries = owner.max_batch_entries
        max_bytes = owner.max_batch_bytes
        queue = self.queue
        first = queue.popleft()
        key = first.master_key
        recovery = first.recovery
        chunks = [first]
        count = first.count
        size = first.nbytes
        while queue:
            chunk = queue[0]
            n = chunk.nbytes
            if (
                chunk.master_key != key
                or chunk.recovery != recovery
                or count + chunk.count > max_entries
                or size + n > max_bytes
            ):
                break
            queue.popleft()
            chunks.append(chunk)
            count += chunk.count
            size += n
        batch_id = self.next_batch_id
        self.next_batch_id += 1
        self.queued_entries -= count
        self.queued_bytes -= size
        self.inflight.append((batch_id, chunks, owner.clock.monotonic_ms()))
        self.inflight_entries += count
        owner._batches_sent += 1
        owner._entries_sent += count
        header = encode_batch_header(batch_id, key, recovery, size)
        if len(chunks) == 1:
            return b"".join([header, *first.parts])
        return b"".join(chain([header], *[c.parts for c in chunks]))

    async def _send_loop(self) -> None:
        try:
            while self.broken is None:
                if not self.queue:
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                await self.call.write(self._build())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.fail(_translate(exc))

    # -- receiving --------------------------------------------------------------------------

    async def _recv_loop(self) -> None:
        try:
            while True:
                resp = await self.call.read()
                if resp is grpc.aio.EOF:  # type: ignore[attr-defined]
                    self.fail(BookieUnavailable(f"bookie {self.owner.address} closed the stream"))
                    return
                self._on_response(resp)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.fail(_translate(exc))

    async def _await_end(self, call: _FastAddCall) -> None:
        self.fail(await call.ended)

    def _on_response(self, resp: pb.AddResponse) -> None:
        last = resp.last_batch_id
        inflight = self.inflight
        failures = resp.failures
        acked = 0
        while inflight and inflight[0][0] <= last:
            batch_id, chunks, _ = inflight.popleft()
            count = 0
            for chunk in chunks:
                count += chunk.count
            self.inflight_entries -= count
            acked += count
            if failures:
                mine = [f for f in failures if f.batch_id == batch_id]
                if mine:
                    _fail_chunks(chunks, mine)
                    continue
            for chunk in chunks:
                fut = chunk.future
                if not fut.done():
                    fut.set_result(None)
        self.owner._acks += acked

    # -- failure ----------------------------------------------------------------------------

    def fail(self, error: BookieError) -> None:
        """Break the stream: fail every queued and in-flight add with ``error`` (except when
        the fast add port could not be reached: nothing was sent, they move to gRPC)."""
        if self.broken is not None:
            return
        self.broken = error
        self.owner._on_stream_failed(self.call)
        if self.owner._stream is self:
            self.owner._stream = None
        call = self.call
        if isinstance(call, _FastAddCall) and call.connect_failed and not self.owner._closed:
            # no byte reached the bookie: the same adds, in the same order, over gRPC
            chunks = [c for _, cs, _ in self.inflight for c in cs]
            chunks.extend(self.queue)
            self.inflight.clear()
            self.queue.clear()
            self.inflight_entries = self.queued_entries = self.queued_bytes = 0
            self.owner._requeue(chunks)
        count = 0
        for _, chunks, _ in self.inflight:
            for chunk in chunks:
                if not chunk.future.done():
                    chunk.future.set_exception(type(error)(str(error)))
                    count += chunk.count
        self.inflight.clear()
        self.inflight_entries = 0
        for chunk in self.queue:
            if not chunk.future.done():
                chunk.future.set_exception(type(error)(str(error)))
                count += chunk.count
        self.queue.clear()
        self.queued_entries = 0
        self.queued_bytes = 0
        if count:
            log.warning(
                "add stream failed bookie=%s failed_adds=%d error=%r",
                self.owner.address,
                count,
                error,
            )
        self.wake.set()
        self.call.cancel()
        current = asyncio.current_task()
        for task in (self.sender, self.receiver):
            if task is not current:
                task.cancel()

    def oldest_inflight_ms(self) -> float | None:
        if self.inflight:
            return self.inflight[0][2]
        return None


class _FastAddCall(asyncio.Protocol):
    """A connection to the bookie's fast add port (framing: ``add_frames.py``), shaped like
    the gRPC call ``_Stream`` drives: ``write`` (awaits the connection, then flow control),
    ``cancel``; each ``AddResponse`` goes straight to ``on_response`` as it is read (no task
    hop); ``ended`` resolves with the error that ended the connection."""

    def __init__(self, address: str, loop: asyncio.AbstractEventLoop) -> None:
        self.address = address
        self.loop = loop
        self.reader = FrameReader(expect_magic=False, with_kind=True)
        self.on_response: Callable[[pb.AddResponse], None] | None = None
        self.ended: asyncio.Future[BookieError] = loop.create_future()
        self.connect_failed = False
        self.transport: Any = None
        self._writable: asyncio.Future[None] | None = None
        host, _, port = address.rpartition(":")
        self._connecting = asyncio.ensure_future(self._connect(host, int(port)))
        # its failure is reported through ``ended``; never an unretrieved task exception
        self._connecting.add_done_callback(_retrieve)

    async def _connect(self, host: str, port: int) -> None:
        try:
            await self.loop.create_connection(lambda: self, host, port)
        except OSError as exc:
            self.connect_failed = True
            err = BookieUnavailable(f"bookie fast add port {self.address} unreachable: {exc}")
            self._end(err)
            raise err from None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.transport.write(MAGIC)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.reader.frames(data)
            for kind, body in frames:
                if kind == KIND_ERROR:
                    err = pb.StatusResponse.FromString(body)
                    self._end(
                        BookieError.for_code(
                            err.status, f"bookie ended the fast add connection: {err.message}"
                        )
                    )
                    return
                resp = pb.AddResponse.FromString(body)
                if self.on_response is not None:
                    self.on_response(resp)
        except (FrameError, DecodeError) as exc:
            self._end(BookieUnavailable(f"bookie {self.address} sent a broken frame: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(BookieUnavailable(f"bookie {self.address} closed the fast add connection"))

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _end(self, error: BookieError) -> None:
        if not self.ended.done():
            self.ended.set_result(error)
        if self.transport is not None:
            self.transport.abort()
        self.resume_writing()

    async def write(self, message: bytes) -> None:
        if self.transport is None:
            await self._connecting
        if self.ended.done():
            raise self.ended.result()
        self.transport.writelines((_FRAME_LENGTH.pack(len(message)), message))
        while self._writable is not None:
            await self._writable
            if self.ended.done():
                raise self.ended.result()

    def cancel(self) -> None:
        self._connecting.cancel()
        self._end(BookieUnavailable(f"fast add connection to {self.address} cancelled"))


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _fail_chunks(chunks: list[_Chunk], failures: list[pb.AddFailure]) -> None:
    """A batch with failed entries: each chunk holding one fails (with its Fenced or
    Unauthorized failure if any: those decide what the writer does), the others succeed.
    A ``whole_batch`` failure fails every chunk."""
    whole = next((f for f in failures if f.whole_batch), None)
    if whole is not None:
        for chunk in chunks:
            if not chunk.future.done():
                chunk.future.set_exception(BookieError.for_code(whole.status, whole.message))
        return
    by_index = {f.index: f for f in failures}
    offset = 0
    for chunk in chunks:
        chosen: pb.AddFailure | None = None
        for i in range(offset, offset + chunk.count):
            f = by_index.get(i)
            if f is not None and (
                chosen is None or f.status in (StatusCode.FENCED, StatusCode.UNAUTHORIZED)
            ):
                chosen = f
                if f.status == StatusCode.FENCED:
                    break
        offset += chunk.count
        fut = chunk.future
        if fut.done():
            continue
        if chosen is None:
            fut.set_result(None)
        else:
            fut.set_exception(BookieError.for_code(chosen.status, chosen.message))


class BookieClient:
    """``BookieClientAPI`` over gRPC to the bookie at ``address`` ("host:port")."""

    def __init__(
        self,
        address: str,
        *,
        timeout_ms: int = 10_000,
        add_timeout_ms: int = 30_000,
        max_batch_entries: int = 1_000,
        max_batch_bytes: int = 4 * 1024 * 1024,
        max_pending_adds: int = 200_000,
        clock: Clock | None = None,
        tls: GrpcTls | None = None,
        add_address: str | None = None,
        fast_add_retry_ms: int = 30_000,
        fast_add: bool = True,
        background_reads: bool = False,
    ) -> None:
        """``add_address``: the bookie's fast add port (``host:port``, announced in its
        registration): Add streams use it; when a connection to it cannot be made, the adds
        queued on it (none of which was sent) move to a gRPC stream, and streams use gRPC
        for ``fast_add_retry_ms``. None: adds over the gRPC ``Add`` stream. ``fast_add``
        False (or TLS: the fast add transport is plaintext): never, whatever the address.
        ``background_reads``: range reads are marked ``background`` (they may wait while the
        bookie takes adds: ``bookie/background.py``); for readers that can wait, such as
        offloads."""
        self.background_reads = background_reads
        self._fast_add = fast_add and tls is None
        self._address = address
        self._add_address = add_address if self._fast_add else None
        self.fast_add_retry_ms = fast_add_retry_ms
        self._fast_add_retry_at = 0.0
        self._fast_streams_opened = 0
        self._tls = tls
        self.timeout_ms = timeout_ms
        self.add_timeout_ms = add_timeout_ms
        self.max_batch_entries = max_batch_entries
        self.max_batch_bytes = max_batch_bytes
        self.max_pending_adds = max_pending_adds
        self.clock: Clock = clock or SystemClock()
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.BookieStub | None = None
        self._stream: _Stream | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._closed = False
        self._batches_sent = 0
        self._entries_sent = 0
        self._acks = 0
        self._streams_opened = 0
        self._stream_failures = 0

    def __repr__(self) -> str:
        return f"BookieClient({self._address!r})"

    @property
    def address(self) -> str:
        return self._address

    def statistics(self) -> BookieClientStatistics:
        s = self._stream
        return BookieClientStatistics(
            address=self._address,
            adds_queued=s.queued_entries if s else 0,
            adds_inflight=s.inflight_entries if s else 0,
            batches_sent=self._batches_sent,
            entries_sent=self._entries_sent,
            acks_received=self._acks,
            streams_opened=self._streams_opened,
            stream_failures=self._stream_failures,
            fast_add_streams_opened=self._fast_streams_opened,
        )

    def _get_stub(self) -> pb_grpc.BookieStub:
        if self._closed:
            raise BookieUnavailable(f"client for {self._address} is closed")
        if self._stub is None:
            if self._tls is not None:
                self._channel = grpc.aio.secure_channel(
                    self._address, self._tls.channel_credentials(), options=CHANNEL_OPTIONS
                )
            else:
                self._channel = grpc.aio.insecure_channel(self._address, options=CHANNEL_OPTIONS)
            self._stub = pb_grpc.BookieStub(self._channel)
        return self._stub

    # -- adds -------------------------------------------------------------------------------

    def add(self, request: AddRequest) -> asyncio.Future[None]:
        """Queue one entry; see ``add_batch``."""
        payload = request.payload
        try:
            header = _pack_header(
                request.ledger_id, request.entry_id, request.lac, request.crc32c, len(payload)
            )
        except struct.error as exc:
            return self._failed(BadRequest(f"unencodable add: {exc}"))
        return self._enqueue(
            [header, payload],
            ENTRY_HEADER_LEN + len(payload),
            1,
            request.master_key,
            request.recovery,
        )

    @staticmethod
    def _failed(exc: BookieError) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_exception(exc)
        return fut

    def add_batch(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[AddEntryLike],
        *,
        recovery: bool = False,
    ) -> asyncio.Future[None]:
        """Queue the entries of one ledger; ONE future resolves once the bookie has them all
        durably, or fails with a ``BookieError`` (then none of them should be counted as
        stored: the first Fenced/Unauthorized failure, else the first failure, is raised).
        Not a coroutine: entries queued in the same loop iteration travel in one message.
        Futures resolve in call order. ``entries`` must not change after the call (the same
        sequence sent to several bookies is encoded once)."""
        if not entries:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            fut.set_result(None)
            return fut
        try:
            parts, nbytes = encode_entries(ledger_id, entries)
        except struct.error as exc:
            return self._failed(BadRequest(f"unencodable add: {exc}"))
        return self._enqueue(parts, nbytes, len(entries), master_key, recovery)

    def _enqueue(
        self, parts: list[bytes], nbytes: int, count: int, master_key: bytes, recovery: bool
    ) -> asyncio.Future[None]:
        stream = self._stream
        if stream is None:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            try:
                stream = self._open_stream()
            except BookieError as exc:
                fut.set_exception(exc)
                return fut
        else:
            fut = stream.loop.create_future()
        if stream.queued_entries + stream.inflight_entries >= self.max_pending_adds:
            fut.set_exception(TooManyRequests(f"{self.max_pending_adds} adds pending"))
            return fut
        stream.queue.append(_Chunk(parts, nbytes, count, master_key, recovery, fut))
        stream.queued_entries += count
        stream.queued_bytes += nbytes
        wake = stream.wake
        if not wake.is_set():
            wake.set()
        return fut

    def set_add_address(self, add_address: str | None) -> None:
        """The bookie announced another fast add address (it restarted on another port, or
        with or without one): the next Add stream uses it (None: gRPC), at once."""
        if self._fast_add and add_address != self._add_address:
            self._add_address = add_address
            self._fast_add_retry_at = 0.0

    @property
    def add_transport(self) -> str:
        """What the next Add stream uses: "tcp" (the fast add port) or "grpc"."""
        if self._add_address is not None and self.clock.monotonic_ms() >= self._fast_add_retry_at:
            return "tcp"
        return "grpc"

    def _on_stream_failed(self, call: Any) -> None:
        self._stream_failures += 1
        if isinstance(call, _FastAddCall) and call.connect_failed:
            self._fast_add_retry_at = self.clock.monotonic_ms() + self.fast_add_retry_ms
            log.warning(
                "bookie %s: fast add port %s unreachable, adds use gRPC for %d ms",
                self._address,
                self._add_address,
                self.fast_add_retry_ms,
            )

    def _requeue(self, chunks: list[_Chunk]) -> None:
        """Queue adds that a broken stream never sent on a new stream, in their order."""
        if not chunks:
            return
        try:
            stream = self._stream or self._open_stream()
        except BookieError as exc:
            for chunk in chunks:
                if not chunk.future.done():
                    chunk.future.set_exception(exc)
            return
        for chunk in chunks:
            stream.queue.append(chunk)
            stream.queued_entries += chunk.count
            stream.queued_bytes += chunk.nbytes
        stream.wake.set()

    def _open_stream(self) -> _Stream:
        call: Any
        if self.add_transport == "tcp":
            if self._closed:
                raise BookieUnavailable(f"client for {self._address} is closed")
            assert self._add_address is not None
            call = _FastAddCall(self._add_address, asyncio.get_running_loop())
            self._fast_streams_opened += 1
        else:
            self._get_stub()
            assert self._channel is not None
            # messages are built by ``_Stream._build``: the stream takes wire bytes as they are
            call = self._channel.stream_stream(
                ADD_METHOD,
                request_serializer=None,
                response_deserializer=pb.AddResponse.FromString,
            )(None)
        stream = _Stream(self, call)
        self._stream = stream
        self._streams_opened += 1
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.create_task(self._watch_adds())
        return stream

    async def _watch_adds(self) -> None:
        """Fail the stream when its oldest in-flight batch is older than add_timeout_ms."""
        period_s = max(0.05, min(1.0, self.add_timeout_ms / 4000.0))
        while not self._closed:
            await self.clock.sleep(period_s)
            stream = self._stream
            if stream is None:
                continue
            oldest = stream.oldest_inflight_ms()
            if oldest is not None and self.clock.monotonic_ms() - oldest > self.add_timeout_ms:
                stream.fail(
                    BookieTimeout(f"add to {self._address} not acked in {self.add_timeout_ms} ms")
                )

    # -- unary calls ------------------------------------------------------------------------

    async def _call(
        self, method: Callable[..., Awaitable[T]], request: Any, timeout_ms: int | None = None
    ) -> T:
        self._get_stub()
        timeout_s = (timeout_ms if timeout_ms is not None else self.timeout_ms) / 1000.0
        try:
            return await method(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc) from None

    def _check_entry(self, e: pb.Entry, ledger_id: int) -> Entry:
        payload = e.payload
        if e.ledger_id != ledger_id:
            raise CorruptEntry(f"asked ledger {ledger_id}, got {e.ledger_id}")
        if crc32c.crc32c(payload) != e.crc32c:
            raise CorruptEntry(
                f"checksum mismatch on {e.ledger_id}:{e.entry_id} from {self._address}"
            )
        return Entry(e.ledger_id, e.entry_id, e.lac, e.crc32c, payload)

    async def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        stub = self._get_stub()
        resp = await self._call(
            stub.Read,
            pb.ReadRequest(ledger_id=ledger_id, first_entry_id=entry_id, last_entry_id=entry_id),
        )
        _raise_for(resp.status, resp.message)
        if len(resp.entries) != 1:
            raise CorruptEntry(f"read of {ledger_id}:{entry_id} returned {len(resp.entries)}")
        entry = self._check_entry(resp.entries[0], ledger_id)
        if entry_id not in (NO_ENTRY_ID, entry.entry_id):
            raise CorruptEntry(f"asked entry {entry_id}, got {entry.entry_id}")
        return entry

    async def read_range(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int = 4 << 20
    ) -> list[Entry]:
        if last_entry_id == first_entry_id:
            return [await self.read_entry(ledger_id, first_entry_id)]
        stub = self._get_stub()
        resp = await self._call(
            stub.Read,
            pb.ReadRequest(
                ledger_id=ledger_id,
                first_entry_id=first_entry_id,
                last_entry_id=last_entry_id,
                max_bytes=max_bytes,
                background=self.background_reads,
            ),
        )
        _raise_for(resp.status, resp.message)
        out = [self._check_entry(e, ledger_id) for e in resp.entries]
        for i, entry in enumerate(out):
            if entry.entry_id != first_entry_id + i:
                raise CorruptEntry(f"range read out of order at {entry.entry_id}")
        return out

    async def read_packed(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int = 4 << 20
    ) -> EntryRun:
        """Entries first..last (at most ``max_bytes`` of payload, at least one) in one
        buffer: the bookie answers them packed (``ReadResponse.packed``) and one pass here
        checks the layout, the ids and every checksum (``wire.run_spans``); a bookie that
        answers with one message per entry (an older one) is taken too."""
        stub = self._get_stub()
        resp = await self._call(
            stub.Read,
            pb.ReadRequest(
                ledger_id=ledger_id,
                first_entry_id=first_entry_id,
                last_entry_id=max(first_entry_id, last_entry_id),
                max_bytes=max_bytes,
                packed=True,
                background=self.background_reads,
            ),
        )
        _raise_for(resp.status, resp.message)
        if resp.entries:  # a bookie without packed reads
            return self._run_of(resp.entries, ledger_id, first_entry_id)
        data = resp.packed
        try:
            starts, ends = run_spans(data, ledger_id, first_entry_id)
        except MalformedBatch as exc:
            raise CorruptEntry(
                f"read of {ledger_id}:{first_entry_id}.. from {self._address}: {exc}"
            ) from None
        if starts and first_entry_id + len(starts) - 1 > last_entry_id:
            raise CorruptEntry(
                f"read of {ledger_id}:{first_entry_id}..{last_entry_id} returned more"
            )
        return EntryRun(ledger_id, first_entry_id, data, starts, ends)

    def _run_of(self, entries: Sequence[pb.Entry], ledger_id: int, first: int) -> EntryRun:
        checked = [self._check_entry(e, ledger_id) for e in entries]
        for i, entry in enumerate(checked):
            if entry.entry_id != first + i:
                raise CorruptEntry(f"range read out of order at {entry.entry_id}")
        starts: list[int] = []
        ends: list[int] = []
        at = 0
        for entry in checked:
            starts.append(at)
            at += len(entry.payload)
            ends.append(at)
        return EntryRun(ledger_id, first, b"".join(e.payload for e in checked), starts, ends)

    async def long_poll(
        self, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> tuple[int, Entry | None]:
        """Wait up to ``timeout_ms`` for the LAC to pass ``previous_lac``; return the LAC and
        entry ``previous_lac + 1`` if the bookie has it (tailing without a second round trip)."""
        stub = self._get_stub()
        resp = await self._call(
            stub.Read,
            pb.ReadRequest(
                ledger_id=ledger_id,
                long_poll=True,
                previous_lac=previous_lac,
                timeout_ms=timeout_ms,
            ),
            timeout_ms=timeout_ms + self.timeout_ms,
        )
        _raise_for(resp.status, resp.message)
        entry = self._check_entry(resp.entries[0], ledger_id) if resp.entries else None
        return resp.lac, entry

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_ms: int) -> int:
        lac, _ = await self.long_poll(ledger_id, previous_lac, timeout_ms)
        return lac

    async def read_lac(self, ledger_id: int) -> int:
        stub = self._get_stub()
        resp = await self._call(stub.ReadLac, pb.LedgerRequest(ledger_id=ledger_id))
        _raise_for(resp.status, resp.message)
        return resp.lac

    async def fence(self, ledger_id: int, master_key: bytes) -> int:
        stub = self._get_stub()
        resp = await self._call(
            stub.Fence, pb.FenceRequest(ledger_id=ledger_id, master_key=master_key)
        )
        _raise_for(resp.status, resp.message)
        return resp.last_entry_id

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        stub = self._get_stub()
        resp = await self._call(
            stub.WriteLac,
            pb.WriteLacRequest(ledger_id=ledger_id, master_key=master_key, lac=lac),
        )
        _raise_for(resp.status, resp.message)

    async def force_ledger(self, ledger_id: int) -> None:
        stub = self._get_stub()
        resp = await self._call(stub.ForceLedger, pb.LedgerRequest(ledger_id=ledger_id))
        _raise_for(resp.status, resp.message)

    async def info(self) -> BookieInfo:
        stub = self._get_stub()
        resp = await self._call(stub.Info, pb.InfoRequest())
        _raise_for(resp.status, resp.message)
        return BookieInfo(
            bookie_id=resp.bookie_id,
            read_only=resp.read_only,
            total_disk_bytes=resp.total_disk_bytes,
            free_disk_bytes=resp.free_disk_bytes,
            journal_lag_bytes=resp.journal_lag_bytes,
        )

    async def health(self, timeout_ms: int | None = None) -> bool:
        """True if the bookie answers its health check and is serving."""
        stub = self._get_stub()
        try:
            resp = await self._call(stub.Health, pb.HealthRequest(), timeout_ms=timeout_ms)
        except BookieError:
            return False
        return bool(resp.serving)

    async def close(self) -> None:
        """Fail pending adds with ``BookieUnavailable`` and close the channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        stream = self._stream
        if stream is not None:
            stream.fail(BookieUnavailable(f"client for {self._address} closed"))
            for task in (stream.sender, stream.receiver):
                try:
                    await task
                except BaseException:
                    pass
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._channel is not None:
            await self._channel.close(None)


def read_clients(
    *, tls: GrpcTls | None = None, timeout_ms: int = 30_000, background: bool = False
) -> Callable[[str], BookieClient]:
    """A factory of clients that only read (no fast add connection): what a reader outside
    the broker (a Spark task, the offload worker) hands ``BookiePool``. ``background``: their
    range reads may wait while a bookie takes adds (the offload worker's do)."""

    def make(address: str) -> BookieClient:
        return BookieClient(
            address, timeout_ms=timeout_ms, tls=tls, fast_add=False, background_reads=background
        )

    return make


def _raise_for(status: int, message: str) -> None:
    if status != StatusCode.OK:
        raise BookieError.for_code(status, message)


def _translate(exc: BaseException) -> BookieError:
    """grpc exceptions never escape this module."""
    if isinstance(exc, BookieError):
        return exc
    if isinstance(exc, grpc.aio.AioRpcError):
        code = exc.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return BookieTimeout(f"bookie call timed out: {exc.details()}")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return TooManyRequests(f"bookie refused: {exc.details()}")
        if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            return Unauthorized(f"bookie refused this client: {exc.details()}")
        return BookieUnavailable(f"bookie unreachable ({code.name}): {exc.details()}")
    return BookieUnavailable(f"bookie stream failed: {exc!r}")


__all__ = [
    "CHANNEL_OPTIONS",
    "AddEntryLike",
    "BookieClient",
    "BookieClientStatistics",
    "encode_batch_header",
    "encode_entries",
    "read_clients",
]
