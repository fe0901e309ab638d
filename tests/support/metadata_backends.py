"""Every ``MetadataStore`` implementation behind one small test interface.

Owns: ``MetadataBackend`` (open sessions on one shared tree, expire a session from the
server side, clean up) for: real ZooKeeper (unique chroot per test on the session-wide
server), the embedded store in-process (rocksdict in a temp dir), the embedded store over
TCP (``RemoteMetadataStore``), the in-memory store, the fault wrapper over memory, and the
routing store over two memory trees (a local and a configuration store). Tests
here wait with ``support.waiting.wait_for``.

Fixtures: ``metadata_backend`` (parametrized over all six) and ``metadata_backend_factory``
(build one by name), registered in ``support/fixtures.py``.
"""

from __future__ import annotations

import asyncio
import pathlib
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from magnetar.zk.embedded import EmbeddedMetadataServer
from magnetar.zk.embedded_client import RemoteMetadataStore
from magnetar.zk.faults import FaultInjectingStore
from magnetar.zk.memory import MemoryMetadataServer
from magnetar.zk.routing import PathRouter, RoutingMetadataStore
from magnetar.zk.store import MetadataStore
from magnetar.zk.zookeeper import ZooKeeperMetadataStore
from support.zookeeper import ZooKeeperServer, zookeeper_missing_reason

BACKENDS = ("zookeeper", "embedded", "embedded-remote", "memory", "faults", "routing")

ZK_SESSION_TIMEOUT_MS = 4_000
REMOTE_SESSION_TIMEOUT_MS = 1_500


class MetadataBackend:
    """Sessions on one shared tree of one implementation."""

    name = "abstract"

    def __init__(self) -> None:
        self.stores: list[MetadataStore] = []

    async def open(self) -> MetadataStore:
        store = await self._open()
        self.stores.append(store)
        return store

    async def _open(self) -> MetadataStore:
        raise NotImplementedError

    async def expire(self, store: MetadataStore) -> None:
        """Expire ``store``'s session on the server (as a timeout would)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        for store in reversed(self.stores):
            try:
                await asyncio.wait_for(store.close(), 10)
            except Exception:
                pass


class ZooKeeperBackend(MetadataBackend):
    name = "zookeeper"

    def __init__(self, server: ZooKeeperServer, session_timeout_ms: int = ZK_SESSION_TIMEOUT_MS):
        super().__init__()
        self.server = server
        self.url = f"{server.url}/test-{uuid.uuid4().hex[:12]}"
        self.session_timeout_ms = session_timeout_ms

    async def _open(self) -> MetadataStore:
        return await ZooKeeperMetadataStore.connect(
            self.url, session_timeout_ms=self.session_timeout_ms, operation_timeout_ms=10_000
        )

    async def expire(self, store: MetadataStore) -> None:
        assert isinstance(store, ZooKeeperMetadataStore)
        await store.force_expire()


class MemoryBackend(MetadataBackend):
    name = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.server = MemoryMetadataServer()

    async def _open(self) -> MetadataStore:
        return self.server.connect()

    async def expire(self, store: MetadataStore) -> None:
        self.server.expire_session(store.session_id)


class FaultsBackend(MemoryBackend):
    name = "faults"

    async def _open(self) -> MetadataStore:
        return FaultInjectingStore(self.server.connect())


CONTRACT_ROUTER = PathRouter(
    configuration_roots=("/cfg", "/w", "/cas", "/race", "/seq", "/kids", "/d", "/fifo", "/rm"),
    local_exceptions=(),
)
"""The contract's paths split over both stores: ephemeral and session-expiry paths stay
local (the session is the local store's), the others go either way."""


class RoutingBackend(MetadataBackend):
    """``RoutingMetadataStore`` sessions over a local and a configuration memory tree."""

    name = "routing"

    def __init__(self) -> None:
        super().__init__()
        self.local = MemoryMetadataServer()
        self.configuration = MemoryMetadataServer(first_session_id=1_000_000)

    async def _open(self) -> MetadataStore:
        return RoutingMetadataStore(
            self.local.connect(), self.configuration.connect(), router=CONTRACT_ROUTER
        )

    async def expire(self, store: MetadataStore) -> None:
        self.local.expire_session(store.session_id)


class EmbeddedBackend(MetadataBackend):
    name = "embedded"

    def __init__(self, data_dir: pathlib.Path) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.server = EmbeddedMetadataServer(data_dir)  # durable: the standalone setting

    async def _open(self) -> MetadataStore:
        return self.server.connect()

    async def expire(self, store: MetadataStore) -> None:
        self.server.expire_session(store.session_id)

    async def aclose(self) -> None:
        await super().aclose()
        await self.server.close()


class EmbeddedRemoteBackend(EmbeddedBackend):
    name = "embedded-remote"

    def __init__(
        self, data_dir: pathlib.Path, session_timeout_ms: int = REMOTE_SESSION_TIMEOUT_MS
    ) -> None:
        super().__init__(data_dir)
        self.session_timeout_ms = session_timeout_ms
        self.url = ""

    async def _open(self) -> MetadataStore:
        if not self.url:
            self.url = await self.server.start_serving("127.0.0.1", 0)
        return await RemoteMetadataStore.connect(
            self.url, session_timeout_ms=self.session_timeout_ms
        )


def make_backend(
    name: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> MetadataBackend:
    if name == "zookeeper":
        reason = zookeeper_missing_reason()
        if reason is not None:
            pytest.skip(reason)
        server = request.getfixturevalue("zookeeper_server")
        return ZooKeeperBackend(server)
    if name == "embedded":
        return EmbeddedBackend(tmp_path / f"embedded-{uuid.uuid4().hex[:8]}")
    if name == "embedded-remote":
        return EmbeddedRemoteBackend(tmp_path / f"embedded-{uuid.uuid4().hex[:8]}")
    if name == "memory":
        return MemoryBackend()
    if name == "faults":
        return FaultsBackend()
    if name == "routing":
        return RoutingBackend()
    raise ValueError(name)


@pytest.fixture(params=BACKENDS)
async def metadata_backend(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> AsyncIterator[MetadataBackend]:
    """One backend of each implementation (the test runs once per implementation)."""
    backend = make_backend(request.param, tmp_path, request)
    try:
        yield backend
    finally:
        await backend.aclose()


@pytest.fixture
async def metadata_backend_factory(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> AsyncIterator[Callable[[str], MetadataBackend]]:
    """Build backends by name inside a test; all closed at teardown."""
    made: list[MetadataBackend] = []

    def make(name: str) -> MetadataBackend:
        backend = make_backend(name, tmp_path, request)
        made.append(backend)
        return backend

    try:
        yield make
    finally:
        for backend in reversed(made):
            await backend.aclose()
