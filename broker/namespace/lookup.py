"""``NamespaceService``: this broker's place in the namespaces (Pulsar's ``NamespaceService``).

Owns: the broker's advertised identity (binary ports, plain / TLS; HTTP / HTTPS URLs;
advertised listeners; ``service_url``, the identity in ownership data), the ``OwnershipCache``
(made by ``start``, released by ``release_all``), the default cluster, ``public`` tenant and
``public/default`` namespace (``ensure_defaults``), which bundle holds a topic (``bundle_of``),
whether this broker may serve it (``ensure_owned`` takes an unowned bundle; ``still_owned``),
the bundles being unloaded (no topic of theirs loads here meanwhile), binary and HTTP lookup
(an unowned bundle is placed by the load manager's ``BundlePlacement`` when there is one), and
unloading a bundle: lookups stop pointing here, its topics close (``close_topics_of``, the
topic registry's), then the ownership node goes.
Invariant: a bundle in ``unloading`` never has a topic loaded here (``ensure_owned`` and
``still_owned`` say no) until its unload is done.
Must not know: topics (it is told how to close a bundle's topics), frames, HTTP serving, how
load is measured or where a bundle should go.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import CodedError, OwnedElsewhere, ServerError
from magnetar.broker.listeners import ListenerNotFound, parse_advertised_listeners
from magnetar.broker.namespace.bundles import NamespaceBundles
from magnetar.broker.namespace.ownership import NamespaceBundle, OwnerInfo, OwnershipCache
from magnetar.broker.namespace.resources import (
    PreconditionFailed,
    ResourceConflict,
    ResourceError,
    ResourceNotFound,
    Resources,
    TenantInfo,
)
from magnetar.broker.naming import InvalidTopicName, TopicName
from magnetar.zk.errors import MetadataError
from magnetar.zk.store import MetadataStore

log = logging.getLogger(__name__)


class ServiceError(CodedError):
    """A refusal of the service (lookup, topic load, ownership), answered with ``code``."""


class NotOwnedHere(ServiceError):
    """The topic's bundle is owned by another broker (``owner``): a binary-protocol client
    gets ``ServiceNotReady`` (and looks the topic up again); the admin API redirects."""

    def __init__(self, message: str, topic: str, owner: OwnerInfo) -> None:
        super().__init__(ServerError.ServiceNotReady, message)
        self.topic = topic
        self.owner = owner


@dataclass(frozen=True, slots=True)
class LookupResult:
    broker_url: str
    http_url: str
    redirect: bool
    authoritative: bool = True
    """False when redirecting to the load-manager leader, which decides the owner."""
    broker_url_tls: str = ""
    http_url_tls: str = ""


class Assigned(Protocol):
    """Where the load manager sends a lookup of an unowned bundle."""

    @property
    def broker_url(self) -> str: ...

    @property
    def http_url(self) -> str: ...

    @property
    def authoritative(self) -> bool: ...


class BundlePlacement(Protocol):
    """The load manager's part in lookups (``loadbalance.cluster.BrokerCluster``)."""

    async def assign(self, bundle: NamespaceBundle) -> Assigned | None:
        """Where an unowned bundle goes: None means this broker takes it."""
        ...

    async def http_lookup(
        self,
        leader_http_url: str,
        topic: TopicName,
        *,
        listener_name: str = "",
        authoritative: bool = False,
    ) -> tuple[str, ...]:
        """The HTTP lookup answer of another broker for ``topic``."""
        ...


def parse_topic(topic: str) -> TopicName:
    """``topic`` parsed, or ``ServiceError(InvalidTopicName)``."""
    try:
        return TopicName.parse(topic)
    except InvalidTopicName as exc:
        raise ServiceError(ServerError.InvalidTopicName, str(exc)) from None


def to_resource_error(exc: ServiceError) -> ResourceError:
    """A service refusal as the admin API answers it."""
    if isinstance(exc, NotOwnedHere):
        return OwnedElsewhere(exc.message, exc.topic, exc.owner.http_url, exc.owner.http_url_tls)
    if exc.code == ServerError.TopicNotFound:
        return ResourceNotFound(exc.message)
    if exc.code == ServerError.InvalidTopicName:
        return PreconditionFailed(exc.message)
    if exc.code == ServerError.ServiceNotReady:
        err = ResourceError(exc.message)
        err.http_status = 503
        return err
    return ResourceError(exc.message)


BundleCloser = Callable[[NamespaceBundle], Awaitable[None]]
"""Closes the loaded topics of a bundle (the topic registry's ``close_topics_of``)."""
LostBundles = Callable[[list[NamespaceBundle]], None]
"""Hears bundles this broker lost (session loss, a node deleted by somebody else): their
topics must stop being served at once (the topic registry's ``close_lost``)."""


class NamespaceService:
    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        resources: Resources,
        close_topics_of: BundleCloser,
        on_lost: LostBundles,
    ) -> None:
        self.config = config
        self.store = store
        self.resources = resources
        self.close_topics_of = close_topics_of
        self.on_lost = on_lost
        self.port = config.broker_service_port
        self.port_tls = config.broker_service_port_tls
        self.listeners = parse_advertised_listeners(
            config.advertised_listeners, config.internal_listener_name
        )
        self._web_service_url: str | None = None
        self._web_service_url_tls = ""
        self.ownership: OwnershipCache | None = None
        self.placement: BundlePlacement | None = None
        """The load manager placing unowned bundles (None: this broker takes them)."""
        self.closed = False
        self._unloading: set[NamespaceBundle] = set()

    def __repr__(self) -> str:
        return f"<NamespaceService {self.service_url}>"

    # ------------------------------------------------------------------ identity
    @property
    def service_url(self) -> str:
        """This broker's identity in ownership data: the plain URL, or the TLS one when the
        plain port is off."""
        internal = self.listeners.internal  # Pulsar: the internal listener is the identity
        if internal is not None:
            return internal.broker_service_url or internal.broker_service_url_tls
        if self.port < 0:
            return self.service_url_tls
        return f"pulsar://{self.config.advertised_address}:{self.port}"

    @property
    def service_url_tls(self) -> str:
        internal = self.listeners.internal
        if internal is not None:
            return internal.broker_service_url_tls
        if self.port_tls < 0:
            return ""
        return f"pulsar+ssl://{self.config.advertised_address}:{self.port_tls}"

    @property
    def web_service_url(self) -> str:
        return self._web_service_url or self.config.web_service_url

    @property
    def web_service_url_tls(self) -> str:
        return self._web_service_url_tls

    def owner_info(self) -> OwnerInfo:
        return OwnerInfo(
            self.service_url,
            self.web_service_url,
            native_url_tls=self.service_url_tls,
            http_url_tls=self.web_service_url_tls,
            listeners=self.listeners,
        )

    def set_ports(self, port: int, port_tls: int) -> None:
        """The binary ports a listener bound (-1: that one is off); before ``start()``."""
        self.port, self.port_tls = port, port_tls

    def set_web_service_url(self, url: str) -> None:
        """The HTTP URL to advertise when the web port is only known after binding (port 0);
        call before ``start()`` or before the first lookup."""
        self._web_service_url = url
        if self.ownership is not None:
            self.ownership.me = self.owner_info()

    def set_web_service_url_tls(self, url: str) -> None:
        """Like ``set_web_service_url`` for the HTTPS listener."""
        self._web_service_url_tls = url
        if self.ownership is not None:
            self.ownership.me = self.owner_info()

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        """Take part in ownership (bundles lost go to ``on_lost``)."""
        self.ownership = OwnershipCache(self.store, self.owner_info())
        self.ownership.add_lost_listener(self.on_lost)

    async def ensure_defaults(self) -> None:
        """The cluster, the ``public`` tenant and ``public/default`` namespace, as Pulsar
        creates them (each left as it is when it exists)."""
        await self.resources.ensure_cluster(self.service_url, self.web_service_url)
        with contextlib.suppress(ResourceConflict):
            await self.resources.create_tenant("public", TenantInfo([], [self.config.cluster_name]))
        with contextlib.suppress(ResourceConflict):
            await self.resources.create_namespace(
                "public", "default", default_bundles=self.config.default_number_of_namespace_bundles
            )

    def stop(self) -> None:
        """No more lookups are answered (``Broker is not running``)."""
        self.closed = True

    async def release_all(self) -> None:
        """Give up every owned bundle (the ownership nodes go)."""
        if self.ownership is not None:
            await self.ownership.release_all()

    # ------------------------------------------------------------------ bundles
    async def bundles_of(self, tn: TopicName) -> NamespaceBundles:
        try:
            return await self.resources.bundles(tn.tenant, tn.namespace)
        except ResourceNotFound:
            raise ServiceError(
                ServerError.TopicNotFound, f"Namespace {tn.namespace_name} does not exist"
            ) from None

    async def bundle_of(self, tn: TopicName) -> NamespaceBundle:
        bundles = await self.bundles_of(tn)
        return NamespaceBundle(tn.tenant, tn.namespace, bundles.find(tn.full))

    @contextlib.contextmanager
    def unloading(self, bundle: NamespaceBundle) -> Iterator[None]:
        """While ``bundle``'s topics close (unload, split): none of its topics loads here."""
        self._unloading.add(bundle)
        try:
            yield
        finally:
            self._unloading.discard(bundle)

    async def still_owned(self, tn: TopicName) -> bool:
        """The topic's bundle (as split now) is owned here and not being unloaded."""
        assert self.ownership is not None
        bundle = await self.bundle_of(tn)
        return bundle not in self._unloading and self.ownership.is_owned(bundle)

    async def ensure_owned(self, tn: TopicName) -> None:
        """This broker owns the topic's bundle (taking it when nobody does), else
        ``ServiceError(ServiceNotReady)``."""
        assert self.ownership is not None
        bundle = await self.bundle_of(tn)
        if bundle in self._unloading:
            raise ServiceError(
                ServerError.ServiceNotReady, f"Namespace bundle {bundle} is being unloaded"
            )
        if self.ownership.is_owned(bundle):
            return
        owner = await self.ownership.try_acquire(bundle)
        if owner.native_url != self.service_url:
            raise NotOwnedHere(
                f"Namespace bundle {bundle} is not owned by this broker", tn.full, owner
            )

    # ------------------------------------------------------------------ lookup
    async def lookup(
        self, topic: str, authoritative: bool = False, listener_name: str = ""
    ) -> LookupResult:
        """Owner of ``topic``'s bundle. An unowned bundle is placed by the load-manager
        leader: the leader redirects to the broker it chose (authoritative), others
        redirect to the leader; an authoritative lookup (the leader chose us), a broker
        without a load manager, or one that finds no leader takes the bundle itself.

        ``listener_name`` (Pulsar's ``advertisedListenerName``): the owner's URLs of that
        advertised listener; ServiceNotReady "the broker do not have X listener" when the
        owner has none of that name, as Pulsar answers."""
        if self.ownership is None or self.closed:
            raise ServiceError(ServerError.ServiceNotReady, "Broker is not running")
        tn = parse_topic(topic)
        bundle = await self.bundle_of(tn)
        owner = await self.ownership.get_owner(bundle)
        if owner is None and not authoritative and self.placement is not None:
            placed = await self._placed(bundle, tn, listener_name)
            if placed is not None:
                return placed
        if owner is None:
            owner = await self.ownership.try_acquire(bundle)
        if owner.disabled:
            raise ServiceError(
                ServerError.ServiceNotReady, f"Namespace bundle {bundle} is being unloaded"
            )
        return self._answer(owner, listener_name)

    async def _placed(
        self, bundle: NamespaceBundle, tn: TopicName, listener_name: str
    ) -> LookupResult | None:
        """The redirect to where the load manager places an unowned bundle (None: here)."""
        assert self.placement is not None
        where = await self.placement.assign(bundle)
        if where is None:
            return None
        if not listener_name:
            return LookupResult(where.broker_url, where.http_url, True, where.authoritative)
        # the redirect must carry the chosen broker's listener URL, which only that broker
        # knows: it is placed there through an HTTP lookup naming the listener
        try:
            urls = await self.placement.http_lookup(
                where.http_url, tn, listener_name=listener_name, authoritative=where.authoritative
            )
        except ListenerNotFound as exc:
            raise ServiceError(ServerError.ServiceNotReady, str(exc)) from None
        return LookupResult(urls[0], urls[1], True, True, urls[2], urls[3])

    def _answer(self, owner: OwnerInfo, listener_name: str) -> LookupResult:
        """The lookup answer pointing at ``owner`` (this broker or another)."""
        if listener_name:
            try:
                listener = owner.listeners.require(listener_name)
            except ListenerNotFound as exc:
                raise ServiceError(ServerError.ServiceNotReady, str(exc)) from None
            return LookupResult(
                listener.broker_service_url,
                owner.http_url,
                owner.native_url != self.service_url,
                broker_url_tls=listener.broker_service_url_tls,
                http_url_tls=owner.http_url_tls,
            )
        if owner.native_url == self.service_url:
            return LookupResult(
                self.service_url,
                self.web_service_url,
                False,
                broker_url_tls=self.service_url_tls,
                http_url_tls=self.web_service_url_tls,
            )
        return LookupResult(
            owner.native_url,
            owner.http_url,
            True,
            broker_url_tls=owner.native_url_tls,
            http_url_tls=owner.http_url_tls,
        )

    async def lookup_urls(
        self, topic: str, authoritative: bool = False, listener_name: str = ""
    ) -> tuple[str, ...]:
        """The HTTP lookup answer: (binary URL, HTTP URL, TLS binary URL, HTTPS URL) of the
        owner, the bundle placed first when nobody owns it (HTTP has no lookup redirects:
        a broker that would redirect to the leader asks the leader itself)."""
        try:
            got = await self.lookup(topic, authoritative, listener_name)
            if got.redirect and not got.authoritative and self.placement is not None:
                try:
                    return await self.placement.http_lookup(
                        got.http_url, parse_topic(topic), listener_name=listener_name
                    )
                except ListenerNotFound as exc:
                    raise ServiceError(ServerError.ServiceNotReady, str(exc)) from None
        except ServiceError as exc:
            if listener_name and exc.message == str(ListenerNotFound(listener_name)):
                raise ResourceError(exc.message) from None  # Pulsar: 500 with the reason
            raise to_resource_error(exc) from None
        except (ResourceError, MetadataError):
            raise  # the admin API's own answers (a retriable metadata error: 503)
        except Exception as exc:
            # as the binary lookup answers it (protocol/lookups.py): logged, then
            # ServiceNotReady, which a client retries: 503 here, not a 500
            log.exception("lookup of %s failed", topic)
            raise to_resource_error(
                ServiceError(ServerError.ServiceNotReady, f"lookup of {topic} failed: {exc}")
            ) from None
        return got.broker_url, got.http_url, got.broker_url_tls, got.http_url_tls

    # ------------------------------------------------------------------ unloading
    async def unload_bundle(self, bundle: NamespaceBundle) -> None:
        """Graceful unload: lookups stop pointing here, the bundle's topics close (their
        clients reconnect through a lookup), then the ownership node goes."""
        assert self.ownership is not None
        with self.unloading(bundle):
            await self.ownership.set_disabled(bundle)
            await self.close_topics_of(bundle)
            await self.ownership.release(bundle)

    async def unload_namespace_bundle(self, tenant: str, namespace: str, name: str) -> str | None:
        """Unload the bundle ``name`` (``0x00000000_0x40000000``) if this broker owns it: its
        topics close and the ownership is released, so the next lookup assigns it anew.
        Returns None when done (or when nobody owns it), else the owner's HTTP URL."""
        if self.ownership is None or self.closed:
            raise to_resource_error(
                ServiceError(ServerError.ServiceNotReady, "Broker is not running")
            )
        bundles = await self.resources.bundles(tenant, namespace)  # ResourceNotFound
        found = [r for r in bundles.ranges if r.name == name]
        if not found:
            raise ResourceNotFound(f"Namespace bundle {tenant}/{namespace}/{name} does not exist")
        bundle = NamespaceBundle(tenant, namespace, found[0])
        if self.ownership.is_owned(bundle):
            log.info("unloading bundle %s", bundle)
            await self.unload_bundle(bundle)
            return None
        owner = await self.ownership.get_owner(bundle)
        return None if owner is None else owner.http_url


__all__ = [
    "Assigned",
    "BundleCloser",
    "BundlePlacement",
    "LookupResult",
    "LostBundles",
    "NamespaceService",
    "ServiceError",
    "parse_topic",
    "to_resource_error",
]
