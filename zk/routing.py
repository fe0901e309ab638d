"""A cluster's metadata over two stores: its local store and the instance's configuration store.

Owns: ``RoutingMetadataStore(local, configuration)``, one ``MetadataStore`` that sends each
path to the store that owns it, as Pulsar splits ``metadataStoreUrl`` (per cluster: bundle
ownership, managed ledgers and cursors, bookie registrations, load reports) from
``configurationMetadataStoreUrl`` (once for all clusters of an instance: clusters, tenants,
namespace and topic policies, partitioned-topic metadata); and ``PathRouter``, the rule
(every path under ``/admin`` goes to the configuration store, except
``/admin/local-policies``, which Pulsar keeps per cluster).

Invariants: a path is served by exactly one inner store, always the same one; a path and
its parents are in the same store (a configuration root's parents exist in both, so
``children`` of such a parent is the union of both stores' answers); the session (its id,
its ephemeral nodes, its session events) is the local store's: nothing the broker owns by
an ephemeral node lives in the configuration store. When the configuration store's session
is lost and a ``reopen_configuration`` factory was given, a new session replaces it (the
broker keeps serving from the local store meanwhile; configuration operations fail with
the retriable ``ConnectionLoss`` until the new session is up, and watches are re-armed by
the next read, as after any ZooKeeper session change).
Must not know: what the paths mean beyond the routing rule; the implementations it wraps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from magnetar.clock import Clock, SystemClock
from magnetar.zk.errors import ConnectionLoss, SessionLost, StoreClosed
from magnetar.zk.store import (
    GetResult,
    Listener,
    MetadataStore,
    Notification,
    PutResult,
    SessionEvent,
    SessionListener,
    Stat,
    validate_path,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

CONFIGURATION_ROOTS = ("/admin",)
"""Subtrees kept once for the whole instance (Pulsar's configuration store)."""
LOCAL_UNDER_CONFIGURATION = ("/admin/local-policies",)
"""Subtrees of a configuration root that stay per cluster (Pulsar's ``LocalPolicies``)."""


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


@dataclass(frozen=True, slots=True)
class PathRouter:
    """Which paths belong to the configuration store."""

    configuration_roots: tuple[str, ...] = CONFIGURATION_ROOTS
    local_exceptions: tuple[str, ...] = LOCAL_UNDER_CONFIGURATION

    def is_configuration(self, path: str) -> bool:
        if any(_under(path, root) for root in self.local_exceptions):
            return False
        return any(_under(path, root) for root in self.configuration_roots)

    def is_shared_parent(self, path: str) -> bool:
        """A strict ancestor of a configuration root (``/``): present in both stores."""
        prefix = path.rstrip("/") + "/"
        return any(root.startswith(prefix) for root in self.configuration_roots)


DEFAULT_ROUTER = PathRouter()

ReopenStore = Callable[[], Awaitable[MetadataStore]]


class RoutingMetadataStore(MetadataStore):
    """See the module docstring. Closing it closes both inner stores."""

    def __init__(
        self,
        local: MetadataStore,
        configuration: MetadataStore,
        *,
        router: PathRouter = DEFAULT_ROUTER,
        reopen_configuration: ReopenStore | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._local = local
        self._clock: Clock = clock or SystemClock()
        self._configuration: MetadataStore | None = configuration
        self._router = router
        self._reopen = reopen_configuration
        self._reopening: asyncio.Task[None] | None = None
        self._closed = False
        self._listeners: list[Listener] = []
        self._session_listeners: list[SessionListener] = []
        self.configuration_sessions = 1
        """Configuration sessions opened so far (1 + the reopens after a lost session)."""
        local.add_listener(self._forward)
        local.add_session_listener(self._forward_session)
        self._attach(configuration)

    def __repr__(self) -> str:
        return f"<RoutingMetadataStore local={self._local!r} configuration={self._configuration!r}>"

    @property
    def local(self) -> MetadataStore:
        return self._local

    @property
    def configuration(self) -> MetadataStore:
        """The current configuration session (``ConnectionLoss`` while it is being reopened)."""
        store = self._configuration
        if store is None:
            raise ConnectionLoss("the configuration store session is being reopened")
        return store

    @property
    def session_id(self) -> int:
        return self._local.session_id

    @property
    def connected(self) -> bool:
        store = self._configuration
        return self._local.connected and store is not None and store.connected

    # -- routing ------------------------------------------------------------------------------
    def _store_for(self, path: str) -> MetadataStore:
        if self._closed:
            raise StoreClosed("store is closed", path=path)
        validate_path(path)
        if self._router.is_configuration(path):
            store = self._configuration
            if store is None:
                raise ConnectionLoss("the configuration store session is being reopened", path=path)
            return store
        return self._local

    async def _call(self, path: str, call: Callable[[MetadataStore], Awaitable[T]]) -> T:
        store = self._store_for(path)
        if store is self._local:
            return await call(store)
        try:
            return await call(store)
        except SessionLost as exc:  # being replaced (see _configuration_session): retry later
            raise ConnectionLoss("the configuration store session was lost", path=path) from exc

    async def get(self, path: str) -> GetResult | None:
        return await self._call(path, lambda s: s.get(path))

    async def exists(self, path: str) -> Stat | None:
        return await self._call(path, lambda s: s.exists(path))

    async def children(self, path: str) -> list[str]:
        if not self._router.is_shared_parent(path):
            return await self._call(path, lambda s: s.children(path))
        self._store_for(path)  # closed / invalid path checks
        both = set(await self._local.children(path))
        both.update(
            await self._call(self._router.configuration_roots[0], lambda s: s.children(path))
        )
        return sorted(both)

    async def put(
        self,
        path: str,
        value: bytes,
        *,
        expected_version: int | None = None,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> PutResult:
        return await self._call(
            path,
            lambda s: s.put(
                path,
                value,
                expected_version=expected_version,
                ephemeral=ephemeral,
                sequential=sequential,
            ),
        )

    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        await self._call(path, lambda s: s.delete(path, expected_version=expected_version))

    # -- events -------------------------------------------------------------------------------
    def _attach(self, configuration: MetadataStore) -> None:
        configuration.add_listener(self._forward)
        configuration.add_session_listener(self._configuration_session)

    def _forward(self, notification: Notification) -> None:
        for listener in list(self._listeners):
            listener(notification)

    def _forward_session(self, event: SessionEvent) -> None:
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event)

    def _configuration_session(self, event: SessionEvent) -> None:
        if event is not SessionEvent.LOST or self._closed:
            return
        lost = self._configuration
        self._configuration = None
        if lost is not None:
            lost.remove_listener(self._forward)
            lost.remove_session_listener(self._configuration_session)
        if self._reopen is None:
            log.error("configuration store session lost and no way to reopen it")
            return
        log.warning("configuration store session lost: reopening it")
        self._reopening = asyncio.get_running_loop().create_task(self._reopen_loop(lost))

    async def _reopen_loop(self, lost: MetadataStore | None) -> None:
        assert self._reopen is not None
        if lost is not None:
            with contextlib.suppress(Exception):
                await lost.close()
        delay_s = 0.1
        while not self._closed:
            try:
                store = await self._reopen()
            except Exception as exc:  # the service is down: retry with back-off
                log.warning("configuration store not reachable yet: %s", exc)
                await self._clock.sleep(delay_s)
                delay_s = min(delay_s * 2, 5.0)
                continue
            if self._closed:
                await store.close()
                return
            self._attach(store)
            self._configuration = store
            self.configuration_sessions += 1
            log.info("configuration store session reopened")
            return

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._reopening is not None:
            self._reopening.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reopening
        configuration = self._configuration
        self._configuration = None
        try:
            await self._local.close()
        finally:
            if configuration is not None:
                await configuration.close()


__all__ = [
    "CONFIGURATION_ROOTS",
    "DEFAULT_ROUTER",
    "LOCAL_UNDER_CONFIGURATION",
    "PathRouter",
    "RoutingMetadataStore",
]
