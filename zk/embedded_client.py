"""``MetadataStore`` client for an embedded metadata server in another process.

Owns: one TCP connection to an ``EmbeddedSessionServer`` (``embedded://host:port``), the
session it holds (id + password), heartbeats, reconnection within the session timeout, and
the mapping of its life onto ``SessionEvent`` (CONNECTED; SUSPENDED when the connection
drops; RECONNECTED when the same session is back; LOST when the server expired it or the
timeout passed without a reconnect). Wire format: ``embedded_wire.py``.
Must not know: the tree or persistence.

While suspended, operations fail fast with ``ConnectionLoss``; after LOST, with
``SessionLost``. In-flight requests on a dropped connection fail with ``ConnectionLoss``
(whether they took effect is unknown, as with ZooKeeper). At most
``pending_requests_max`` requests are in flight; more wait for a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any

from magnetar.clock import Clock, SystemClock
from magnetar.zk import embedded_wire as wire
from magnetar.zk.errors import (
    ConnectionLoss,
    InvalidPath,
    MetadataError,
    OperationTimeout,
    SessionLost,
    StoreClosed,
)
from magnetar.zk.store import (
    GetResult,
    Listener,
    MetadataStore,
    Notification,
    NotificationType,
    PutResult,
    SessionEvent,
    SessionListener,
    Stat,
    validate_path,
)

log = logging.getLogger(__name__)


def parse_embedded_url(url: str) -> tuple[str, int]:
    rest = url.removeprefix("embedded://").rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected embedded://host:port, got {url!r}")
    return host, int(port)


class RemoteMetadataStore(MetadataStore):
    """One session on a remote embedded server. ``await RemoteMetadataStore.connect(url)``."""

    def __init__(
        self,
        url: str,
        *,
        session_timeout_ms: int = 10_000,
        operation_timeout_ms: int = 10_000,
        connect_timeout_ms: int = 5_000,
        pending_requests_max: int = 1_000,
        clock: Clock | None = None,
    ) -> None:
        self._url = url
        self._host, self._port = parse_embedded_url(url)
        self._session_timeout_ms = session_timeout_ms
        self._operation_timeout_s = operation_timeout_ms / 1000.0
        self._connect_timeout_s = connect_timeout_ms / 1000.0
        self._clock = clock or SystemClock()
        self._slots = asyncio.Semaphore(pending_requests_max)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._listeners: list[Listener] = []
        self._session_listeners: list[SessionListener] = []
        self._session_id = 0
        self._password = ""
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._connected = False
        self._lost = False
        self._closed = False

    @classmethod
    async def connect(cls, url: str, **options: Any) -> RemoteMetadataStore:
        store = cls(url, **options)
        await store.start()
        return store

    def __repr__(self) -> str:
        state = (
            "closed"
            if self._closed
            else "lost"
            if self._lost
            else "connected"
            if self._connected
            else "suspended"
        )
        return f"<RemoteMetadataStore {self._url} session={self._session_id} {state}>"

    @property
    def session_id(self) -> int:
        return self._session_id

    @property
    def connected(self) -> bool:
        return self._connected

    # -- connection -------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self._attach()
        except SessionLost:
            raise
        except (OSError, TimeoutError) as exc:
            raise ConnectionLoss(f"cannot connect to {self._url}: {exc}") from exc
        self._heartbeat_task = asyncio.create_task(self._heartbeat(), name="embedded-heartbeat")
        self._emit_session(SessionEvent.CONNECTED)

    async def _attach(self) -> None:
        """Open a connection and (re)attach the session; raises SessionLost if it is gone."""
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self._host, self._port), self._connect_timeout_s
        )
        try:
            request = {
                "id": 0,
                "op": "connect",
                "session_id": self._session_id,
                "password": self._password,
                "timeout_ms": self._session_timeout_ms,
            }
            writer.write(wire.encode_frame(request))
            async with asyncio.timeout(self._connect_timeout_s):
                reply = await _read_frame(reader)
            if reply is None:
                raise ConnectionError("server closed the connection during the handshake")
            if "error" in reply:
                raise wire.decode_error(reply["error"])
            result = reply["result"]
        except BaseException:
            writer.close()
            raise
        self._session_id = int(result["session_id"])
        self._password = str(result["password"])
        self._session_timeout_ms = int(result["timeout_ms"])
        self._writer = writer
        self._connected = True
        self._reader_task = asyncio.create_task(self._read_loop(reader, writer))

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                message = await _read_frame(reader)
                if message is None:
                    break
                if "event" in message:
                    self._on_event(message)
                    continue
                future = self._pending.pop(int(message.get("id", -1)), None)
                if future is None or future.done():
                    continue
                if "error" in message:
                    future.set_exception(wire.decode_error(message["error"]))
                else:
                    future.set_result(message.get("result"))
        except (OSError, asyncio.IncompleteReadError, wire.WireError) as exc:
            log.debug("embedded connection broke: %s", exc)
        finally:
            writer.close()
            if self._writer is writer:
                self._on_disconnect()

    def _on_event(self, message: dict[str, Any]) -> None:
        if message["event"] == "notification":
            notification = Notification(NotificationType(message["type"]), str(message["path"]))
            for listener in list(self._listeners):
                try:
                    listener(notification)
                except Exception:
                    log.exception("listener failed on %s", notification)
        elif message["event"] == "session_lost":
            self._on_lost()

    def _fail_pending(self, exc_type: type[Exception], text: str) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(exc_type(text))

    def _on_disconnect(self) -> None:
        self._writer = None
        was_connected = self._connected
        self._connected = False
        self._fail_pending(ConnectionLoss, "connection to the embedded server lost")
        if self._closed or self._lost or not was_connected:
            return
        self._emit_session(SessionEvent.SUSPENDED)
        self._reconnect_task = asyncio.create_task(self._reconnect(), name="embedded-reconnect")

    def _on_lost(self) -> None:
        if self._lost or self._closed:
            return
        self._lost = True
        self._connected = False
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        self._fail_pending(SessionLost, "session expired")
        self._emit_session(SessionEvent.LOST)

    async def _reconnect(self) -> None:
        deadline_ms = self._clock.monotonic_ms() + self._session_timeout_ms
        delay_s = 0.02
        while not self._closed and not self._lost:
            if self._clock.monotonic_ms() >= deadline_ms:
                self._on_lost()
                return
            try:
                await self._attach()
            except SessionLost:
                self._on_lost()
                return
            except (OSError, TimeoutError, MetadataError, wire.WireError) as exc:
                log.debug("reconnect to %s failed: %s", self._url, exc)
                await self._clock.sleep(delay_s)
                delay_s = min(delay_s * 2, 0.5)
                continue
            self._emit_session(SessionEvent.RECONNECTED)
            return

    async def _heartbeat(self) -> None:
        while not self._closed and not self._lost:
            await self._clock.sleep(self._session_timeout_ms / 3000.0)
            writer = self._writer
            if writer is None or not self._connected:
                continue
            try:
                await self._request({"op": "ping"}, timeout_s=self._session_timeout_ms / 2000.0)
            except OperationTimeout:
                if self._writer is writer:
                    writer.transport.abort()  # dead server: the read loop reports SUSPENDED
            except (ConnectionLoss, SessionLost, StoreClosed):
                pass

    def abort_connection(self) -> None:
        """Drop the TCP connection (tests): SUSPENDED now, RECONNECTED or LOST later."""
        if self._writer is not None:
            self._writer.transport.abort()

    # -- requests ---------------------------------------------------------------------------
    def _check(self) -> asyncio.StreamWriter:
        if self._closed:
            raise StoreClosed("store is closed")
        if self._lost:
            raise SessionLost("session expired")
        if not self._connected or self._writer is None:
            raise ConnectionLoss("not connected to the embedded server (session suspended)")
        return self._writer

    async def _request(self, message: dict[str, Any], timeout_s: float | None = None) -> Any:
        async with self._slots:
            writer = self._check()
            request_id = next(self._ids)
            message["id"] = request_id
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._pending[request_id] = future
            writer.write(wire.encode_frame(message))
            try:
                # asyncio.timeout, not wait_for (3.11's can swallow a racing cancellation).
                async with asyncio.timeout(timeout_s or self._operation_timeout_s):
                    return await future
            except TimeoutError as exc:
                raise OperationTimeout(
                    f"{message.get('op')} timed out", path=message.get("path")
                ) from exc
            finally:
                self._pending.pop(request_id, None)

    async def get(self, path: str) -> GetResult | None:
        result = await self._request({"op": "get", "path": validate_path(path)})
        if result is None:
            return None
        return GetResult(wire.decode_value(result[0]), wire.decode_stat(result[1]))

    async def exists(self, path: str) -> Stat | None:
        result = await self._request({"op": "exists", "path": validate_path(path)})
        return None if result is None else wire.decode_stat(result)

    async def children(self, path: str) -> list[str]:
        result = await self._request({"op": "children", "path": validate_path(path)})
        return sorted(result)

    async def put(
        self,
        path: str,
        value: bytes,
        *,
        expected_version: int | None = None,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> PutResult:
        validate_path(path)
        if path == "/":
            raise InvalidPath("cannot write the root", path=path)
        result = await self._request(
            {
                "op": "put",
                "path": path,
                "value": wire.encode_value(bytes(value)),
                "expected_version": expected_version,
                "ephemeral": ephemeral,
                "sequential": sequential,
            }
        )
        return PutResult(str(result[0]), wire.decode_stat(result[1]))

    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        await self._request(
            {"op": "delete", "path": validate_path(path), "expected_version": expected_version}
        )

    def _emit_session(self, event: SessionEvent) -> None:
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event)

    async def close(self) -> None:
        if self._closed:
            return
        if self._connected and not self._lost:
            with contextlib.suppress(Exception):
                await self._request({"op": "close"}, timeout_s=2.0)
        self._closed = True
        self._connected = False
        for task in (self._heartbeat_task, self._reconnect_task):
            if task is not None:
                task.cancel()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if self._reader_task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._reader_task, 2.0)
        self._fail_pending(StoreClosed, "store is closed")


async def _read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    try:
        header = await reader.readexactly(wire.HEADER_BYTES)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    body = await reader.readexactly(wire.decode_length(header))
    return wire.decode_body(body)


__all__ = ["RemoteMetadataStore", "parse_embedded_url"]
