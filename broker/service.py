"""BrokerService: the registry of the topics this broker has loaded, and their life here.

Owns: the loaded ``Topic`` of each name and loading it when this broker owns its bundle
(``NamespaceService.ensure_owned``; a topic whose bundle moved while it loaded is closed, not
installed), topic auto-creation and partitioned metadata (with auto-creation), what a loaded
persistent topic is made of (its managed ledger, ``TopicCompaction`` with its stored view,
policies attached, its geo-replication attached: ``replication.GeoReplication``), unloading
and deleting topics, closing the topics of a bundle (``close_topics_of``, for the namespace
service's unloads) or of bundles lost, topic listings and the ``TopicRegistry`` the HTTP API
uses; and the parts topics and connections reach
through it (settings, metadata store, namespace resources and ``namespaces``, schemas,
policies, security, the connections served).
Lookup, ownership and the broker's advertised identity are ``namespaces``'
(``namespace/lookup.py``); starting and stopping the broker's parts in order, the
compaction monitor and load management are the runtime's (``runtime.BrokerServiceRunner``).

Start in-process::

    store = MemoryMetadataServer().connect()
    service = BrokerService(BrokerConfig(broker_service_port=0), store, MemoryStorageFactory())
    runner = BrokerServiceRunner(service)
    await runner.start()      # service.namespaces.port is the bound port (with a listener)
    ...
    await runner.close()

Must not know: HTTP, frames (``connection.py`` speaks the protocol), how ownership is stored,
how load is balanced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.broker.compaction import TopicCompaction
from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import ResourceError, ServerError
from magnetar.broker.namespace.bundles import BundleRange, topic_hash
from magnetar.broker.namespace.lookup import (
    LookupResult,
    NamespaceService,
    ServiceError,
    parse_topic,
    to_resource_error,
)
from magnetar.broker.namespace.ownership import NamespaceBundle
from magnetar.broker.namespace.resources import (
    PreconditionFailed,
    ResourceConflict,
    ResourceNotFound,
    Resources,
)
from magnetar.broker.naming import TopicName
from magnetar.broker.policies.inactive import is_active
from magnetar.broker.policies.manager import PolicyManager
from magnetar.broker.policies.model import (
    AutoTopicCreation,
    InactiveTopicDeleteMode,
    resolve_auto_topic_creation,
)
from magnetar.broker.replication.geo import GeoReplication
from magnetar.broker.schema import topic_schemas_for
from magnetar.broker.security.authentication import AuthenticationService
from magnetar.broker.security.authorization import AuthorizationService
from magnetar.broker.security.tls import ReloadingServerContext, TlsSettings
from magnetar.broker.storage.contract import TopicStorageFactory
from magnetar.broker.topics.contract import Topic
from magnetar.broker.topics.nonpersistent import NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.replication_names import remote_of_cursor
from magnetar.clock import Clock
from magnetar.zk import paths
from magnetar.zk.store import MetadataStore

if TYPE_CHECKING:
    from magnetar.broker.loadbalance.cluster import BrokerCluster

log = logging.getLogger(__name__)

UNLOAD_CONCURRENCY = 32
"""Topics of one bundle closed at once on unload (each may wait for its consumers' acks)."""


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
        self.clock = clock
        self.resources = Resources(
            store,
            config.cluster_name,
            max_bundles=config.load_balancer_namespace_maximum_bundles,
            max_partitions=config.max_num_partitions_per_partitioned_topic,
        )
        self.namespaces = NamespaceService(
            config, store, self.resources, self.close_topics_of, self.close_lost
        )
        self.schemas = topic_schemas_for(config, store, storage, self.resources)
        # TLS context (reloaded on file change), authentication and authorization: their own
        # modules; off (None / allow-all) with the default configuration
        self.tls: ReloadingServerContext | None = (
            ReloadingServerContext(TlsSettings.from_config(config)) if config.tls_enabled else None
        )
        self.authn = AuthenticationService.from_config(config)
        self.authz = AuthorizationService(config, self.resources)
        self.policies = PolicyManager(self, clock)
        self.replication = GeoReplication(config, self.resources, self.schemas, store, clock)
        """Geo-replication: the replicators of the loaded topics, remote clusters' clients."""
        self.policies.listeners.append(self.replication.policies_applied)
        self.cluster: BrokerCluster | None = None
        """This broker's part in load management (set by the runner when enabled)."""
        self.topics: dict[str, Topic] = {}
        self.topics_loaded_total = 0
        """Topics loaded since start (unloads are ``topics_loaded_total - len(topics)``)."""
        self._loading: dict[str, asyncio.Future[Topic | None]] = {}
        # topics being unloaded: not loaded again here until their close is done (a client
        # reconnecting at once would get the closing managed ledger); clients get
        # ServiceNotReady and retry
        self._closing: set[str] = set()
        self._deleting: dict[str, asyncio.Future[None]] = {}
        self.connections: set[Any] = set()
        self._stop_accepting: list[Callable[[], None]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False

    def __repr__(self) -> str:
        return f"<BrokerService {self.namespaces.service_url} topics={len(self.topics)}>"

    # ------------------------------------------------------------------ life
    def bind_ports(self, port: int, port_tls: int, stop_accepting: Callable[[], None]) -> None:
        """The binary ports a listener bound (-1: that one is off), for the advertised URLs,
        and how to make it stop accepting (at close, once the bundles are handed over); call
        before starting."""
        self.namespaces.set_ports(port, port_tls)
        self._stop_accepting.append(stop_accepting)

    def stop_loading(self) -> None:
        """Closing: no topic loads from now on, no connection is accepted."""
        if self.closed:
            return
        self.closed = True
        self.namespaces.stop()
        for stop_accepting in self._stop_accepting:
            stop_accepting()

    async def close(self) -> None:
        """Close every loaded topic, then every connection (after ``stop_loading``)."""
        self.stop_loading()
        for topic in list(self.topics.values()):
            try:
                await topic.close()
            except Exception:
                log.exception("closing %s", topic)
        self.topics.clear()
        for cnx in list(self.connections):
            cnx.close()
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ names
    @staticmethod
    def parse_topic(topic: str) -> TopicName:
        return parse_topic(topic)

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
    async def get_topic(self, topic: str, create: bool = False) -> Topic | None:
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
        fut: asyncio.Future[Topic | None] = asyncio.get_running_loop().create_future()
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

    async def _load(self, tn: TopicName, create: bool) -> Topic | None:
        await self.namespaces.ensure_owned(tn)
        if not tn.persistent:
            return await self._load_non_persistent(tn, create)
        return await self._load_persistent(tn, create)

    async def _load_non_persistent(self, tn: TopicName, create: bool) -> Topic | None:
        """A non-persistent topic exists while it is loaded: made when ``create``."""
        if not create:
            return None
        if not await self.resources.namespace_exists(tn.tenant, tn.namespace):
            raise ServiceError(
                ServerError.TopicNotFound, f"Namespace {tn.namespace_name} does not exist"
            )
        topic = NonPersistentTopic(tn)
        self.topics[tn.full] = topic
        self.topics_loaded_total += 1
        self.policies.attach(topic, await self.policies.policies_for(tn.tenant, tn.namespace, tn))
        log.info("created non-persistent topic %s", tn.full)
        return topic

    async def _load_persistent(self, tn: TopicName, create: bool) -> Topic | None:
        """The topic on its managed ledger (made when ``create``), its durable subscriptions
        reopened, its compacted view loaded, its policies attached."""
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
            dedup_snapshot_every=self.config.broker_deduplication_entries_interval,
            max_unacked_per_consumer=policies.max_unacked_per_consumer,
            dispatcher_max_read_batch_size=self.config.dispatcher_max_read_batch_size,
            dispatcher_max_read_size_bytes=self.config.dispatcher_max_read_size_bytes,
            dispatcher_min_read_batch_size=self.config.dispatcher_min_read_batch_size,
            redelivery_tracker_enabled=self.config.subscription_redelivery_tracker_enabled,
            max_unacked_per_subscription=policies.max_unacked_per_subscription,
            local_cluster=self.config.cluster_name,
        )
        await topic.load()
        topic.compaction = TopicCompaction(self.storage, ml_name, clock=self.clock)
        await topic.compaction.load()
        topic.on_fenced = self._on_topic_fenced
        if not await self.namespaces.still_owned(tn):
            # its bundle was unloaded or split while it loaded: installed now, it would stay
            # served here after the bundle's topics were closed and the ownership moved on
            await topic.close()
            raise ServiceError(
                ServerError.ServiceNotReady, f"The bundle of {tn.full} moved while the topic loaded"
            )
        self.topics[tn.full] = topic
        self.topics_loaded_total += 1
        self.policies.attach(topic, policies)
        await self.replication.attach(topic, policies)  # replicators start in the background
        log.info("loaded topic %s", tn.full)
        return topic

    async def resume_replication(self) -> int:
        """Load the topics of replicated namespaces that keep a backlog for another cluster
        (a replicator cursor ``pulsar.repl.*``) and are not loaded, so their replicators
        run without waiting for a client: after a restart, or a bundle that came here. A
        topic whose bundle nobody owns is looked up first (placed as a client's lookup
        would be); one owned by another broker is left to it. Returns the topics loaded."""
        loaded = 0
        local = self.config.cluster_name
        for tenant in await self.resources.list_tenants():
            try:
                namespaces = await self.resources.list_namespaces(tenant)
            except ResourceNotFound:
                continue
            for ns_name in namespaces:
                ns = ns_name.partition("/")[2]
                try:
                    policies = await self.resources.get_policies(tenant, ns)
                except ResourceNotFound:
                    continue
                clusters = policies.get("replication_clusters") or []
                if local not in clusters or not set(clusters) - {local}:
                    continue
                prefix = f"{tenant}/{ns}/persistent/"
                for ml in await self.storage.list(prefix):
                    loaded += await self._resume_one(tenant, ns, ml[len(prefix) :], ml)
        return loaded

    async def _resume_one(self, tenant: str, ns: str, encoded_local: str, ml: str) -> int:
        from urllib.parse import unquote

        topic = f"persistent://{tenant}/{ns}/{unquote(encoded_local)}"
        if topic in self.topics or self.closed:
            return 0
        cursors = await self.store.children(paths.managed_ledger(ml))
        if not any(remote_of_cursor(c) is not None for c in cursors):
            return 0
        try:
            found = await self.namespaces.lookup(topic, authoritative=False)
            if found.redirect:
                return 0
            got = await self.get_topic(topic, create=False)
        except (ServiceError, ResourceError) as exc:
            log.info("replication of %s not resumed here: %s", topic, exc)
            return 0
        return 1 if got is not None else 0

    async def _auto_topic_creation(self, tn: TopicName) -> AutoTopicCreation:
        """The namespace's ``autoTopicCreationOverride`` over the broker settings, as Pulsar."""
        if tn.full in self.topics:
            return resolve_auto_topic_creation(self.config, {})
        try:
            ns = await self.resources.get_policies(tn.tenant, tn.namespace)
        except ResourceNotFound:
            ns = {}
        return resolve_auto_topic_creation(self.config, ns)

    async def topic_for_client(self, topic: str) -> Any:
        """The ``Topic`` for a PRODUCER/SUBSCRIBE: auto-created when allowed, else
        TopicNotFound. (Typed ``Any`` while ``protocol/topic_loading.py`` is written against
        ``PersistentTopic``: it is a ``Topic``.)"""
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

    async def _close_topic(self, name: str, topic: Topic) -> None:
        """Close an unloaded topic; it is not loaded again here until the close is done."""
        self._closing.add(name)
        try:
            await topic.close()
        finally:
            self._closing.discard(name)

    async def close_topics_of(self, bundle: NamespaceBundle) -> None:
        """Close the loaded topics that belong to ``bundle``, ``UNLOAD_CONCURRENCY`` at a
        time (each close may wait up to ``ACK_SETTLE_MAX_S`` for its consumers' acks)."""
        gate = asyncio.Semaphore(UNLOAD_CONCURRENCY)

        async def close(name: str, topic: Topic) -> None:
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

    def _on_topic_fenced(self, topic: PersistentTopic) -> None:
        async def unload() -> None:
            if self.topics.get(topic.full_name) is topic:
                del self.topics[topic.full_name]
            await topic.close()

        self._spawn(unload())

    def close_lost(self, bundles: list[NamespaceBundle]) -> None:
        """``bundles`` were lost (the namespace service heard it): close their topics now."""
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
        ownership = self.namespaces.ownership
        if self.cluster is None or ownership is None:
            return sorted(names)
        try:
            bundles = await self.resources.bundles(tenant, namespace)
        except ResourceNotFound:  # no namespace: nothing is owned elsewhere either
            return sorted(names)
        for rng in bundles.ranges:
            owner = await ownership.get_owner(NamespaceBundle(tenant, namespace, rng))
            if owner is None or owner.native_url == self.namespaces.service_url:
                continue
            try:
                names.update(
                    await self.cluster.non_persistent_in_bundle(
                        owner.http_url, owner.http_url_tls, tenant, namespace, rng.name
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
            raise to_resource_error(exc) from None

    async def delete_topic(self, topic: str, *, force: bool = False) -> None:
        try:
            tn = self.parse_topic(topic)
        except ServiceError as exc:
            raise to_resource_error(exc) from None
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
        await self._delete_stored(tn)

    async def _delete_stored(self, tn: TopicName) -> None:
        """What stays of a closed, deleted topic: its managed ledger and its schemas."""
        if tn.persistent:
            await self.storage.delete(tn.managed_ledger_name)
        await self.schemas.delete_for_topic(tn)  # a partition keeps the partitioned topic's

    async def delete_if_inactive(self, name: str, mode: InactiveTopicDeleteMode) -> bool:
        """Delete the loaded topic ``name`` if it is still inactive by ``mode`` (the
        inactive-topic sweep found it idle past its policy). The check and the topic leaving
        the registry happen with nothing awaited between them, and lookups of it answer
        ServiceNotReady until the delete is done, so a producer or consumer arriving
        meanwhile finds the topic again (re-created) or keeps it. With
        ``brokerDeleteInactivePartitionedTopicMetadataEnabled``, the last partition of a
        partitioned topic to go takes the partitioned metadata with it. A topic whose
        replicators still have a backlog is kept (Pulsar closes them first, once caught up).
        """
        topic = self.topics.get(name)
        if topic is None or topic.closed or name in self._deleting or is_active(topic, mode):
            return False
        if self.replication.keeps(topic):  # not yet replicated everywhere: kept, as Pulsar
            return False
        tn = topic.name
        self.topics.pop(name)
        self._closing.add(name)
        try:
            await topic.delete_side_storage()
            await topic.close()
            await self._delete_stored(tn)
        finally:
            self._closing.discard(name)
        if self.config.broker_delete_inactive_partitioned_topic_metadata_enabled:
            await self._delete_partitioned_metadata_if_empty(tn)
        return True

    async def _delete_partitioned_metadata_if_empty(self, tn: TopicName) -> None:
        """The partitioned topic of partition ``tn`` loses its metadata once none of its
        partitions is loaded or stored."""
        if tn.partition_index < 0:
            return
        base = tn.partitioned_base
        parts = await self.resources.get_partitions(
            base.tenant, base.namespace, base.domain, base.local
        )
        for i in range(parts):
            other = base.partition(i)
            if other.full in self.topics or other.full in self._loading:
                return
            if other.persistent and await self.storage.exists(other.managed_ledger_name):
                return
        if parts:
            try:
                await self.resources.delete_partitioned(
                    base.tenant, base.namespace, base.domain, base.local
                )
            except ResourceNotFound:
                return
            await self.schemas.delete_for_topic(base)
            log.info("deleted the metadata of inactive partitioned topic %s", base.full)

    async def delete_topic_schemas(self, topic: str) -> None:
        """A partitioned topic was deleted: its schemas go with it (as Pulsar)."""
        try:
            tn = self.parse_topic(topic)
        except ServiceError as exc:
            raise to_resource_error(exc) from None
        await self.schemas.delete_for_topic(tn)

    async def existing_topic(self, topic: str) -> Topic:
        """The loaded or stored topic (loaded here if needed); ``ResourceNotFound`` if it does
        not exist, the admin errors for the rest."""
        try:
            got = await self.get_topic(topic, create=False)
        except ServiceError as exc:
            raise to_resource_error(exc) from None
        if got is None:
            raise ResourceNotFound("Topic not found")
        return got

    def stats(self) -> dict[str, Any]:
        return {
            "topics": len(self.topics),
            "connections": len(self.connections),
            "msgInCounter": sum(t.counters.msg_in for t in self.topics.values()),
            "bytesInCounter": sum(t.counters.bytes_in for t in self.topics.values()),
            "producers": sum(len(t.producers.producers) for t in self.topics.values()),
            "subscriptions": sum(len(t.subscriptions) for t in self.topics.values()),
        }


__all__ = ["UNLOAD_CONCURRENCY", "BrokerService", "LookupResult", "ServiceError"]
