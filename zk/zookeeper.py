"""The ZooKeeper ``MetadataStore``, over kazoo (the only module of Magnetar importing kazoo).

Owns: one kazoo client (= one ZooKeeper session) per store; the bridge from kazoo's
threads into the store's asyncio loop; translation of kazoo exceptions into
``magnetar.zk.errors``; watch bookkeeping (watches are re-armed after they fire and after
a reconnect, so a path read once keeps producing ``Notification`` s); the mapping of kazoo
connection states onto ``SessionEvent``.
Must not know: what the paths mean.

Threads: kazoo calls completions, watchers and state listeners on its own threads. Those
callbacks only hand results to the loop with ``loop.call_soon_threadsafe`` (or issue
non-blocking kazoo ``*_async`` calls to re-arm watches); every listener of ours runs on the
loop. State written from kazoo's threads is a plain attribute assignment.

Connect string: ``zk://host:port[,host:port...][/chroot]`` (the ``zk://`` prefix is
optional). A missing chroot node is created at start.

Session states: CONNECTED once started; SUSPENDED when the connection drops (ops then fail
fast with ``ConnectionLoss``); RECONNECTED when the same session is back; LOST when
ZooKeeper expired the session: the store then fails every op with ``SessionLost`` and must
be reopened (the kazoo client is stopped, it never silently opens a new session).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from kazoo.exceptions import ConnectionLoss as KazooConnectionLoss
from kazoo.exceptions import OperationTimeoutError as KazooOperationTimeout
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from magnetar.zk.errors import (
    AlreadyExists,
    BadVersion,
    ConnectionLoss,
    InvalidPath,
    MetadataError,
    NotEmpty,
    NotFound,
    OperationTimeout,
    SessionLost,
    StoreClosed,
)
from magnetar.zk.store import (
    CREATE_ONLY,
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

T = TypeVar("T")

_EVENT_TYPES = {
    EventType.CREATED: NotificationType.CREATED,
    EventType.CHANGED: NotificationType.MODIFIED,
    EventType.DELETED: NotificationType.DELETED,
    EventType.CHILD: NotificationType.CHILDREN_CHANGED,
}


def parse_connect_string(url: str) -> tuple[str, str]:
    """``zk://h1:p1,h2:p2/chroot`` -> (``"h1:p1,h2:p2"``, ``"/chroot"`` or ``""``)."""
    rest = url.removeprefix("zk://")
    hosts, sep, chroot = rest.partition("/")
    if not hosts:
        raise ValueError(f"no ZooKeeper hosts in {url!r}")
    chroot = posixpath.normpath("/" + chroot) if sep and chroot.strip("/") else ""
    return hosts, chroot


def _stat(zstat: ZnodeStat) -> Stat:
    return Stat(
        version=zstat.version,
        created_ms=zstat.ctime,
        modified_ms=zstat.mtime,
        ephemeral_owner=zstat.ephemeralOwner,
        num_children=zstat.numChildren,
    )


def _translate(exc: BaseException, path: str | None) -> BaseException:
    """kazoo exception -> ours (non-kazoo exceptions are returned unchanged)."""
    if isinstance(exc, MetadataError):
        return exc
    if isinstance(exc, NoNodeError):
        return NotFound("node does not exist", path=path)
    if isinstance(exc, BadVersionError):
        return BadVersion("version mismatch", path=path)
    if isinstance(exc, NodeExistsError):
        return AlreadyExists("node exists", path=path)
    if isinstance(exc, NotEmptyError):
        return NotEmpty("node has children", path=path)
    if isinstance(exc, NoChildrenForEphemeralsError):
        return InvalidPath("ephemeral nodes cannot have children", path=path)
    if isinstance(exc, SessionExpiredError):
        return SessionLost("ZooKeeper session expired", path=path)
    if isinstance(exc, KazooConnectionLoss | ConnectionClosedError):
        return ConnectionLoss(f"ZooKeeper connection lost ({type(exc).__name__})", path=path)
    if isinstance(exc, KazooOperationTimeout | KazooTimeoutError):
        return OperationTimeout(f"ZooKeeper operation timed out ({exc})", path=path)
    return exc


class ZooKeeperMetadataStore(MetadataStore):
    """One ZooKeeper session. Create with ``await ZooKeeperMetadataStore.connect(url)``."""

    def __init__(
        self,
        url: str,
        *,
        session_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 15_000,
        operation_timeout_ms: int = 30_000,
        reconnect_delay_max_ms: int = 1_000,
    ) -> None:
        self._url = url
        self._hosts, self._chroot = parse_connect_string(url)
        self._session_timeout_ms = session_timeout_ms
        self._connect_timeout_ms = connect_timeout_ms
        self._operation_timeout_s = operation_timeout_ms / 1000.0
        self._reconnect_delay_max_ms = reconnect_delay_max_ms
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list[Listener] = []
        self._session_listeners: list[SessionListener] = []
        self._watch_lock = threading.Lock()
        self._data_watched: set[str] = set()
        self._child_watched: set[str] = set()
        self._session_id = 0
        # Written by kazoo's threads, read on the loop: plain attribute assignments only.
        self._connected = False
        self._lost = False
        self._closing = False
        self._closed = False
        self._ever_connected = False

    @classmethod
    async def connect(cls, url: str, **options: Any) -> ZooKeeperMetadataStore:
        store = cls(url, **options)
        await store.start()
        return store

    def __repr__(self) -> str:
        if self._closed:
            state = "closed"
        elif self._lost:
            state = "lost"
        else:
            state = "connected" if self._connected else "suspended"
        return f"<ZooKeeperMetadataStore {self._url} session=0x{self._session_id:x} {state}>"

    @property
    def session_id(self) -> int:
        return self._session_id

    @property
    def session_timeout_ms(self) -> int:
        """The timeout the server negotiated (it clamps to 2..20 ticks)."""
        if self._client is not None and self._client._session_timeout:
            return int(self._client._session_timeout)
        return self._session_timeout_ms

    @property
    def connected(self) -> bool:
        return self._connected and not self._lost and not self._closed

    # -- lifecycle ------------------------------------------------------------------------
    def _new_client(self, client_id: tuple[int, bytes] | None = None) -> KazooClient:
        retry = KazooRetry(
            max_tries=-1, delay=0.05, backoff=2, max_delay=self._reconnect_delay_max_ms / 1000.0
        )
        return KazooClient(
            hosts=self._hosts,
            timeout=self._session_timeout_ms / 1000.0,
            client_id=client_id,
            connection_retry=retry,
            command_retry=None,
            logger=logging.getLogger("kazoo.client"),
        )

    async def start(self) -> None:
        if self._client is not None:
            raise RuntimeError("store already started")
        self._loop = asyncio.get_running_loop()
        client = self._new_client()
        self._client = client
        client.add_listener(self._on_kazoo_state)
        # Not ``client.start(timeout)`` in a thread: a cancelled start (SIGTERM while the
        # server is away) would leave that thread blocked for the whole connect timeout and
        # the process unable to exit until it ends. Waiting in short slices lets a cancel stop
        # the client at once.
        live = await asyncio.to_thread(client.start_async)
        deadline = self._loop.time() + self._connect_timeout_ms / 1000.0
        try:
            while not await asyncio.to_thread(live.wait, _START_SLICE_S):
                if self._loop.time() >= deadline:
                    raise ConnectionLoss(f"cannot connect to ZooKeeper at {self._hosts}")
        except BaseException:
            self._closing = True
            await asyncio.shield(asyncio.to_thread(_stop_quietly, client))
            self._closed = True
            raise
        self._session_id = client.client_id[0]
        if self._chroot:
            await self._call(lambda: client.ensure_path_async(self._chroot), self._chroot)
            client.chroot = self._chroot

    async def close(self) -> None:
        if self._closed or self._closing:
            return
        self._closing = True
        client = self._client
        if client is not None:
            await asyncio.to_thread(_stop_quietly, client)
        self._closed = True
        self._connected = False

    async def force_expire(self, timeout_s: float = 15.0) -> None:
        """Expire this store's session on the server (test hook; the classic trick).

        A second client attaches to the same session id and password, then closes it: the
        server ends the session (its ephemeral nodes go at once) and this store's client,
        when it reconnects, is told the session expired and reports LOST.
        """
        client = self._client
        if client is None or client.client_id is None:
            raise StoreClosed("store has no session")
        session_id, password = client.client_id

        def run() -> None:
            other = self._new_client((session_id, password))
            try:
                other.start(timeout_s)
            finally:
                _stop_quietly(other)

        await asyncio.to_thread(run)

    # -- kazoo threads -> loop ------------------------------------------------------------
    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # loop closed concurrently
            loop.call_soon_threadsafe(callback, *args)

    def _on_kazoo_state(self, state: KazooState) -> bool:
        # kazoo thread. Returning True would unregister the listener.
        if self._closing or self._lost:
            return False
        if state == KazooState.SUSPENDED:
            self._connected = False
            self._post(self._emit_session, SessionEvent.SUSPENDED)
        elif state == KazooState.CONNECTED:
            self._connected = True
            if not self._ever_connected:
                self._ever_connected = True
                self._post(self._emit_session, SessionEvent.CONNECTED)
            else:
                self._post(self._on_reconnected)
        elif state == KazooState.LOST and self._ever_connected:
            self._lost = True
            self._connected = False
            self._post(self._on_lost)
        return False

    def _on_reconnected(self) -> None:
        if self._lost or self._closing:
            return
        with self._watch_lock:
            paths = self._data_watched | self._child_watched
        for path in sorted(paths):
            self._arm(path)
        self._emit_session(SessionEvent.RECONNECTED)

    def _on_lost(self) -> None:
        with self._watch_lock:
            self._data_watched.clear()
            self._child_watched.clear()
        client = self._client
        if client is not None and self._loop is not None:
            # Never let kazoo open a fresh session behind the owner's back.
            self._loop.run_in_executor(None, _stop_quietly, client)
        self._emit_session(SessionEvent.LOST)

    def _emit_session(self, event: SessionEvent) -> None:
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event)

    def _emit(self, notification: Notification) -> None:
        for listener in list(self._listeners):
            try:
                listener(notification)
            except Exception:
                log.exception("listener failed on %s", notification)

    def _watch(self, event: WatchedEvent) -> None:
        # kazoo thread; one function for data and child watches (kazoo dedups per path).
        kind = _EVENT_TYPES.get(event.type)
        if kind is None or event.path is None or self._closing or self._lost:
            return  # EventType.NONE: connection reset; watches are re-armed on reconnect
        # Re-arm first, notify once the server has the new watch: a listener that re-reads
        # on the notification then either sees the latest state or is notified again.
        self._arm(event.path, Notification(kind, event.path))

    def _arm(self, path: str, notification: Notification | None = None) -> None:
        """(Re-)set the watches ``path`` needs, then deliver ``notification``.

        Non-blocking; any thread. When the watches cannot be set (disconnected, closing)
        the notification is delivered at once; a reconnect re-arms every watched path.
        """
        client = self._client
        with self._watch_lock:
            data = path in self._data_watched
            child = path in self._child_watched
        armable = client is not None and not (self._closing or self._lost or not self._connected)
        if not armable or not (data or child):
            if notification is not None:
                self._post(self._emit, notification)
            return
        assert client is not None
        remaining = [int(data) + int(child)]
        count_lock = threading.Lock()

        def done(_result: Any = None) -> None:
            with count_lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last and notification is not None:
                self._post(self._emit, notification)

        def on_children(result: Any) -> None:
            if isinstance(result.exception, NoNodeError):
                # No child watch on a missing node: watch for its creation instead.
                try:
                    client.exists_async(path, watch=self._watch).rawlink(done)
                    return
                except Exception:
                    log.debug("cannot watch %s for creation", path, exc_info=True)
            done()

        try:
            if data:
                client.exists_async(path, watch=self._watch).rawlink(done)
            if child:
                client.get_children_async(path, watch=self._watch).rawlink(on_children)
        except Exception:  # closed concurrently: nothing left to watch
            log.debug("cannot re-arm watch on %s", path, exc_info=True)
            if notification is not None:
                self._post(self._emit, notification)

    # -- the async bridge -----------------------------------------------------------------
    def _check(self) -> KazooClient:
        if self._closed or self._closing:
            raise StoreClosed("store is closed")
        if self._lost:
            raise SessionLost("ZooKeeper session expired")
        if self._client is None:
            raise StoreClosed("store not started")
        if not self._connected:
            raise ConnectionLoss("not connected to ZooKeeper (session suspended)")
        return self._client

    async def _call(self, start: Callable[[], Any], path: str | None) -> Any:
        """Run one kazoo ``*_async`` call; its completion is bridged onto the loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(value: Any, exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(value)

        def on_done(result: Any) -> None:  # kazoo thread
            exc = result.exception
            if exc is not None:
                exc = _translate(exc, path)
                value = None
            else:
                value = result.value
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, value, exc)

        try:
            start().rawlink(on_done)
        except Exception as exc:
            raise _translate(exc, path) from exc
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for swallows a cancellation that
            # races with the result, leaving the caller's task uncancellable.
            async with asyncio.timeout(self._operation_timeout_s):
                return await future
        except TimeoutError as exc:
            raise OperationTimeout("ZooKeeper operation timed out", path=path) from exc

    def _remember(self, path: str, *, data: bool = False, child: bool = False) -> None:
        with self._watch_lock:
            if data:
                self._data_watched.add(path)
            if child:
                self._child_watched.add(path)

    # -- MetadataStore --------------------------------------------------------------------
    async def get(self, path: str) -> GetResult | None:
        validate_path(path)
        client = self._check()
        self._remember(path, data=True)
        for _ in range(3):
            try:
                value, zstat = await self._call(
                    lambda: client.get_async(path, watch=self._watch), path
                )
                return GetResult(bytes(value or b""), _stat(zstat))
            except NotFound:
                # ZooKeeper sets no watch on a failed get: watch for the creation instead.
                zstat = await self._call(lambda: client.exists_async(path, watch=self._watch), path)
                if zstat is None:
                    return None
        return None

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)
        client = self._check()
        self._remember(path, data=True)
        zstat = await self._call(lambda: client.exists_async(path, watch=self._watch), path)
        return None if zstat is None else _stat(zstat)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        client = self._check()
        self._remember(path, child=True)
        try:
            names = await self._call(
                lambda: client.get_children_async(path, watch=self._watch), path
            )
        except NotFound:
            await self._call(lambda: client.exists_async(path, watch=self._watch), path)
            return []
        return sorted(names)

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
        client = self._check()
        value = bytes(value)
        if sequential or expected_version == CREATE_ONLY:
            return await self._create(client, path, value, ephemeral, sequential)
        if expected_version is not None:
            if expected_version < 0:
                raise ValueError(f"expected_version must be None, -1 or >= 0: {expected_version}")
            zstat = await self._call(
                lambda: client.set_async(path, value, version=expected_version), path
            )
            return PutResult(path, _stat(zstat))
        while True:  # unconditional: set, or create if absent; races just loop
            try:
                zstat = await self._call(lambda: client.set_async(path, value, version=-1), path)
                return PutResult(path, _stat(zstat))
            except NotFound:
                pass
            try:
                return await self._create(client, path, value, ephemeral, sequential=False)
            except AlreadyExists:
                continue

    async def _create(
        self, client: KazooClient, path: str, value: bytes, ephemeral: bool, sequential: bool
    ) -> PutResult:
        created, zstat = await self._call(
            lambda: client.create_async(
                path,
                value,
                ephemeral=ephemeral,
                sequence=sequential,
                makepath=True,
                include_data=True,
            ),
            path,
        )
        return PutResult(created, _stat(zstat))

    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        validate_path(path)
        if path == "/":
            raise NotFound("cannot delete the root", path=path)
        client = self._check()
        version = -1 if expected_version is None else expected_version
        await self._call(lambda: client.delete_async(path, version=version), path)


_START_SLICE_S = 0.1


def _stop_quietly(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:
        log.debug("kazoo stop failed", exc_info=True)


__all__ = ["ZooKeeperMetadataStore", "parse_connect_string"]
