"""In-process metadata store: the reference implementation of ``MetadataStore``.

Owns: a ``MemoryMetadataServer`` (the tree, versions, sequential counters, sessions) and
``MemoryMetadataStore`` (one session on it). Several stores on one server behave like
several ZooKeeper clients: CAS races, ephemeral nodes removed when their session closes or
is expired with ``expire_session``. Used by unit tiers and as the core of the embedded
store, which adds persistence through the ``on_change`` hook.
Must not know: paths' meaning; persistence; asyncio beyond scheduling listener calls.

Invariants: a node's parent exists; versions only grow; ephemeral nodes have no children
and belong to a live session.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.zk.errors import (
    AlreadyExists,
    BadVersion,
    InvalidPath,
    NotEmpty,
    NotFound,
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
    name_of,
    parent_of,
    validate_path,
)


@dataclass(slots=True)
class Node:
    value: bytes
    version: int
    created_ms: int
    modified_ms: int
    ephemeral_owner: int = 0
    children: set[str] = field(default_factory=set)
    next_sequence: int = 0

    def stat(self) -> Stat:
        return Stat(
            self.version,
            self.created_ms,
            self.modified_ms,
            self.ephemeral_owner,
            len(self.children),
        )


ChangeHook = Callable[[str, "Node | None"], None]


class MemoryMetadataServer:
    """The shared tree. All stores of one server must run on one event loop."""

    def __init__(self, *, first_session_id: int = 1, on_change: ChangeHook | None = None) -> None:
        now = _now_ms()
        self.nodes: dict[str, Node] = {"/": Node(b"", 0, now, now)}
        self._session_ids = itertools.count(first_session_id)
        self._sessions: dict[int, MemoryMetadataStore] = {}
        self._on_change = on_change

    # -- sessions ---------------------------------------------------------------------------
    def connect(self) -> MemoryMetadataStore:
        return MemoryMetadataStore(self, next(self._session_ids))

    def _register(self, store: MemoryMetadataStore) -> None:
        self._sessions[store.session_id] = store

    def end_session(self, session_id: int) -> None:
        """Remove a session and its ephemeral nodes (close or expiry)."""
        self._sessions.pop(session_id, None)
        for path in [p for p, n in self.nodes.items() if n.ephemeral_owner == session_id]:
            self._remove(path)

    def expire_session(self, session_id: int) -> None:
        """Expire a session as ZooKeeper would: its store sees LOST and fails from then on."""
        store = self._sessions.get(session_id)
        self.end_session(session_id)
        if store is not None:
            store._lose_session()

    @property
    def live_sessions(self) -> set[int]:
        return set(self._sessions)

    # -- tree operations (synchronous; the store awaits nothing between check and change) ----
    def put(
        self,
        session_id: int,
        path: str,
        value: bytes,
        *,
        expected_version: int | None,
        ephemeral: bool,
        sequential: bool,
    ) -> PutResult:
        validate_path(path)
        if path == "/":
            raise InvalidPath("cannot write the root", path=path)
        if sequential:
            parent = self._ensure_parents(path)
            path = f"{path}{parent.next_sequence:010d}"
            parent.next_sequence += 1
        node = self.nodes.get(path)
        now = _now_ms()
        if node is None:
            if expected_version is not None and expected_version >= 0:
                raise NotFound("node does not exist", path=path)
            parent = self._ensure_parents(path)
            if parent.ephemeral_owner:
                raise InvalidPath("ephemeral nodes cannot have children", path=path)
            node = Node(value, 0, now, now, session_id if ephemeral else 0)
            self.nodes[path] = node
            parent.children.add(name_of(path))
            self._changed(path, node, NotificationType.CREATED)
            self._changed(
                parent_of(path), self.nodes[parent_of(path)], NotificationType.CHILDREN_CHANGED
            )
            return PutResult(path, node.stat())
        if expected_version == CREATE_ONLY:
            raise AlreadyExists("node exists", path=path)
        if expected_version is not None and expected_version != node.version:
            raise BadVersion(
                f"expected version {expected_version}, found {node.version}", path=path
            )
        node.value = value
        node.version += 1
        node.modified_ms = now
        self._changed(path, node, NotificationType.MODIFIED)
        return PutResult(path, node.stat())

    def delete(self, path: str, expected_version: int | None) -> None:
        validate_path(path)
        node = self.nodes.get(path)
        if node is None or path == "/":
            raise NotFound("node does not exist", path=path)
        if expected_version is not None and expected_version != node.version:
            raise BadVersion(
                f"expected version {expected_version}, found {node.version}", path=path
            )
        if node.children:
            raise NotEmpty("node has children", path=path)
        self._remove(path)

    def _remove(self, path: str) -> None:
        self.nodes.pop(path, None)
        parent_path = parent_of(path)
        parent = self.nodes.get(parent_path)
        if parent is not None:
            parent.children.discard(name_of(path))
        self._changed(path, None, NotificationType.DELETED)
        if parent is not None:
            self._changed(parent_path, parent, NotificationType.CHILDREN_CHANGED)

    def _ensure_parents(self, path: str) -> Node:
        parent_path = parent_of(path)
        parent = self.nodes.get(parent_path)
        if parent is None:
            grand = self._ensure_parents(parent_path)
            now = _now_ms()
            parent = Node(b"", 0, now, now)
            self.nodes[parent_path] = parent
            grand.children.add(name_of(parent_path))
            self._changed(parent_path, parent, NotificationType.CREATED)
        return parent

    def _changed(self, path: str, node: Node | None, kind: NotificationType) -> None:
        if self._on_change is not None and kind is not NotificationType.CHILDREN_CHANGED:
            self._on_change(path, node)
        notification = Notification(kind, path)
        for store in list(self._sessions.values()):
            store._notify(notification)


class MemoryMetadataStore(MetadataStore):
    """One session on a ``MemoryMetadataServer``."""

    def __init__(self, server: MemoryMetadataServer, session_id: int) -> None:
        self._server = server
        self._session_id = session_id
        self._listeners: list[Listener] = []
        self._session_listeners: list[SessionListener] = []
        self._closed = False
        self._lost = False
        server._register(self)

    @property
    def connected(self) -> bool:
        return not self._lost and not self._closed

    def __repr__(self) -> str:
        state = "lost" if self._lost else "closed" if self._closed else "open"
        return f"<MemoryMetadataStore session={self._session_id} {state}>"

    @property
    def session_id(self) -> int:
        return self._session_id

    def _check(self) -> None:
        if self._lost:
            raise SessionLost("session expired")
        if self._closed:
            raise StoreClosed("store is closed")

    async def get(self, path: str) -> GetResult | None:
        self._check()
        node = self._server.nodes.get(validate_path(path))
        return None if node is None else GetResult(node.value, node.stat())

    async def exists(self, path: str) -> Stat | None:
        self._check()
        node = self._server.nodes.get(validate_path(path))
        return None if node is None else node.stat()

    async def children(self, path: str) -> list[str]:
        self._check()
        node = self._server.nodes.get(validate_path(path))
        return [] if node is None else sorted(node.children)

    async def put(
        self,
        path: str,
        value: bytes,
        *,
        expected_version: int | None = None,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> PutResult:
        self._check()
        return self._server.put(
            self._session_id,
            path,
            bytes(value),
            expected_version=expected_version,
            ephemeral=ephemeral,
            sequential=sequential,
        )

    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        self._check()
        self._server.delete(path, expected_version)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.end_session(self._session_id)

    # -- called by the server ---------------------------------------------------------------
    def _notify(self, notification: Notification) -> None:
        if not self._listeners:
            return
        loop = _loop_or_none()
        for listener in list(self._listeners):
            if loop is None:
                listener(notification)
            else:
                loop.call_soon(listener, notification)

    def _lose_session(self) -> None:
        self._lost = True
        loop = _loop_or_none()
        for listener in list(self._session_listeners):
            if loop is None:
                listener(SessionEvent.LOST)
            else:
                loop.call_soon(listener, SessionEvent.LOST)


def _loop_or_none() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


__all__ = ["MemoryMetadataServer", "MemoryMetadataStore", "Node"]
