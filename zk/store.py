"""The asynchronous metadata-store interface, modelled on Pulsar's ``MetadataStore``.

Owns: the abstract ``MetadataStore``, its value types (``Stat``, ``GetResult``,
``Notification``, ``SessionEvent``) and path validation. Implementations live in
``memory.py`` (in-process, for unit tiers), ``embedded.py`` (persisted, for standalone),
``zookeeper.py`` (kazoo; the only module importing it) and ``faults.py`` (a wrapper).
Must not know: what the paths mean (see ``paths.py``) or who calls it.

Semantics every implementation keeps (checked by ``tests/contract/test_metadata_store.py``):
- ``put`` creates missing parents as empty persistent nodes.
- ``put(expected_version=None)`` writes unconditionally; ``-1`` means create-only
  (``AlreadyExists``); ``n >= 0`` is a compare-and-set (``BadVersion``, or ``NotFound`` if gone).
  A created node has version 0; each successful write adds 1.
- ``sequential=True`` appends a 10-digit, per-parent, increasing counter to the name and
  returns the created path. ``ephemeral=True`` ties the node to this store's session.
- ``delete`` refuses a node with children (``NotEmpty``); ``delete_recursive`` does not.
- Listeners receive a ``Notification`` for every change to a path this store has read with
  ``get``/``exists``/``children`` (ZooKeeper watches); implementations may deliver more.
  Listeners run on the store's asyncio loop and must not block.
- Session listeners receive CONNECTED, SUSPENDED (connection lost, session may survive),
  RECONNECTED and LOST (session expired: ephemeral nodes gone; reopen the store).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.zk.errors import InvalidPath

CREATE_ONLY = -1
"""``expected_version`` value for create-only puts."""


@dataclass(frozen=True, slots=True)
class Stat:
    version: int
    created_ms: int
    modified_ms: int
    ephemeral_owner: int  # session id owning an ephemeral node; 0 for persistent nodes
    num_children: int = 0

    @property
    def ephemeral(self) -> bool:
        return self.ephemeral_owner != 0


@dataclass(frozen=True, slots=True)
class GetResult:
    value: bytes
    stat: Stat


@dataclass(frozen=True, slots=True)
class PutResult:
    path: str  # differs from the requested path for sequential nodes
    stat: Stat


class NotificationType(enum.Enum):
    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"
    CHILDREN_CHANGED = "children_changed"


@dataclass(frozen=True, slots=True)
class Notification:
    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    RECONNECTED = "reconnected"
    LOST = "lost"


Listener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]


def validate_path(path: str) -> str:
    """Return ``path`` if it is a valid absolute node path, else raise ``InvalidPath``."""
    if not path.startswith("/"):
        raise InvalidPath("path must be absolute", path=path)
    if path != "/" and (path.endswith("/") or "//" in path):
        raise InvalidPath("path has an empty segment", path=path)
    if "\x00" in path:
        raise InvalidPath("path contains NUL", path=path)
    return path


def parent_of(path: str) -> str:
    head, _, _ = path.rpartition("/")
    return head or "/"


def name_of(path: str) -> str:
    return path.rpartition("/")[2]


class MetadataStore(abc.ABC):
    """An asynchronous, session-scoped view of a hierarchical metadata service."""

    @property
    @abc.abstractmethod
    def session_id(self) -> int:
        """The id of this store's session (owner of its ephemeral nodes)."""

    @property
    def connected(self) -> bool:
        """Whether the session can reach its service now (in-process stores always can)."""
        return True

    @abc.abstractmethod
    async def get(self, path: str) -> GetResult | None:
        """The node's value and stat, or None if it does not exist."""

    @abc.abstractmethod
    async def exists(self, path: str) -> Stat | None:
        """The node's stat, or None."""

    @abc.abstractmethod
    async def children(self, path: str) -> list[str]:
        """Sorted child names; an empty list if the node does not exist."""

    @abc.abstractmethod
    async def put(
        self,
        path: str,
        value: bytes,
        *,
        expected_version: int | None = None,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> PutResult:
        """Create or update a node (see the module docstring for the version rules)."""

    @abc.abstractmethod
    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        """Delete a childless node; ``NotFound``, ``BadVersion``, ``NotEmpty``."""

    async def delete_recursive(self, path: str) -> None:
        """Delete a node and everything below it; absent nodes are ignored."""
        for child in await self.children(path):
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        try:
            await self.delete(path)
        except Exception as exc:  # NotFound: someone else deleted it first
            from magnetar.zk.errors import NotFound

            if not isinstance(exc, NotFound):
                raise

    # Listener registries: every implementation keeps these two lists (set in its __init__)
    # and calls the registered functions on its event loop.
    _listeners: list[Listener]
    _session_listeners: list[SessionListener]

    def add_listener(self, listener: Listener) -> None:
        """Register a change listener (see the module docstring)."""
        self._listeners.append(listener)

    def add_session_listener(self, listener: SessionListener) -> None:
        """Register a session-event listener."""
        self._session_listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Unregister a change listener (absent: ignored). Recipes use this on close."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def remove_session_listener(self, listener: SessionListener) -> None:
        """Unregister a session-event listener (absent: ignored)."""
        if listener in self._session_listeners:
            self._session_listeners.remove(listener)

    @abc.abstractmethod
    async def close(self) -> None:
        """Close the session; its ephemeral nodes are removed. Idempotent."""

    async def __aenter__(self) -> MetadataStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = [
    "CREATE_ONLY",
    "GetResult",
    "Listener",
    "MetadataStore",
    "Notification",
    "NotificationType",
    "PutResult",
    "SessionEvent",
    "SessionListener",
    "Stat",
    "name_of",
    "parent_of",
    "validate_path",
]
