"""The embedded metadata store of ``magnetar standalone``: in-process, persisted with rocksdict.

Owns: ``EmbeddedMetadataServer`` = a ``MemoryMetadataServer`` whose every change of a
persistent node is written through (``on_change`` hook) to a RocksDB directory, reloaded
on open; plus, on request, an ``EmbeddedSessionServer`` so child processes (bookies, the
broker) hold their own sessions over ``embedded://127.0.0.1:PORT``. In-process users take
sessions with ``connect()``. The only module of ``magnetar.zk`` importing rocksdict.
Must not know: what the paths mean.

Invariants: ephemeral nodes are never persisted, so none exists after a restart; a
persisted node's parent is persisted (parents are created persistent); sequence counters
are persisted with their parent, so sequential names never repeat across restarts; session
ids of a new run never collide with a previous run's (an epoch is persisted and bumped).

Record layout (key = the path, UTF-8)::

    version: i64 | created_ms: i64 | modified_ms: i64 | next_sequence: i64 | value bytes

Writes are synchronous (``sync_writes=True``: one fsync per change, about 0.25 ms here), so
an acknowledged metadata change survives a machine crash, as with ZooKeeper.
"""

from __future__ import annotations

import logging
import os
import struct

import rocksdict

from magnetar.zk.clock import Clock
from magnetar.zk.embedded_server import EmbeddedSessionServer
from magnetar.zk.errors import MetadataError
from magnetar.zk.memory import MemoryMetadataServer, MemoryMetadataStore, Node
from magnetar.zk.store import name_of, parent_of

log = logging.getLogger(__name__)

_RECORD = struct.Struct(">qqqq")
_EPOCH_KEY = b"\x00magnetar/session-epoch"
_SESSION_EPOCH_SHIFT = 32


def encode_node(node: Node) -> bytes:
    return (
        _RECORD.pack(node.version, node.created_ms, node.modified_ms, node.next_sequence)
        + node.value
    )


def decode_node(data: bytes) -> Node:
    version, created_ms, modified_ms, next_sequence = _RECORD.unpack_from(data)
    return Node(
        value=bytes(data[_RECORD.size :]),
        version=version,
        created_ms=created_ms,
        modified_ms=modified_ms,
        next_sequence=next_sequence,
    )


class EmbeddedMetadataServer:
    """A persisted metadata tree, serving in-process and (optionally) TCP sessions."""

    def __init__(self, data_dir: str | os.PathLike[str], *, sync_writes: bool = True) -> None:
        self.data_dir = os.fspath(data_dir)
        os.makedirs(self.data_dir, exist_ok=True)
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        try:
            self._db = rocksdict.Rdict(self.data_dir, options)
        except Exception as exc:  # RocksDB: lock held by another process, corruption
            raise MetadataError(f"cannot open embedded metadata at {self.data_dir}: {exc}") from exc
        write_options = rocksdict.WriteOptions()
        write_options.sync = sync_writes
        self._db.set_write_options(write_options)
        epoch = self._bump_epoch()
        self.server = MemoryMetadataServer(
            first_session_id=(epoch << _SESSION_EPOCH_SHIFT) | 1, on_change=self._persist
        )
        self._load()
        self._sessions: EmbeddedSessionServer | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<EmbeddedMetadataServer {self.data_dir} nodes={len(self.server.nodes)}>"

    # -- persistence ------------------------------------------------------------------------
    def _bump_epoch(self) -> int:
        raw = self._db.get(_EPOCH_KEY)
        epoch = 1 if raw is None else int.from_bytes(raw, "big") + 1
        self._db.put(_EPOCH_KEY, epoch.to_bytes(8, "big"))
        return epoch

    def _load(self) -> None:
        nodes = self.server.nodes
        loaded = 0
        for key, data in self._db.items():
            assert isinstance(key, bytes) and isinstance(data, bytes)  # raw mode
            if key.startswith(b"\x00"):
                continue
            nodes[key.decode()] = decode_node(data)
            loaded += 1
        for path in sorted(nodes, key=len):  # parents before children
            if path == "/":
                continue
            parent = nodes.get(parent_of(path))
            if parent is None:  # cannot happen with write-through; repair rather than fail
                log.warning("embedded metadata: %s had no parent; recreating it", path)
                parent = Node(b"", 0, nodes[path].created_ms, nodes[path].created_ms)
                nodes[parent_of(path)] = parent
                self._persist(parent_of(path), parent)
            parent.children.add(name_of(path))
        log.info("embedded metadata: loaded %d nodes from %s", loaded, self.data_dir)

    def _persist(self, path: str, node: Node | None) -> None:
        if self._closed:
            return
        key = path.encode()
        if node is None:
            self._db.delete(key)
        elif not node.ephemeral_owner:
            self._db.put(key, encode_node(node))
        if path != "/":
            # The parent's sequence counter may have moved (sequential create).
            parent_path = parent_of(path)
            parent = self.server.nodes.get(parent_path)
            if parent is not None and not parent.ephemeral_owner:
                self._db.put(parent_path.encode(), encode_node(parent))

    # -- sessions ---------------------------------------------------------------------------
    def connect(self) -> MemoryMetadataStore:
        """A new in-process session (must be used on the loop that serves TCP sessions)."""
        if self._closed:
            raise MetadataError("embedded metadata server is closed")
        return self.server.connect()

    def expire_session(self, session_id: int) -> None:
        """Expire any session, local or remote (tests, administrative kill)."""
        if self._sessions is not None and session_id in self._sessions.sessions:
            self._sessions.expire_session(session_id)
        else:
            self.server.expire_session(session_id)

    async def start_serving(
        self, host: str = "127.0.0.1", port: int = 0, *, clock: Clock | None = None
    ) -> str:
        """Serve sessions over TCP; returns the ``embedded://host:port`` URL."""
        if self._sessions is None:
            self._sessions = EmbeddedSessionServer(self.server, clock=clock)
            await self._sessions.start(host, port)
        return self._sessions.url

    @property
    def session_server(self) -> EmbeddedSessionServer | None:
        return self._sessions

    @property
    def url(self) -> str | None:
        return None if self._sessions is None else self._sessions.url

    async def close(self) -> None:
        """Stop serving, end every session (their ephemerals are not persisted), close the db."""
        if self._closed:
            return
        if self._sessions is not None:
            await self._sessions.close()
        self._closed = True
        self._db.close()


__all__ = ["EmbeddedMetadataServer", "decode_node", "encode_node"]
