"""Serves sessions of an in-process ``MemoryMetadataServer`` to other processes over TCP.

Owns: the listening socket (127.0.0.1 by default), one ``RemoteSession`` per client session
(a ``MemoryMetadataStore`` on the shared tree plus its watched paths), session timeouts and
the push of notifications. Wire format: ``embedded_wire.py``.
Must not know: persistence (``embedded.py``), what the paths mean.

Session rules (ZooKeeper's): a session outlives its connection for ``timeout_ms``; a client
may reattach with its session id and password within that time. A session whose client
has been silent (no frame, not even a ping) for ``timeout_ms`` is expired: its ephemeral
nodes are removed and a connected client is told ``session_lost``. An explicit ``close``
ends the session at once.

Requests of one connection are applied in arrival order, run concurrently (so their writes
share a group commit), and at most ``inflight_requests_max`` are in flight per connection
(the reader stops reading beyond that: TCP back-pressure).

Bounds: a session keeps at most ``pending_notifications_max`` notifications while its client
is away (older ones are dropped, the client re-reads after RECONNECTED); a connection whose
unsent output exceeds ``write_buffer_bytes_max`` is dropped (the session survives).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from magnetar.clock import Clock, SystemClock
from magnetar.zk import embedded_wire as wire
from magnetar.zk.errors import InvalidPath, MetadataError, SessionLost
from magnetar.zk.memory import MemoryMetadataServer, MemoryMetadataStore
from magnetar.zk.store import Notification, SessionEvent

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS_MIN = 200
SESSION_TIMEOUT_MS_MAX = 120_000


@dataclass(frozen=True, slots=True)
class SessionServerStatistics:
    sessions: int
    connections: int
    requests: int
    expired_sessions: int


class RemoteSession:
    """Server side of one remote session."""

    def __init__(
        self,
        store: MemoryMetadataStore,
        password: str,
        timeout_ms: int,
        now_ms: float,
        pending_max: int,
    ) -> None:
        self.store = store
        self.password = password
        self.timeout_ms = timeout_ms
        self.last_heard_ms = now_ms
        self.watched: set[str] = set()
        self.writer: asyncio.StreamWriter | None = None
        self.pending: collections.deque[dict[str, Any]] = collections.deque(maxlen=pending_max)

    @property
    def session_id(self) -> int:
        return self.store.session_id

    def __repr__(self) -> str:
        state = "attached" if self.writer is not None else "detached"
        return f"<RemoteSession {self.session_id} {state} watched={len(self.watched)}>"


class EmbeddedSessionServer:
    """TCP front end of a ``MemoryMetadataServer`` (run on the server's event loop)."""

    def __init__(
        self,
        server: MemoryMetadataServer,
        *,
        clock: Clock | None = None,
        pending_notifications_max: int = 10_000,
        write_buffer_bytes_max: int = 64 * 1024 * 1024,
        inflight_requests_max: int = 1_000,
    ) -> None:
        self._server = server
        self._clock = clock or SystemClock()
        self._pending_max = pending_notifications_max
        self._write_buffer_bytes_max = write_buffer_bytes_max
        self._inflight_requests_max = inflight_requests_max
        self._sessions: dict[int, RemoteSession] = {}
        self._tcp: asyncio.Server | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._requests = 0
        self._expired = 0
        self.host = ""
        self.port = 0

    def __repr__(self) -> str:
        return f"<EmbeddedSessionServer {self.host}:{self.port} sessions={len(self._sessions)}>"

    @property
    def url(self) -> str:
        return f"embedded://{self.host}:{self.port}"

    def statistics(self) -> SessionServerStatistics:
        return SessionServerStatistics(
            sessions=len(self._sessions),
            connections=len(self._connections),
            requests=self._requests,
            expired_sessions=self._expired,
        )

    @property
    def sessions(self) -> dict[int, RemoteSession]:
        return dict(self._sessions)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._tcp = await asyncio.start_server(self._handle, host, port)
        sock = self._tcp.sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        self._reaper = asyncio.create_task(self._reap(), name="embedded-session-reaper")
        return self.port

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        if self._tcp is not None:
            self._tcp.close()
        for writer in list(self._connections):
            writer.close()
        for session in list(self._sessions.values()):
            await session.store.close()
        self._sessions.clear()
        if self._tcp is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._tcp.wait_closed(), 5.0)
            self._tcp = None

    def expire_session(self, session_id: int) -> None:
        """Expire a remote session now (timeouts and tests)."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        self._expired += 1
        self._server.expire_session(session_id)
        if session.writer is not None:
            self._send(session.writer, {"event": "session_lost"})
            session.writer.close()
            session.writer = None

    # -- sessions ---------------------------------------------------------------------------
    async def _reap(self) -> None:
        while True:
            timeouts = [s.timeout_ms for s in self._sessions.values()]
            interval_ms = max(50.0, min(timeouts, default=1000) / 4)
            await self._clock.sleep(interval_ms / 1000.0)
            now = self._clock.monotonic_ms()
            for session in list(self._sessions.values()):
                if now - session.last_heard_ms > session.timeout_ms:
                    log.info("embedded session %d timed out", session.session_id)
                    self.expire_session(session.session_id)

    def _open_session(self, timeout_ms: int) -> RemoteSession:
        store = self._server.connect()
        session = RemoteSession(
            store, secrets.token_hex(16), timeout_ms, self._clock.monotonic_ms(), self._pending_max
        )

        def on_change(notification: Notification) -> None:
            if notification.path in session.watched:
                self._push(
                    session,
                    {
                        "event": "notification",
                        "type": notification.type.value,
                        "path": notification.path,
                    },
                )

        def on_session(event: SessionEvent) -> None:
            if event is SessionEvent.LOST:
                self.expire_session(session.session_id)

        store.add_listener(on_change)
        store.add_session_listener(on_session)
        self._sessions[session.session_id] = session
        return session

    def _push(self, session: RemoteSession, message: dict[str, Any]) -> None:
        if session.writer is None:
            session.pending.append(message)
        else:
            self._send(session.writer, message)

    def _send(self, writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
        if writer.is_closing():
            return
        writer.write(wire.encode_frame(message))
        if writer.transport.get_write_buffer_size() > self._write_buffer_bytes_max:
            log.warning("embedded client too slow: dropping its connection")
            writer.close()

    # -- connections ------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        session: RemoteSession | None = None
        inflight: set[asyncio.Task[None]] = set()
        try:
            session = await self._handshake(reader, writer)
            if session is None:
                return
            while True:
                message = await _read_frame(reader)
                if message is None:
                    return
                session.last_heard_ms = self._clock.monotonic_ms()
                if session.session_id not in self._sessions:
                    return  # expired while this frame was in flight
                self._requests += 1
                if message.get("op") == "close":
                    if inflight:
                        await asyncio.wait(inflight)
                    self._send(writer, await self._dispatch(session, message))
                    return
                # Each request runs as its own task so that writes of one connection share
                # a group commit. Tasks start in arrival order and apply their change before
                # their first suspension, so a client's requests take effect in FIFO order;
                # replies may overtake each other (they carry the request id).
                task = asyncio.create_task(self._dispatch_and_reply(session, writer, message))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                if len(inflight) >= self._inflight_requests_max:
                    await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
        except (ConnectionError, asyncio.IncompleteReadError, wire.WireError) as exc:
            log.debug("embedded connection ended: %s", exc)
        finally:
            self._connections.discard(writer)
            if session is not None and session.writer is writer:
                session.writer = None
                session.last_heard_ms = self._clock.monotonic_ms()
            writer.close()

    async def _dispatch_and_reply(
        self, session: RemoteSession, writer: asyncio.StreamWriter, message: dict[str, Any]
    ) -> None:
        try:
            reply = await self._dispatch(session, message)
        except wire.WireError as exc:
            log.warning("embedded client sent a bad request: %s", exc)
            writer.close()
            return
        self._send(writer, reply)

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> RemoteSession | None:
        message = await _read_frame(reader)
        if message is None:
            return None
        request_id = message.get("id", 0)
        if message.get("op") != "connect":
            raise wire.WireError("first frame must be connect")
        timeout_ms = int(message.get("timeout_ms") or 10_000)
        timeout_ms = max(SESSION_TIMEOUT_MS_MIN, min(SESSION_TIMEOUT_MS_MAX, timeout_ms))
        session_id = int(message.get("session_id") or 0)
        if session_id == 0:
            session = self._open_session(timeout_ms)
        else:
            found = self._sessions.get(session_id)
            if found is None or found.password != message.get("password"):
                error = SessionLost("session expired", path=None)
                self._send(writer, {"id": request_id, "error": wire.encode_error(error)})
                await writer.drain()
                return None
            session = found
            if session.writer is not None:
                session.writer.close()  # a newer connection wins
        session.writer = writer
        session.last_heard_ms = self._clock.monotonic_ms()
        result = {
            "session_id": session.session_id,
            "password": session.password,
            "timeout_ms": session.timeout_ms,
        }
        self._send(writer, {"id": request_id, "result": result})
        while session.pending:
            self._send(writer, session.pending.popleft())
        return session

    async def _dispatch(self, session: RemoteSession, message: dict[str, Any]) -> dict[str, Any]:
        request_id = message.get("id", 0)
        op = message.get("op")
        store = session.store
        try:
            path = message.get("path")
            if op in ("get", "exists", "children", "put", "delete") and not isinstance(path, str):
                raise InvalidPath("missing path", path=None)
            result: Any = None
            if op == "get":
                assert isinstance(path, str)
                session.watched.add(path)
                got = await store.get(path)
                if got is not None:
                    result = [wire.encode_value(got.value), wire.encode_stat(got.stat)]
            elif op == "exists":
                assert isinstance(path, str)
                session.watched.add(path)
                stat = await store.exists(path)
                result = None if stat is None else wire.encode_stat(stat)
            elif op == "children":
                assert isinstance(path, str)
                session.watched.add(path)
                result = await store.children(path)
            elif op == "put":
                assert isinstance(path, str)
                put = await store.put(
                    path,
                    wire.decode_value(message.get("value") or ""),
                    expected_version=message.get("expected_version"),
                    ephemeral=bool(message.get("ephemeral")),
                    sequential=bool(message.get("sequential")),
                )
                result = [put.path, wire.encode_stat(put.stat)]
            elif op == "delete":
                assert isinstance(path, str)
                await store.delete(path, expected_version=message.get("expected_version"))
            elif op == "ping":
                result = "pong"
            elif op == "close":
                self._sessions.pop(session.session_id, None)
                await store.close()
            else:
                raise wire.WireError(f"unknown op {op!r}")
        except MetadataError as exc:
            return {"id": request_id, "error": wire.encode_error(exc)}
        return {"id": request_id, "result": result}


async def _read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    try:
        header = await reader.readexactly(wire.HEADER_BYTES)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    body = await reader.readexactly(wire.decode_length(header))
    return wire.decode_body(body)


__all__ = ["EmbeddedSessionServer", "RemoteSession", "SessionServerStatistics"]
