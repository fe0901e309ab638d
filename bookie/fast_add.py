"""The bookie's fast add transport: ``AddBatch`` messages over a plain TCP connection.

Owns: ``FastAddServer`` (an asyncio server on the bookie's ``fast_add_port``) and its
per-connection protocol. Each connection is one Add stream of the SAME ``BookieService`` the
gRPC server uses (``open_add_stream`` / ``accept_batch`` / ``drain_done``), so fencing,
master-key checks, the write cache, the journal, back-pressure bounds and every error code are
those of the gRPC ``Add`` stream; only the carriage differs (framing: ``add_frames.py``).
Must not know: storage, gRPC, metadata.

Why: a lone add over the gRPC stream costs ~0.2 ms of loopback round trip before the fsync
(``bench/transport_rtt.py``: a bare grpc.aio stream 215-235 µs p50, a length-prefixed asyncio
TCP connection 50-67 µs); for a sync publish (one in flight) that is most of the latency.
Answers are written from the storage future's done callback: no writer task, no loop hop.

Bounded input: the first bytes must be ``MAGIC``; a frame over ``FRAME_BYTES_MAX``, an empty
frame or an unreadable ``AddBatch`` is answered with one error frame (``StatusResponse``:
``BAD_REQUEST`` and the reason) and the connection is closed after the batches before it are
answered; nothing of the bad frame is stored. While a connection has ``max_inflight_batches``
/ ``max_inflight_bytes`` pending, the bookie stops reading it (TCP flow control reaches the
client).

No TLS: the port is plaintext. A bookie whose gRPC uses TLS refuses to start with a fast add
port (``bookie/main.py``); brokers reach such bookies over gRPC only.

Invariant: answers on one connection are in batch order; every accepted batch is answered
unless the connection dies.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from magnetar.bookie.add_frames import (
    FRAME_BYTES_MAX,
    KIND_ADD_RESPONSE,
    KIND_ERROR,
    FrameError,
    FrameReader,
    encode_reply,
)
from magnetar.bookie.errors import StatusCode
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.server import AddStreamState, BookieService

log = logging.getLogger(__name__)


class _AddConnection(asyncio.Protocol):
    """One fast add connection: frames in, ``BookieService`` batches, responses out."""

    def __init__(self, owner: FastAddServer) -> None:
        self.owner = owner
        self.service = owner.service
        self.reader = FrameReader(
            expect_magic=True, with_kind=False, max_frame_bytes=owner.max_frame_bytes
        )
        self.state: AddStreamState | None = None
        self.transport: Any = None
        self.paused = False
        self.closing = False
        self.peer = "?"

    # -- asyncio callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.peer = str(transport.get_extra_info("peername"))
        self.state = self.service.open_add_stream("tcp")
        self.owner.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.state is not None:
            self.service.close_add_stream(self.state)
        self.owner.connections.discard(self)
        if self.owner.connections_closed is not None and not self.owner.connections:
            self.owner.connections_closed.set()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        state = self.state
        assert state is not None
        service = self.service
        try:
            frames = self.reader.frames(data)
        except FrameError as exc:
            frames = []
            state.error = str(exc)
        try:
            for _, message in frames:
                if not service.accept_batch(state, message):
                    break
                codes = state.pending[-1][3]
                if isinstance(codes, asyncio.Future) and not codes.done():
                    codes.add_done_callback(self._on_done)
        except Exception as exc:  # a bug must end this connection, not the bookie
            log.exception("fast add connection %s failed", self.peer)
            state.error = f"bookie failed reading the batch: {exc!r}"
        if state.error is not None:
            log.warning("fast add connection %s refused: %s", self.peer, state.error)
            self.closing = True
            self.transport.pause_reading()
        self._answer()
        if not self.closing and not self.paused and not service.has_space(state):
            self.paused = True
            self.transport.pause_reading()

    # -- answering --

    def _on_done(self, _: object) -> None:
        self._answer()

    def _answer(self) -> None:
        """Write one response for every finished batch at the head, in order; then end the
        connection if it is closing and nothing is left to answer."""
        state = self.state
        transport = self.transport
        if state is None or transport is None or transport.is_closing():
            return
        service = self.service
        while service.head_done(state):
            resp = service.drain_done(state)
            transport.write(encode_reply(KIND_ADD_RESPONSE, resp.SerializeToString()))
        if self.paused and not self.closing and service.has_space(state):
            self.paused = False
            transport.resume_reading()
        if self.closing and not state.pending:
            if state.error is not None:
                err = pb.StatusResponse(status=StatusCode.BAD_REQUEST, message=state.error)
                transport.write(encode_reply(KIND_ERROR, err.SerializeToString()))
            transport.close()

    def end(self) -> None:
        """Stop reading; close once every accepted batch is answered (graceful stop)."""
        if self.transport is None or self.transport.is_closing():
            return
        self.closing = True
        self.transport.pause_reading()
        self._answer()


class FastAddServer:
    """Serves a ``BookieService``'s Add streams on ``host:port`` over plain TCP."""

    def __init__(
        self,
        service: BookieService,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame_bytes: int = FRAME_BYTES_MAX,
    ) -> None:
        self.service = service
        self.host = host
        self._requested_port = port
        self.port = 0
        self.max_frame_bytes = max_frame_bytes
        self.connections: set[_AddConnection] = set()
        self.connections_closed: asyncio.Event | None = None
        self._server: asyncio.base_events.Server | None = None
        service.on_begin_shutdown(self._end_all)

    def __repr__(self) -> str:
        return f"<FastAddServer {self.host}:{self.port} connections={len(self.connections)}>"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _AddConnection(self), self.host, self._requested_port, reuse_address=True
        )
        self._server = server
        self.port = int(server.sockets[0].getsockname()[1])
        log.info("bookie fast add transport listening address=%s:%d", self.host, self.port)

    def _end_all(self) -> None:
        for conn in list(self.connections):
            conn.end()

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting connections; open ones get ``grace_s`` to answer what they hold."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        self._end_all()
        if self.connections:
            self.connections_closed = asyncio.Event()
            try:
                await asyncio.wait_for(self.connections_closed.wait(), grace_s)
            except TimeoutError:
                log.warning("fast add connections still open after %.1f s", grace_s)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        await server.wait_closed()


__all__ = ["FastAddServer"]
