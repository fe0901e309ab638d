"""Bundle ownership: a broker serves a topic only while it holds its bundle's ephemeral node.

Owns: acquiring, checking and releasing ``/namespace/<tenant>/<ns>/<bundle-range>``
(ephemeral, value = Pulsar's ``NamespaceEphemeralData`` JSON: ``nativeUrl``, ``nativeUrlTls``,
``httpUrl``, ``httpUrlTls``, ``disabled``), and the local cache of bundles this broker owns.
On metadata-session loss every owned bundle is dropped at once and ``on_lost`` listeners run,
so the broker stops serving before another broker can take over (ARCHITECTURE §7); the same
happens to one bundle whose node somebody else deleted (the load-manager leader frees the
bundles of a broker it found dead: if this broker is in fact alive, it must stop serving them).
Owners of other bundles are answered from a watched cache (bounded), so lookups of bundles
owned elsewhere cost no metadata read.
Must not know: topics, the protocol, load.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.broker.listeners import AdvertisedListeners
from magnetar.broker.namespace.bundles import BundleRange
from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, BadVersion, NotFound
from magnetar.zk.store import (
    CREATE_ONLY,
    MetadataStore,
    Notification,
    NotificationType,
    SessionEvent,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NamespaceBundle:
    tenant: str
    namespace: str
    range: BundleRange

    @property
    def path(self) -> str:
        return paths.bundle_ownership(self.tenant, self.namespace, self.range.name)

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.range.name}"


@dataclass(frozen=True, slots=True)
class OwnerInfo:
    native_url: str
    http_url: str
    disabled: bool = False
    native_url_tls: str = ""
    http_url_tls: str = ""
    listeners: AdvertisedListeners = field(default_factory=AdvertisedListeners)
    """The owner's advertised listeners (Pulsar's ``advertisedListeners`` of
    ``NamespaceEphemeralData``): any broker answers a lookup naming one."""

    def to_bytes(self) -> bytes:
        doc: dict[str, object] = {
            "nativeUrl": self.native_url,
            "nativeUrlTls": self.native_url_tls,
            "httpUrl": self.http_url,
            "httpUrlTls": self.http_url_tls,
            "disabled": self.disabled,
        }
        if self.listeners:
            doc["advertisedListeners"] = self.listeners.to_json()
        return json.dumps(doc).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> OwnerInfo:
        data = json.loads(raw or b"{}")
        return cls(
            str(data.get("nativeUrl", "")),
            str(data.get("httpUrl", "")),
            bool(data.get("disabled", False)),
            str(data.get("nativeUrlTls") or ""),
            str(data.get("httpUrlTls") or ""),
            AdvertisedListeners.from_json(data.get("advertisedListeners")),
        )


OTHERS_CACHED_MAX = 100_000
"""Owners of bundles owned elsewhere remembered at most (then the cache starts over)."""


class OwnershipCache:
    """This broker's view of bundle ownership."""

    def __init__(self, store: MetadataStore, me: OwnerInfo) -> None:
        self._store = store
        self.me = me
        self._owned: dict[NamespaceBundle, int] = {}  # bundle -> node version
        self._others: dict[str, OwnerInfo] = {}  # path -> owner, watched
        self._on_lost: list[Callable[[list[NamespaceBundle]], None]] = []
        store.add_session_listener(self._on_session_event)
        store.add_listener(self._on_notification)

    def __repr__(self) -> str:
        return f"<OwnershipCache {self.me.native_url} owns={len(self._owned)}>"

    @property
    def owned(self) -> list[NamespaceBundle]:
        return list(self._owned)

    def is_owned(self, bundle: NamespaceBundle) -> bool:
        return bundle in self._owned

    def add_lost_listener(self, listener: Callable[[list[NamespaceBundle]], None]) -> None:
        self._on_lost.append(listener)

    async def get_owner(self, bundle: NamespaceBundle) -> OwnerInfo | None:
        if bundle in self._owned:
            return self.me
        path = bundle.path
        cached = self._others.get(path)
        if cached is not None:
            return cached
        got = await self._store.get(path)  # watched from now on
        if got is None:
            return None  # not cached: the broker taking it may do so any moment
        owner = OwnerInfo.from_bytes(got.value)
        if len(self._others) >= OTHERS_CACHED_MAX:
            self._others.clear()
        self._others[path] = owner
        return owner

    async def try_acquire(self, bundle: NamespaceBundle) -> OwnerInfo:
        """Take the bundle if nobody owns it; return whoever owns it afterwards."""
        if bundle in self._owned:
            return self.me
        try:
            result = await self._store.put(
                bundle.path, self.me.to_bytes(), expected_version=CREATE_ONLY, ephemeral=True
            )
        except AlreadyExists:
            got = await self._store.get(bundle.path)
            if got is None:  # released in between: try once more
                return await self.try_acquire(bundle)
            owner = OwnerInfo.from_bytes(got.value)
            if got.stat.ephemeral_owner == self._store.session_id:
                self._owned[bundle] = got.stat.version
                return self.me
            return owner
        self._owned[bundle] = result.stat.version
        self._others.pop(bundle.path, None)
        await self._store.exists(bundle.path)  # watch it: a deletion by another means lost
        log.info("acquired bundle %s", bundle)
        return self.me

    async def set_disabled(self, bundle: NamespaceBundle) -> None:
        """Mark an owned bundle as being unloaded, so lookups stop pointing at it."""
        version = self._owned.get(bundle)
        if version is None:
            return
        disabled = dataclasses.replace(self.me, disabled=True)
        try:
            res = await self._store.put(bundle.path, disabled.to_bytes(), expected_version=version)
            self._owned[bundle] = res.stat.version
        except (BadVersion, NotFound):
            self._owned.pop(bundle, None)

    async def release(self, bundle: NamespaceBundle) -> None:
        version = self._owned.pop(bundle, None)
        if version is None:
            return
        try:
            await self._store.delete(bundle.path, expected_version=version)
        except (NotFound, BadVersion):
            pass
        log.info("released bundle %s", bundle)

    async def release_all(self) -> None:
        for bundle in list(self._owned):
            await self.release(bundle)

    def _on_notification(self, n: Notification) -> None:
        self._others.pop(n.path, None)
        if n.type is not NotificationType.DELETED:
            return
        if not n.path.startswith(paths.NAMESPACE_OWNERSHIP + "/"):
            return
        bundle = next((b for b in self._owned if b.path == n.path), None)
        if bundle is None:
            return
        del self._owned[bundle]
        log.warning("ownership of bundle %s was taken away: no longer serving it", bundle)
        for listener in list(self._on_lost):
            listener([bundle])

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is not SessionEvent.CONNECTED:
            self._others.clear()  # changes may have been missed while disconnected
        if event is SessionEvent.LOST and self._owned:
            lost = list(self._owned)
            self._owned.clear()
            log.warning("metadata session lost: dropping ownership of %d bundles", len(lost))
            for listener in list(self._on_lost):
                listener(lost)


__all__ = ["NamespaceBundle", "OwnerInfo", "OwnershipCache"]
