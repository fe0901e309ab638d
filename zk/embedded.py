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

Durability (``sync_writes=True``, the default): a ``put``/``delete`` returns only after its
change is fsynced. Changes are group-committed: one RocksDB write batch with one sync per
round, written by a worker thread, so the event loop never blocks on the disk and concurrent
writers share a sync. A change is visible to other sessions as soon as it is applied in
memory, a little before it is durable (ZooKeeper shows only committed data); after a crash,
at most changes whose ``put`` had not yet returned are lost. ``sync_writes=False`` writes
through without fsync (tests): survives a process crash, not a machine crash.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from dataclasses import dataclass

import rocksdict

from magnetar.clock import Clock
from magnetar.zk.embedded_server import EmbeddedSessionServer
from magnetar.zk.errors import MetadataError
from magnetar.zk.memory import MemoryMetadataServer, MemoryMetadataStore, Node
from magnetar.zk.store import PutResult, name_of, parent_of

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


class DurableMetadataStore(MemoryMetadataStore):
    """A session whose writes return once they are durable (see the module docstring)."""

    def __init__(self, server: _PersistedTree, session_id: int) -> None:
        super().__init__(server, session_id)
        self._owner = server.owner

    async def put(
        self,
        path: str,
        value: bytes,
        *,
        expected_version: int | None = None,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> PutResult:
        result = await super().put(
            path,
            value,
            expected_version=expected_version,
            ephemeral=ephemeral,
            sequential=sequential,
        )
        await self._owner.durable()
        return result

    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        await super().delete(path, expected_version=expected_version)
        await self._owner.durable()


class _PersistedTree(MemoryMetadataServer):
    """The shared tree; its sessions are ``DurableMetadataStore`` s."""

    def __init__(self, owner: EmbeddedMetadataServer, first_session_id: int) -> None:
        super().__init__(first_session_id=first_session_id, on_change=owner._persist)
        self.owner = owner

    def connect(self) -> MemoryMetadataStore:
        return DurableMetadataStore(self, next(self._session_ids))


@dataclass(frozen=True, slots=True)
class EmbeddedStatistics:
    nodes: int
    batches_written: int
    records_written: int
    pending_records: int


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
        self._sync_writes = sync_writes
        self._pending: dict[bytes, bytes | None] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._batches = 0
        self._records = 0
        self._closed = False
        self._loading = True
        epoch = self._bump_epoch()
        self.server: MemoryMetadataServer = _PersistedTree(
            self, (epoch << _SESSION_EPOCH_SHIFT) | 1
        )
        self._load()
        self._loading = False
        self._sessions: EmbeddedSessionServer | None = None

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
        """``on_change`` hook: queue the records of ``path`` and its parent."""
        if self._closed:
            return
        writes: dict[bytes, bytes | None] = {}
        if node is None:
            writes[path.encode()] = None
        elif not node.ephemeral_owner:
            writes[path.encode()] = encode_node(node)
        if path != "/":
            # The parent's sequence counter may have moved (sequential create).
            parent_path = parent_of(path)
            parent = self.server.nodes.get(parent_path) if not self._loading else None
            if parent is not None and not parent.ephemeral_owner:
                writes[parent_path.encode()] = encode_node(parent)
        if not writes:
            return
        loop = _running_loop()
        if not self._sync_writes or loop is None:
            self._write(writes)  # no fsync to wait for, or no loop to wait on
            return
        self._pending.update(writes)
        self._schedule_flush(loop)

    def _write(self, writes: dict[bytes, bytes | None]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in writes.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._db.write(batch)
        self._batches += 1
        self._records += len(writes)

    def _schedule_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush_loop(), name="embedded-metadata-flush")

    async def _flush_loop(self) -> None:
        """Group commit: one batch, one sync per round; one round in flight at a time."""
        while self._pending or self._waiters:
            batch, self._pending = self._pending, {}
            waiters, self._waiters = self._waiters, []
            error: BaseException | None = None
            if batch:
                try:
                    await asyncio.to_thread(self._write, batch)
                except Exception as exc:  # disk full, I/O error: fail the writers
                    log.exception("embedded metadata: write failed")
                    error = MetadataError(f"embedded metadata write failed: {exc}")
            for waiter in waiters:
                if waiter.done():
                    continue
                if error is not None:
                    waiter.set_exception(error)
                else:
                    waiter.set_result(None)

    async def durable(self) -> None:
        """Return once every change applied so far is on disk."""
        if not self._pending and (self._flusher is None or self._flusher.done()):
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        self._schedule_flush(loop)
        await waiter

    def statistics(self) -> EmbeddedStatistics:
        return EmbeddedStatistics(
            nodes=len(self.server.nodes),
            batches_written=self._batches,
            records_written=self._records,
            pending_records=len(self._pending),
        )

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
        await self.durable()
        if self._flusher is not None:
            await asyncio.wait({self._flusher})
        self._closed = True
        self._db.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


__all__ = [
    "DurableMetadataStore",
    "EmbeddedMetadataServer",
    "EmbeddedStatistics",
    "decode_node",
    "encode_node",
]
