"""Open a ``MetadataStore`` from a URL: the one entry point servers and tools use.

Owns: URL schemes and the process-wide registries of shared in-process servers.
Must not know: what the caller stores.

Schemes:
- ``zk://host:port[,host:port...][/chroot]`` -> ``ZooKeeperMetadataStore`` (own session).
- ``embedded://host:port`` -> ``RemoteMetadataStore``: a session on an embedded server that
  another process (``magnetar standalone``) serves.
- ``embedded-file:///abs/path`` -> a session on the process-wide ``EmbeddedMetadataServer``
  persisted in that directory (opened on first use; ``close_shared_servers`` closes them).
- ``memory://[name]`` -> a session on the process-wide ``MemoryMetadataServer`` ``name``
  (default ``default``): nothing persisted; stores opened with the same name share a tree.

Options (keyword arguments) apply where they mean something: ``session_timeout_ms``,
``operation_timeout_ms``, ``connect_timeout_ms`` (zk, embedded); ``sync_writes``
(embedded-file). Unknown options raise ``TypeError``.
"""

from __future__ import annotations

from typing import Any

from magnetar.zk.embedded import EmbeddedMetadataServer
from magnetar.zk.embedded_client import RemoteMetadataStore
from magnetar.zk.memory import MemoryMetadataServer
from magnetar.zk.store import MetadataStore
from magnetar.zk.zookeeper import ZooKeeperMetadataStore

_SESSION_OPTIONS = frozenset({"session_timeout_ms", "operation_timeout_ms", "connect_timeout_ms"})
_FILE_OPTIONS = frozenset({"sync_writes"})

_memory_servers: dict[str, MemoryMetadataServer] = {}
_embedded_servers: dict[str, EmbeddedMetadataServer] = {}


def memory_server(name: str = "default") -> MemoryMetadataServer:
    """The process-wide in-memory server called ``name`` (created on first use)."""
    server = _memory_servers.get(name)
    if server is None:
        server = _memory_servers[name] = MemoryMetadataServer()
    return server


def embedded_server(path: str, *, sync_writes: bool = True) -> EmbeddedMetadataServer:
    """The process-wide embedded server persisted at ``path`` (opened on first use)."""
    server = _embedded_servers.get(path)
    if server is None:
        server = _embedded_servers[path] = EmbeddedMetadataServer(path, sync_writes=sync_writes)
    return server


async def close_shared_servers() -> None:
    """Close every shared embedded server and forget every shared memory server."""
    servers = list(_embedded_servers.values())
    _embedded_servers.clear()
    _memory_servers.clear()
    for server in servers:
        await server.close()


def _only(options: dict[str, Any], allowed: frozenset[str], url: str) -> dict[str, Any]:
    unknown = set(options) - allowed
    if unknown:
        raise TypeError(f"options {sorted(unknown)} do not apply to {url!r}")
    return options


async def open_metadata_store(url: str, **options: Any) -> MetadataStore:
    """Open a new session on the metadata service named by ``url`` (see the module doc)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"metadata URL needs a scheme (zk://, embedded://, ...): {url!r}")
    if scheme == "zk":
        return await ZooKeeperMetadataStore.connect(url, **_only(options, _SESSION_OPTIONS, url))
    if scheme == "embedded":
        return await RemoteMetadataStore.connect(url, **_only(options, _SESSION_OPTIONS, url))
    if scheme == "embedded-file":
        if not rest.startswith("/"):
            raise ValueError(f"embedded-file needs an absolute path: {url!r}")
        opts = _only(options, _FILE_OPTIONS, url)
        return embedded_server(rest, **opts).connect()
    if scheme == "memory":
        _only(options, _SESSION_OPTIONS, url)  # accepted for symmetry, meaningless here
        return memory_server(rest.strip("/") or "default").connect()
    raise ValueError(f"unknown metadata URL scheme {scheme!r} in {url!r}")


__all__ = [
    "close_shared_servers",
    "embedded_server",
    "memory_server",
    "open_metadata_store",
]
