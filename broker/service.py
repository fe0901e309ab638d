"""BrokerService: the topic registry, lookup, ownership checks and the binary server's life.

Owns: starting/stopping the Pulsar binary-protocol server, creating the default cluster /
``public`` tenant / ``public/default`` namespace, binary lookup (bundle of the topic ->
owner; this broker takes an unowned bundle), partitioned metadata (with auto-creation),
loading topics only for bundles this broker owns (closing them when ownership is lost),
topic auto-creation, unload / delete, and the ``TopicRegistry`` protocol the HTTP API uses;
attaching each persistent topic's ``TopicCompaction`` (its stored view loaded) and running
the ``CompactionMonitor`` (automatic compaction over the resolved ``compaction_threshold``).

Start in-process::

    store = MemoryMetadataServer().connect()
    service = BrokerService(BrokerConfig(broker_service_port=0), store, MemoryStorageFactory())
    await service.start()      # service.port is the bound port
    ...
    await service.close()

Must not know: HTTP, frames (``connection.py`` speaks the protocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.compaction import (
    CompactionMonitor,
    TopicCompaction,
)
from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import CodedError, ServerError
from magnetar.broker.listeners import ListenerNotFound, parse_advertised_listeners
from magnetar.broker.namespace.bundles import BundleRange, NamespaceBundles, topic_hash
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
from magnetar.broker.policies.manager import PolicyManager
from magnetar.broker.policies.model import AutoTopicCreation, resolve_auto_topic_creation
from magnetar.broker.schema import topic_schemas_for
from magnetar.broker.security.authentication import AuthenticationService
from magnetar.broker.security.authorization import AuthorizationService
from magnetar.broker.security.broker_client import BrokerClientAuth
from magnetar.broker.security.tls import ReloadingServerContext, TlsSettings
from magnetar.broker.storage.contract import TopicStorageFactory
from magnetar.broker.topics.nonpersistent import NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.clock import Clock, SystemClock
from magnetar.zk.errors import MetadataError
from magnetar.zk.store import MetadataStore

if TYPE_CHECKING:
    from magnetar.broker.loadbalance.cluster import BrokerCluster

log = logging.getLogger(__name__)

UNLOAD_CONCURRENCY = 32
"""Topics of one bundle closed at once on unload (each may wait for its consumers' acks)."""


class ServiceError(CodedError):
    """A refusal of the service (lookup, topic load, ownership), answered with ``code``."""


@dataclass(frozen=True, slots=True)
class LookupResult:
    broker_url: str
    http_url: str
    redirect: bool
    authoritative: bool = True
    """False when redirecting to the load-manager leader, which decides the owner."""
    broker_url_tls: str = ""
    http_url_tls: str = ""


class BrokerService:
    def __init__(
        self,
        config: BrokerConfig,
        store: MetadataStore,
        storage: TopicStorageFactory,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.storage = storage
        self.resources = Resources(
            store,
            config.cluster_name,
            max_bundles=config.load_balancer_namespace_maximum_bundles,
            max_partitions=config.max_num_partitions_per_partitioned_topic,
        )
        self.schemas = topic_schemas_for(config, store, storage, self.resources)
        self.port = config.broker_service_port
        self.port_tls = config.broker_service_port_tls
        self.listeners = parse_advertised_listeners(
            config.advertised_listeners, config.internal_listener_name
        )
        self._web_service_url: str | None = None
        self._web_service_url_tls = ""
        # TLS context (reloaded on file change), authentication and authorization: their own
        # modules; off (None / allow-all) with the default configuration
        self.tls: ReloadingServerContext | None = (
            ReloadingServerContext(TlsSettings.from_config(config)) if config.tls_enabled else None
        )
        self.authn = AuthenticationService.from_config(config)
        self.authz = AuthorizationService(config, self.resources)
        self.ownership: OwnershipCache | None = None
        self.topics: dict[str, PersistentTopic] = {}
        self.topics_loaded_total = 0
        """Topics loaded since start (unloads are ``topics_loaded_total - len(topics)``)."""
        self._loading: dict[str, asyncio.Future[PersistentTopic | None]] = {}
        # topics being unloaded, and bundles being unloaded: not loaded again here until
        # their close is done (a client reconnecting at once would get the closing managed
        # ledger, or take a released bundle back); clients get ServiceNotReady and retry
        self._closing: set[str] = set()
        self._unloading: set[NamespaceBundle] = set()
        self._deleting: dict[str, asyncio.Future[None]] = {}
        self.connections: set[Any] = set()
        self._stop_accepting: list[Callable[[], None]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False
        self.clock = clock
        self.cluster: BrokerCluster | None = None
        self.policies = PolicyManager(self, clock)
        self.compaction_monitor = CompactionMonitor(
            lambda: [t for t in self.topics.values() if isinstance(t, PersistentTopic)],
            self._compaction_threshold,
            float(config.broker_service_compaction_monitor_interval_seconds),
            clock,
        )

    def __repr__(self) -> str:
        return f"<BrokerService {self.service_url} topics={len(self.topics)}>"

    # ------------------------------------------------------------------ lifecycle
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
    def web_service_url_tls(self) -> str:
        return self._web_service_url_tls

    def _owner_info(self) -> OwnerInfo:
        return OwnerInfo(
            self.service_url,
            self.web_service_url,
            native_url_tls=self.service_url_tls,
            http_url_tls=self.web_service_url_tls,
            listeners=self.listeners,
        )

    @property
    def web_service_url(self) -> str:
        return self._web_service_url or self.config.web_service_url

    def set_web_service_url(self, url: str) -> None:
        """The HTTP URL to advertise when the web port is only known after binding (port 0);
        call before ``start()`` or before the first lookup."""
        self._web_service_url = url
        if self.ownership is not None:
            self.ownership.me = self._owner_info()

    def set_web_service_url_tls(self, url: str) -> None:
        """Like ``set_web_service_url`` for the HTTPS listener."""
        self._web_service_url_tls = url
        if self.ownership is not None:
            self.ownership.me = self._owner_info()

    def bind_ports(self, port: int, port_tls: int, stop_accepting: Callable[[], None]) -> None:
        """The binary ports a listener bound (-1: that one is off), for the advertised URLs,
        and how to make it stop accepting (at close, once the bundles are handed over); call
        before ``start()``."""
        self.port, self.port_tls = port, port_tls
        self._stop_accepting.append(stop_accepting)

    async def start(self) -> None:
        if self.tls is not None:
            self.tls.start()
        self.authn.start()
        self.ownership = OwnershipCache(self.store, self._owner_info())
        self.ownership.add_lost_listener(self._on_bundles_lost)
        await self.resources.ensure_cluster(self.service_url, self.web_service_url)
        try:
            await self.resources.create_tenant("public", TenantInfo([], [self.config.cluster_name]))
        except ResourceConflict:
            pass
        try:
            await self.resources.create_namespace(
                "public", "default", default_bundles=self.config.default_number_of_namespace_bundles
            )
        except ResourceConflict:
            pass
        self.policies.start()
        self.compaction_monitor.start()
        log.info("broker service listening on %s", self.service_url)

    async def start_cluster(self) -> None:
        """Join the cluster's load management (once the web URL is known)."""
        if not self.config.load_balancer_enabled or self.cluster is not None:
            return
        from magnetar.broker.loadbalance.cluster import BrokerCluster

        credentials = BrokerClientAuth.from_config(self.config)  # bad settings: ValueError
        self.cluster = BrokerCluster(self, self.clock or SystemClock(), credentials=credentials)
        await self.cluster.start(self.web_service_url)

    async def close(self) -> None:
        if self.closed:
            return
        if self.cluster is not None:
            await self.cluster.drain(self.unload_bundle)
        self.closed = True
        for stop_accepting in self._stop_accepting:
            stop_accepting()
        if self.cluster is not None:
            await self.cluster.close()
        self.policies.close()
        self.compaction_monitor.close()
        if self.tls is not None:
            self.tls.close()
        self.authn.close()
        for topic in list(self.topics.values()):
            try:
                await topic.close()
            except Exception:
                log.exception("closing %s", topic)
        self.topics.clear()
        for cnx in list(self.connections):
            cnx.close()
        if self.ownership is not None:
            try:
                await self.ownership.release_all()
            except MetadataError as exc:
                # Metadata unreachable (a whole cluster stopping together): the ownership
                # nodes are ephemeral and go with this broker's session.
                log.warning("bundles not released (%s): they go when the session expires", exc)
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ names, bundles
    @staticmethod
    def parse_topic(topic: str) -> TopicName:
        try:
            return TopicName.parse(topic)
        except InvalidTopicName as exc:
            raise ServiceError(ServerError.InvalidTopicName, str(exc)) from None

    async def _bundles(self, tn: TopicName) -> NamespaceBundles:
        try:
            return await self.resources.bundles(tn.tenant, tn.namespace)
        except ResourceNotFound:
            raise ServiceError(
                ServerError.TopicNotFound, f"Namespace {tn.namespace_name} does not exist"
            ) from None

    async def bundle_of(self, tn: TopicName) -> NamespaceBundle:
        bundles = await self._bundles(tn)
        return NamespaceBundle(tn.tenant, tn.namespace, bundles.find(tn.full))

    async def _still_owned(self, tn: TopicName) -> bool:
        """The topic's bundle (as split now) is owned here and not being unloaded."""
        assert self.ownership is not None
        bundle = await self.bundle_of(tn)
        return bundle not in self._unloading and self.ownership.is_owned(bundle)

    @contextlib.contextmanager
    def unloading(self, bundle: NamespaceBundle) -> Iterator[None]:
        """While ``bundle``'s topics close (unload, split): none of its topics loads here."""
        self._unloading.add(bundle)
        try:
            yield
        finally:
            self._unloading.discard(bundle)

    async def _ensure_owned(self, tn: TopicName) -> None:
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
            raise ServiceError(
                ServerError.ServiceNotReady,
                f"Namespace bundle {bundle} is not owned by this broker",
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
        tn = self.parse_topic(topic)
        bundle = await self.bundle_of(tn)
        owner = await self.ownership.get_owner(bundle)
        if owner is None and not authoritative and self.cluster is not None:
            where = await self.cluster.assign(bundle)
            if where is not None and listener_name:
                # the redirect must carry the chosen broker's listener URL, which only that
                # broker knows: it is placed there through an HTTP lookup naming the listener
                try:
                    urls = await self.cluster.http_lookup(
                        where.http_url,
                        tn,
                        listener_name=listener_name,
                        authoritative=where.authoritative,
                    )
                except ListenerNotFound as exc:
                    raise ServiceError(ServerError.ServiceNotReady, str(exc)) from None
                return LookupResult(urls[0], urls[1], True, True, urls[2], urls[3])
            if where is not None:
                return LookupResult(where.broker_url, where.http_url, True, where.authoritative)
        if owner is None:
            owner = await self.ownership.try_acquire(bundle)
        if owner.disabled:
            raise ServiceError(
                ServerError.ServiceNotReady, f"Namespace bundle {bundle} is being unloaded"
            )
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

    async def partitioned_metadata(self, topic: str) -> int:
        tn = self.parse_topic(topic)
        if tn.partition_index >= 0:
            return 0
        if not await self.resources.namespace_exists(tn.tenant, tn.namespace):
            raise ServiceError(
                ServerError.TopicNotFound, f"Namespace {tn.namespace_name} does not exist"
            )
        n = await self.resources.get_partitions(tn.tenant, tn.namespace, tn.domain, tn.local)
        if n > 0:
            return n
        auto = await self._auto_topic_creation(tn)
        if (
            auto.allow
            and auto.topic_type == "partitioned"
            and not await self.storage.exists(tn.managed_ledger_name)
        ):
            try:
                await self.resources.create_partitioned(
                    tn.tenant, tn.namespace, tn.domain, tn.local, auto.default_num_partitions
                )
            except ResourceConflict:
                pass
            return await self.resources.get_partitions(tn.tenant, tn.namespace, tn.domain, tn.local)
        return 0

    # ------------------------------------------------------------------ topics
    async def get_topic(self, topic: str, create: bool = False) -> PersistentTopic | None:
        """The loaded topic, loading it (and creating it if ``create``) when this broker
        owns its bundle. None if it does not exist and ``create`` is false."""
        tn = self.parse_topic(topic)
        name = tn.full
        got = self.topics.get(name)
        if got is not None:
            return got
        pending = self._loading.get(name)
        if pending is not None:
            loaded = await asyncio.shield(pending)
            if loaded is not None or not create:
                return loaded
        if self.closed:
            raise ServiceError(ServerError.ServiceNotReady, "Broker is closing")
        if name in self._closing:
            raise ServiceError(ServerError.ServiceNotReady, f"Topic {name} is being unloaded")
        fut: asyncio.Future[PersistentTopic | None] = asyncio.get_running_loop().create_future()
        self._loading[name] = fut
        try:
            topic_obj = await self._load(tn, create)
            fut.set_result(topic_obj)
            return topic_obj
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved
            raise
        finally:
            self._loading.pop(name, None)

    async def _load(self, tn: TopicName, create: bool) -> PersistentTopic | None:
        await self._ensure_owned(tn)
        if not tn.persistent:
            if not create:
                return None
            if not await self.resources.namespace_exists(tn.tenant, tn.namespace):
                raise ServiceError(
                    ServerError.TopicNotFound, f"Namespace {tn.namespace_name} does not exist"
                )
            np_topic: Any = NonPersistentTopic(tn)
            self.topics[tn.full] = np_topic
            self.topics_loaded_total += 1
            self.policies.attach(
                np_topic, await self.policies.policies_for(tn.tenant, tn.namespace, tn)
            )
            log.info("created non-persistent topic %s", tn.full)
            return np_topic  # type: ignore[no-any-return]
        ml_name = tn.managed_ledger_name
        if not await self.storage.exists(ml_name):
            if not create:
                return None
            if not await self.resources.namespace_exists(tn.tenant, tn.namespace):
                raise ServiceError(
                    ServerError.TopicNotFound, f"Namespace {tn.namespace_name} does not exist"
                )
        # namespace policies override the broker defaults, as in Pulsar (and are watched)
        policies = await self.policies.policies_for(tn.tenant, tn.namespace, tn)
        ledger = await self.storage.open(ml_name)
        topic = PersistentTopic(
            tn,
            ledger,
            dedup_enabled=policies.deduplication,
            max_unacked_per_consumer=policies.max_unacked_per_consumer,
            dispatcher_max_read_batch_size=self.config.dispatcher_max_read_batch_size,
            dispatcher_max_read_size_bytes=self.config.dispatcher_max_read_size_bytes,
            dispatcher_min_read_batch_size=self.config.dispatcher_min_read_batch_size,
            redelivery_tracker_enabled=self.config.subscription_redelivery_tracker_enabled,
            max_unacked_per_subscription=policies.max_unacked_per_subscription,
        )
        await topic.load()
        topic.compaction = TopicCompaction(self.storage, ml_name, clock=self.clock)
        await topic.compaction.load()
        topic.on_fenced = self._on_topic_fenced
        if not await self._still_owned(tn):
            # its bundle was unloaded or split while it loaded: installed now, it would stay
            # served here after the bundle's topics were closed and the ownership moved on
            await topic.close()
            raise ServiceError(
                ServerError.ServiceNotReady, f"The bundle of {tn.full} moved while the topic loaded"
            )
        self.topics[tn.full] = topic
        self.topics_loaded_total += 1
        self.policies.attach(topic, policies)
        log.info("loaded topic %s", tn.full)
        return topic

    async def _auto_topic_creation(self, tn: TopicName) -> AutoTopicCreation:
        """The namespace's ``autoTopicCreationOverride`` over the broker settings, as Pulsar."""
        if tn.full in self.topics:
            return resolve_auto_topic_creation(self.config, {})
        try:
            ns = await self.resources.get_policies(tn.tenant, tn.namespace)
        except ResourceNotFound:
            ns = {}
        return resolve_auto_topic_creation(self.config, ns)

    async def topic_for_client(self, topic: str) -> PersistentTopic:
        """Topic for a PRODUCER/SUBSCRIBE: auto-created when allowed, else TopicNotFound."""
        tn = self.parse_topic(topic)
        create = (await self._auto_topic_creation(tn)).allow
        if not create and tn.partition_index >= 0:
            base = tn.partitioned_base
            n = await self.resources.get_partitions(
                base.tenant, base.namespace, base.domain, base.local
            )
            create = tn.partition_index < n
        got = await self.get_topic(topic, create=create)
        if got is None:
            raise ServiceError(ServerError.TopicNotFound, f"Topic {tn.full} does not exist")
        return got

    async def unload_topic(self, topic: str) -> None:
        tn = self.parse_topic(topic)
        got = self.topics.pop(tn.full, None)
        if got is not None:
            await self._close_topic(tn.full, got)

    async def _close_topic(self, name: str, topic: Any) -> None:
        """Close an unloaded topic; it is not loaded again here until the close is done."""
        self._closing.add(name)
        try:
            await topic.close()
        finally:
            self._closing.discard(name)

    async def unload_bundle(self, bundle: NamespaceBundle) -> None:
        """Graceful unload: lookups stop pointing here, the bundle's topics close (their
        clients reconnect through a lookup), then the ownership node goes."""
        assert self.ownership is not None
        with self.unloading(bundle):
            await self.ownership.set_disabled(bundle)
            await self.close_topics_of(bundle)
            await self.ownership.release(bundle)

    async def close_topics_of(self, bundle: NamespaceBundle) -> None:
        """Close the loaded topics that belong to ``bundle``, ``UNLOAD_CONCURRENCY`` at a
        time (each close may wait up to ``ACK_SETTLE_MAX_S`` for its consumers' acks)."""
        gate = asyncio.Semaphore(UNLOAD_CONCURRENCY)

        async def close(name: str, topic: Any) -> None:
            async with gate:
                await self._close_topic(name, topic)

        closing = []
        for name, topic in list(self.topics.items()):
            if (topic.name.tenant, topic.name.namespace) != (bundle.tenant, bundle.namespace):
                continue
            if bundle.range.contains(topic_hash(name)):
                self.topics.pop(name, None)
                closing.append(close(name, topic))
        results = await asyncio.gather(*closing, return_exceptions=True)
        for exc in results:
            if isinstance(exc, BaseException):
                raise exc

    async def unload_namespace_bundle(self, tenant: str, namespace: str, name: str) -> str | None:
        """Unload the bundle ``name`` (``0x00000000_0x40000000``) if this broker owns it: its
        topics close and the ownership is released, so the next lookup assigns it anew.
        Returns None when done (or when nobody owns it), else the owner's HTTP URL."""
        if self.ownership is None or self.closed:
            raise _to_resource_error(
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

    def _on_topic_fenced(self, topic: PersistentTopic) -> None:
        async def unload() -> None:
            if self.topics.get(topic.full_name) is topic:
                del self.topics[topic.full_name]
            await topic.close()

        self._spawn(unload())

    def _on_bundles_lost(self, bundles: list[NamespaceBundle]) -> None:
        lost = {(b.tenant, b.namespace, b.range) for b in bundles}

        async def close_lost() -> None:
            for name, topic in list(self.topics.items()):
                try:
                    bundles_of_ns = await self.resources.bundles(
                        topic.name.tenant, topic.name.namespace
                    )
                    rng = bundles_of_ns.find(name)
                except Exception:
                    rng = None
                if rng is None or (topic.name.tenant, topic.name.namespace, rng) in lost:
                    self.topics.pop(name, None)
                    await topic.close()

        self._spawn(close_lost())

    # ------------------------------------------------------------------ admin (TopicRegistry)
    async def lookup_urls(
        self, topic: str, authoritative: bool = False, listener_name: str = ""
    ) -> tuple[str, ...]:
        try:
            got = await self.lookup(topic, authoritative, listener_name)
            if got.redirect and not got.authoritative and self.cluster is not None:
                # HTTP has no lookup redirects: ask the leader, which places the bundle
                try:
                    return await self.cluster.http_lookup(
                        got.http_url, self.parse_topic(topic), listener_name=listener_name
                    )
                except ListenerNotFound as exc:
                    raise ServiceError(ServerError.ServiceNotReady, str(exc)) from None
        except ServiceError as exc:
            if listener_name and exc.message == str(ListenerNotFound(listener_name)):
                raise ResourceError(exc.message) from None  # Pulsar: 500 with the reason
            raise _to_resource_error(exc) from None
        return got.broker_url, got.http_url, got.broker_url_tls, got.http_url_tls

    async def list_topics(
        self, tenant: str, namespace: str, domain: str = "persistent"
    ) -> list[str]:
        if domain != "persistent":  # non-persistent topics exist while they are loaded
            return await self.list_non_persistent(tenant, namespace)
        prefix = f"{tenant}/{namespace}/persistent/"
        names = set()
        from urllib.parse import unquote

        for ml in await self.storage.list(prefix):
            names.add(f"persistent://{tenant}/{namespace}/{unquote(ml[len(prefix) :])}")
        for name, topic in self.topics.items():
            if topic.name.persistent and (topic.name.tenant, topic.name.namespace) == (
                tenant,
                namespace,
            ):
                names.add(name)
        return sorted(names)

    def loaded_non_persistent(
        self, tenant: str, namespace: str, bundle: str | None = None
    ) -> list[str]:
        """The non-persistent topics of the namespace (of ``bundle``, its range name, when
        given) loaded on this broker."""
        ns = f"{tenant}/{namespace}"
        rng = BundleRange.parse(bundle) if bundle is not None else None
        return sorted(
            name
            for name, t in self.topics.items()
            if not t.name.persistent
            and t.name.namespace_name == ns
            and (rng is None or rng.contains(topic_hash(name)))
        )

    async def list_non_persistent(self, tenant: str, namespace: str) -> list[str]:
        """Pulsar's ``NonPersistentTopics.getList``: the loaded non-persistent topics of
        every bundle, those of bundles owned elsewhere asked of their owner
        (``GET /admin/v2/non-persistent/{tenant}/{ns}/{bundle}``). An owner that does not
        answer is logged and left out: a listing, not a guarantee."""
        names = set(self.loaded_non_persistent(tenant, namespace))
        if self.cluster is None or self.ownership is None:
            return sorted(names)
        try:
            bundles = await self.resources.bundles(tenant, namespace)
        except ResourceNotFound:  # no namespace: nothing is owned elsewhere either
            return sorted(names)
        for rng in bundles.ranges:
            owner = await self.ownership.get_owner(NamespaceBundle(tenant, namespace, rng))
            if owner is None or owner.native_url == self.service_url:
                continue
            try:
                names.update(
                    await self.cluster.non_persistent_in_bundle(
                        owner.http_url, tenant, namespace, rng.name
                    )
                )
            except Exception as exc:
                log.warning(
                    "non-persistent topics of %s/%s/%s at %s: %s",
                    tenant,
                    namespace,
                    rng.name,
                    owner.http_url,
                    exc,
                )
        return sorted(names)

    async def create_topic(self, topic: str) -> None:
        try:
            tn = self.parse_topic(topic)
            if await self.storage.exists(tn.managed_ledger_name):
                raise ResourceConflict("This topic already exists")
            await self.get_topic(topic, create=True)
        except ServiceError as exc:
            raise _to_resource_error(exc) from None

    async def delete_topic(self, topic: str, *, force: bool = False) -> None:
        try:
            tn = self.parse_topic(topic)
        except ServiceError as exc:
            raise _to_resource_error(exc) from None
        running = self._deleting.get(tn.full)
        if running is not None:  # a concurrent delete of the same topic: its outcome
            await asyncio.wait([running])
            raise ResourceNotFound("Topic not found")
        task = asyncio.ensure_future(self._delete_topic(tn, topic, force=force))
        self._deleting[tn.full] = task
        task.add_done_callback(lambda _: self._deleting.pop(tn.full, None))
        await asyncio.shield(task)

    async def _delete_topic(self, tn: TopicName, topic: str, *, force: bool) -> None:
        loaded = self.topics.get(tn.full)
        if loaded is None and (
            not tn.persistent or not await self.storage.exists(tn.managed_ledger_name)
        ):
            raise ResourceNotFound("Topic not found")
        if loaded is None:
            # Load it, so per-subscription storage (delayed-delivery indexes) goes too.
            loaded = await self.existing_topic(topic)
        if not force:
            if loaded.producers.producers:
                raise PreconditionFailed("Topic has active producers")
            if any(s.consumers for s in loaded.subscriptions.values()):
                raise PreconditionFailed("Topic has active subscriptions")
        await loaded.delete_side_storage()  # delayed-delivery indexes, compacted views
        self.topics.pop(tn.full, None)
        await loaded.close()
        if tn.persistent:
            await self.storage.delete(tn.managed_ledger_name)
        await self.schemas.delete_for_topic(tn)  # a partition keeps the partitioned topic's

    async def delete_topic_schemas(self, topic: str) -> None:
        """A partitioned topic was deleted: its schemas go with it (as Pulsar)."""
        try:
            tn = self.parse_topic(topic)
        except ServiceError as exc:
            raise _to_resource_error(exc) from None
        await self.schemas.delete_for_topic(tn)

    async def existing_topic(self, topic: str) -> PersistentTopic:
        """The loaded or stored topic (loaded here if needed); ``ResourceNotFound`` if it does
        not exist, the admin errors for the rest."""
        try:
            got = await self.get_topic(topic, create=False)
        except ServiceError as exc:
            raise _to_resource_error(exc) from None
        if got is None:
            raise ResourceNotFound("Topic not found")
        return got

    def _compaction_threshold(self, topic: PersistentTopic) -> int:
        state = self.policies.state_of(topic)
        if state is not None:
            return int(state.policies.compaction_threshold_bytes)
        return int(self.config.broker_service_compaction_threshold_in_bytes)

    def stats(self) -> dict[str, Any]:
        return {
            "topics": len(self.topics),
            "connections": len(self.connections),
            "msgInCounter": sum(t.counters.msg_in for t in self.topics.values()),
            "bytesInCounter": sum(t.counters.bytes_in for t in self.topics.values()),
            "producers": sum(len(t.producers.producers) for t in self.topics.values()),
            "subscriptions": sum(len(t.subscriptions) for t in self.topics.values()),
        }


def _to_resource_error(exc: ServiceError) -> ResourceError:
    if exc.code == ServerError.TopicNotFound:
        return ResourceNotFound(exc.message)
    if exc.code == ServerError.InvalidTopicName:
        return PreconditionFailed(exc.message)
    if exc.code == ServerError.ServiceNotReady:
        err = ResourceError(exc.message)
        err.http_status = 503
        return err
    return ResourceError(exc.message)


__all__ = ["BrokerService", "LookupResult", "ServiceError"]
