"""Geo-replication in a broker: remote clusters, and the replication of every loaded topic.

Owns:
- ``RemoteClusters``: one ``ClientRemoteCluster`` per remote cluster, made from its stored
  ``ClusterData`` on first use and rebuilt when that registration changes (the metadata
  store's notification on ``/admin/clusters/<name>``; credentials, URLs, TLS trust):
  replicators towards it then start again with the new one. A cluster that is not
  registered here is a ``ReplicationError`` (retried, shown in stats), never a silent drop.
- ``RemoteHandle``: the ``RemoteCluster`` a replicator holds, resolving the current client
  on each connect.
- ``GeoReplication``: a ``TopicReplication`` attached to each loaded persistent topic
  (``attach``, at load), following the topic's resolved policies (``policies_applied``: the
  policy manager's listener; ``replicationPolicyCheckDurationSeconds``: all of them again),
  and the numbers: the ``replication`` map of topic stats per remote cluster, outbound
  (the replicator) and inbound (another cluster's replicator producing here), the
  replicator cursors for internal stats, and the values of ``pulsar_replication_*``.
Must not know: the wire, HTTP handlers, how topics are loaded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import ResourceError
from magnetar.broker.namespace.cluster_data import ClusterData
from magnetar.broker.naming import TopicName
from magnetar.broker.policies.model import TopicPolicies
from magnetar.broker.replication.clusters import replication_plan
from magnetar.broker.replication.contracts import ReplicationError
from magnetar.broker.replication.remote import ClientRemoteCluster, ClientRemoteProducer
from magnetar.broker.replication.stats import InboundReplication, RateMeter
from magnetar.broker.replication.topic_replication import ReplicationSettings, TopicReplication
from magnetar.broker.schema.model import SchemaError, version_of
from magnetar.broker.schema.protocol import to_wire
from magnetar.broker.schema.topics import TopicSchemas, schema_id
from magnetar.broker.storage.contract import TopicCursor
from magnetar.broker.topics.contract import Topic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.replication_names import ReplicationLink
from magnetar.client.protocol import pb
from magnetar.clock import Clock, SystemClock, TimerHandle
from magnetar.zk import paths
from magnetar.zk.store import MetadataStore, Notification

log = logging.getLogger(__name__)


class ClusterSource(Protocol):
    """Where clusters and partition counts are read (``namespace.resources.Resources``)."""

    async def cluster_data(self, cluster: str) -> ClusterData: ...

    async def get_partitions(self, tenant: str, namespace: str, domain: str, local: str) -> int: ...


class RemoteClusters:
    """The client of each remote cluster (see the module docstring)."""

    def __init__(
        self,
        clusters: ClusterSource,
        *,
        producer_queue_size: int,
        on_changed: Callable[[str], None],
    ) -> None:
        self._clusters = clusters
        self.producer_queue_size = producer_queue_size
        self._on_changed = on_changed
        self._clients: dict[str, ClientRemoteCluster] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        return f"<RemoteClusters {sorted(self._clients)}>"

    async def _data(self, name: str) -> ClusterData:
        try:
            return await self._clusters.cluster_data(name)
        except ResourceError:
            raise ReplicationError(
                f"cluster {name} is not registered in this cluster (PUT /admin/v2/clusters/{name})"
            ) from None
        except Exception as exc:
            raise ReplicationError(f"cluster {name}: cannot read its registration: {exc}") from None

    async def client_for(self, name: str) -> ClientRemoteCluster:
        client = self._clients.get(name)
        if client is not None:
            return client
        data = await self._data(name)
        client = self._clients.get(name)  # made meanwhile by another replicator
        if client is None:
            client = self._clients[name] = ClientRemoteCluster(
                data,
                producer_queue_size=self.producer_queue_size,
                partitions_of=self._partitions_of,
            )
        return client

    async def _partitions_of(self, topic: str) -> int:
        tn = TopicName.parse(topic)
        return await self._clusters.get_partitions(tn.tenant, tn.namespace, tn.domain, tn.local)

    def on_notification(self, n: Notification) -> None:
        prefix = paths.CLUSTERS + "/"
        if n.path.startswith(prefix):
            name = n.path[len(prefix) :]
            if name in self._clients:
                task = asyncio.get_running_loop().create_task(self._recheck(name))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _recheck(self, name: str) -> None:
        client = self._clients.get(name)
        if client is None:
            return
        try:
            data: ClusterData | None = await self._clusters.cluster_data(name)
        except Exception:
            data = None  # deleted (or unreadable): replicators retry and show why
        if data == client.data:
            return
        log.info("cluster %s: its registration changed; its replicators reconnect", name)
        self._clients.pop(name, None)
        self._on_changed(name)
        await client.close()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


class RemoteHandle:
    """A ``RemoteCluster`` by name: the current client of that cluster on every connect."""

    def __init__(self, name: str, clusters: RemoteClusters) -> None:
        self.name = name
        self._clusters = clusters

    def __repr__(self) -> str:
        return f"<RemoteHandle {self.name}>"

    async def create_producer(self, topic: str, producer_name: str) -> ClientRemoteProducer:
        client = await self._clusters.client_for(self.name)
        return await client.create_producer(topic, producer_name)


@dataclass(frozen=True, slots=True)
class ReplicationValues:
    """One (topic, remote cluster) row of ``pulsar_replication_*``."""

    topic: str
    namespace: str
    remote: str
    backlog: int
    rate_in: float
    rate_out: float
    throughput_in: float
    throughput_out: float
    delay_s: float
    connected: bool


class GeoReplication:
    """The broker's geo-replication (see the module docstring)."""

    def __init__(
        self,
        config: BrokerConfig,
        clusters: ClusterSource,
        schemas: TopicSchemas,
        store: MetadataStore,
        clock: Clock | None = None,
    ) -> None:
        self.local = config.cluster_name
        self.clock: Clock = clock or SystemClock()
        self.settings = ReplicationSettings(
            producer_queue_size=config.replication_producer_queue_size,
            subscriptions_enabled=config.enable_replicated_subscriptions,
            snapshot_frequency_ms=config.replicated_subscriptions_snapshot_frequency_millis,
            snapshot_timeout_s=config.replicated_subscriptions_snapshot_timeout_seconds,
            snapshots_cached=config.replicated_subscriptions_snapshot_max_cached_per_subscription,
        )
        self.check_interval_s = float(config.replication_policy_check_duration_seconds)
        self._schemas = schemas
        self._store = store
        self.remotes = RemoteClusters(
            clusters,
            producer_queue_size=self.settings.producer_queue_size,
            on_changed=self._cluster_changed,
        )
        self._handles: dict[str, RemoteHandle] = {}
        self.topics: dict[str, TopicReplication] = {}
        self._policies: dict[str, TopicPolicies] = {}
        self._inbound_meters: dict[tuple[str, str], RateMeter] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timer: TimerHandle | None = None
        self.closed = False

    def __repr__(self) -> str:
        return f"<GeoReplication {self.local} topics={len(self.topics)}>"

    # -- life --------------------------------------------------------------------------------
    def start(self) -> None:
        self._store.add_listener(self.remotes.on_notification)
        self._arm()

    async def close(self) -> None:
        """After the topics closed (each detached its replication)."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._store.remove_listener(self.remotes.on_notification)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.remotes.close()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)

    def _arm(self) -> None:
        if self.closed or self.check_interval_s <= 0:
            return

        def fire() -> None:
            self._timer = None
            for name, tr in list(self.topics.items()):
                policies = self._policies.get(name)
                if policies is not None:
                    self._spawn(self._apply(tr, policies))
            self._arm()

        self._timer = self.clock.call_later(self.check_interval_s, fire)

    # -- topics ------------------------------------------------------------------------------
    def _handle(self, remote: str) -> RemoteHandle:
        handle = self._handles.get(remote)
        if handle is None:
            handle = self._handles[remote] = RemoteHandle(remote, self.remotes)
        return handle

    async def attach(self, topic: Topic, policies: TopicPolicies) -> None:
        """A topic was loaded: its replication follows its policies from now on."""
        if not isinstance(topic, PersistentTopic) or self.closed:
            return  # non-persistent topics are not replicated (documented)
        tr = TopicReplication(
            topic,
            self.local,
            self._handle,
            lambda version: self._schema_of(topic.name, version),
            self.clock,
            self.settings,
        )
        self.topics[topic.full_name] = tr
        self._policies[topic.full_name] = policies
        topic.attachments.append(_Detach(self, topic.full_name, tr))
        try:
            await self._apply(tr, policies)
        except Exception as exc:  # the topic is served anyway; the next check tries again
            log.warning("replication of %s not started yet: %s", topic.full_name, exc)

    def policies_applied(self, topic: Topic, policies: TopicPolicies) -> None:
        """The policy manager applied (changed) policies to a loaded topic."""
        tr = self.topics.get(topic.full_name)
        if tr is None or tr.topic is not topic:
            return
        self._policies[topic.full_name] = policies
        self._spawn(self._apply(tr, policies))

    async def _apply(self, tr: TopicReplication, policies: TopicPolicies) -> None:
        plan = replication_plan(
            {"replication_clusters": list(policies.replication_clusters)}, {}, self.local
        )
        await tr.apply(plan, policies)

    def forget(self, name: str, tr: TopicReplication) -> None:
        """``tr`` was detached from its topic (closed)."""
        if self.topics.get(name) is tr:
            del self.topics[name]
            self._policies.pop(name, None)
            for key in [k for k in self._inbound_meters if k[0] == name]:
                del self._inbound_meters[key]

    def _cluster_changed(self, remote: str) -> None:
        for tr in list(self.topics.values()):
            if remote in tr.replicators:
                self._spawn(tr.reconnect(remote))

    async def _schema_of(self, topic: TopicName, version: bytes) -> pb.Schema | None:
        try:
            found = await self._schemas.get(topic, version_of(version))
        except SchemaError:
            return None
        return to_wire(schema_id(topic), found.schema)

    def keeps(self, topic: Topic) -> bool:
        """``topic`` still has something to replicate (a replicator with a backlog): it must
        not be deleted as inactive."""
        tr = self.topics.get(topic.full_name)
        if tr is None or tr.topic is not topic:
            return False
        return any(s.replication_backlog > 0 for s in tr.statistics().values())

    # -- numbers -----------------------------------------------------------------------------
    def _inbound(self, topic: Topic) -> dict[str, InboundReplication]:
        """Other clusters' replicators producing on ``topic`` here, by their cluster."""
        out: dict[str, InboundReplication] = {}
        for producer in topic.producers.producers.values():
            if producer.link is None:
                continue
            link = ReplicationLink.of_producer(producer.link)
            if link is None:
                continue
            meter = self._inbound_meters.get((topic.full_name, link.local))
            if meter is None:
                meter = self._inbound_meters[(topic.full_name, link.local)] = RateMeter(self.clock)
            rates = meter.rates({"in": float(producer.msg_in), "bytes": float(producer.bytes_in)})
            out[link.local] = InboundReplication(
                rates["in"], rates["bytes"], producer.address, producer.connected_since_ms
            )
        return out

    def topic_stats(self, topic: Topic) -> dict[str, Any]:
        """Pulsar's ``replication`` map of topic stats: one entry per remote cluster the
        topic replicates to or receives from."""
        tr = self.topics.get(topic.full_name)
        outbound = tr.statistics() if tr is not None and tr.topic is topic else {}
        inbound = self._inbound(topic)
        replication: dict[str, Any] = {}
        for remote in sorted(set(outbound) | set(inbound)):
            stats = outbound.get(remote)
            if stats is not None:
                replication[remote] = stats.to_json(inbound.get(remote))
            else:
                replication[remote] = inbound[remote].to_json()
        out: dict[str, Any] = {"replication": replication}
        if tr is not None and tr.topic is topic and tr.subscriptions is not None:
            out["replicatedSubscriptions"] = tr.subscriptions.statistics()
        return out

    def replicator_cursors(self, topic: Topic) -> Mapping[str, TopicCursor]:
        """The replicators' cursors of ``topic`` by remote cluster (internal stats)."""
        tr = self.topics.get(topic.full_name)
        return dict(tr.cursors) if tr is not None and tr.topic is topic else {}

    def values(self) -> list[ReplicationValues]:
        """``pulsar_replication_*`` of every loaded topic and remote cluster."""
        rows: list[ReplicationValues] = []
        for name, tr in sorted(self.topics.items()):
            outbound = tr.statistics()
            inbound = self._inbound(tr.topic)
            for remote in sorted(set(outbound) | set(inbound)):
                out = outbound.get(remote)
                inb = inbound.get(remote, InboundReplication())
                rows.append(
                    ReplicationValues(
                        name,
                        tr.topic.name.namespace_name,
                        remote,
                        out.replication_backlog if out is not None else 0,
                        inb.msg_rate_in,
                        out.msg_rate_out if out is not None else 0.0,
                        inb.msg_throughput_in,
                        out.msg_throughput_out if out is not None else 0.0,
                        out.replication_delay_s if out is not None else 0.0,
                        out.connected if out is not None else False,
                    )
                )
        return rows


class _Detach:
    """The ``TopicAttachment`` of a topic's replication: detached when the topic closes."""

    def __init__(self, geo: GeoReplication, name: str, tr: TopicReplication) -> None:
        self._geo = geo
        self._name = name
        self._tr = tr

    def __repr__(self) -> str:
        return f"<replication of {self._name}>"

    async def detach(self) -> None:
        self._geo.forget(self._name, self._tr)
        await self._tr.detach()


def _log_failure(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        return
    exc = fut.exception()
    if exc is not None:
        log.warning("geo-replication: %s", exc, exc_info=exc)


__all__ = [
    "ClusterSource",
    "GeoReplication",
    "RemoteClusters",
    "RemoteHandle",
    "ReplicationValues",
]
