"""This broker's part in the cluster: its load report, the load manager, where unowned
bundles go on a lookup, bundle split, and the graceful hand-over of its bundles.

Owns: ``BrokerCluster`` (built by the service from its config; counters per owned bundle for
the report; ``assign`` for lookups of unowned bundles: the leader places them, other brokers
redirect the lookup to the leader; ``split`` of an owned bundle; ``drain`` on shutdown) and
``HttpClusterActions`` (how the leader asks other brokers to unload or split, and probes).
Invariant: a bundle is only ever taken by a broker through the ownership node's create-only
put, so two lookups racing for one bundle never give it two owners.
Must not know: the wire protocol, managed ledgers.
"""

from __future__ import annotations

import contextlib
import logging
import random
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import ResourceError
from magnetar.broker.listeners import ListenerNotFound
from magnetar.broker.loadbalance import (
    BrokerLoadReport,
    PlacementConfig,
    ReportPolicy,
    ResourceWeights,
    SheddingConfig,
    SplitAlgorithm,
    SplitError,
    SplitThresholds,
    TopicLoad,
    split_boundaries,
)
from magnetar.broker.loadbalance.host_usage import HostUsageSampler
from magnetar.broker.loadbalance.manager import (
    LeaderInfo,
    LoadManager,
    LoadManagerConfig,
    NoBrokerAvailable,
    NotLeader,
    ProbeResult,
)
from magnetar.broker.loadbalance.reporter import BundleCounters, LoadReporter
from magnetar.broker.namespace.bundles import BundleRange, NamespaceBundles, topic_hash
from magnetar.broker.namespace.lookup import NamespaceService
from magnetar.broker.namespace.ownership import NamespaceBundle
from magnetar.broker.namespace.resources import Resources
from magnetar.broker.naming import TopicName
from magnetar.broker.topics.contract import Topic
from magnetar.clock import Clock
from magnetar.zk.store import MetadataStore

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 1.0
_OWN_ROLE_HINT = (
    "this broker's admin calls need its own role (brokerClientAuthenticationPlugin and "
    "brokerClientAuthenticationParameters), a superuser (superUserRoles) on every broker"
)
ADMIN_TIMEOUT_S = 30.0


LISTED_TOPICS_MAX = 1_000_000
"""Topic names taken at most from one peer's bundle listing."""


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where a lookup of an unowned bundle goes: ``broker_url``/``http_url`` with
    ``authoritative`` (the leader chose that broker: it takes the bundle on lookup) or not
    (it is the leader, to be asked)."""

    broker_url: str
    http_url: str
    authoritative: bool


def load_manager_config(c: BrokerConfig) -> LoadManagerConfig:
    weights = ResourceWeights(
        c.load_balancer_cpu_resource_weight,
        c.load_balancer_memory_resource_weight,
        c.load_balancer_bandwidth_in_resource_weight,
        c.load_balancer_bandwidth_out_resource_weight,
    )
    return LoadManagerConfig(
        placement=PlacementConfig(
            c.load_balancer_history_resource_percentage,
            c.load_balancer_average_resource_usage_difference_threshold_percentage,
            weights,
        ),
        shedding=SheddingConfig(
            threshold_percent=c.load_balancer_broker_threshold_shedder_percentage,
            overloaded_threshold_percent=c.load_balancer_broker_overloaded_threshold_percentage,
            history_fraction=c.load_balancer_history_resource_percentage,
            grace_period_ms=int(c.load_balancer_shedding_grace_period_minutes * 60_000),
            min_throughput_bytes=c.load_balancer_bundle_unload_min_throughput_threshold * 2**20,
            weights=weights,
        ),
        shedding_strategy=c.load_balancer_load_shedding_strategy,
        shedding_enabled=c.load_balancer_shedding_enabled,
        shedding_interval_ms=int(c.load_balancer_shedding_interval_minutes * 60_000),
        split=SplitThresholds(
            max_topics=c.load_balancer_namespace_bundle_max_topics,
            max_sessions=c.load_balancer_namespace_bundle_max_sessions,
            max_msg_rate=c.load_balancer_namespace_bundle_max_msg_rate,
            max_bandwidth_mbytes=c.load_balancer_namespace_bundle_max_bandwidth_mbytes,
            max_bundles=c.load_balancer_namespace_maximum_bundles,
        ),
        auto_split_enabled=c.load_balancer_auto_bundle_split_enabled,
        auto_unload_split_bundles=c.load_balancer_auto_unload_split_bundles_enabled,
        split_algorithm=SplitAlgorithm.parse(c.default_namespace_bundle_split_algorithm),
        split_interval_ms=int(c.load_balancer_split_interval_minutes * 60_000),
        probe_interval_ms=c.load_balancer_broker_probe_interval_millis,
        probe_failures=c.load_balancer_broker_probe_failures,
        unresponsive_ms=c.load_balancer_broker_unresponsive_timeout_millis,
    )


def report_policy(c: BrokerConfig) -> ReportPolicy:
    return ReportPolicy(
        c.load_balancer_report_update_threshold_percentage,
        c.load_balancer_report_update_min_interval_millis,
        int(c.load_balancer_report_update_max_interval_minutes * 60_000),
    )


def bundle_key(bundle: NamespaceBundle) -> str:
    return f"{bundle.tenant}/{bundle.namespace}/{bundle.range.name}"


def bundle_of_key(key: str) -> NamespaceBundle:
    tenant, namespace, rng = key.split("/")
    return NamespaceBundle(tenant, namespace, BundleRange.parse(rng))


class ClientCredentials(Protocol):
    """This broker's own role and TLS settings for its calls to other brokers (built by the
    service: ``security.broker_client.BrokerClientAuth``)."""

    @property
    def tls_enabled(self) -> bool: ...

    def request_options(self) -> dict[str, Any]: ...

    def pick_url(self, http_url: str, http_url_tls: str) -> str: ...


class NoCredentials:
    """Calls without credentials, over the plain URLs."""

    tls_enabled = False

    def request_options(self) -> dict[str, Any]:
        return {}

    def pick_url(self, http_url: str, http_url_tls: str) -> str:
        return http_url


class HttpClusterActions:
    """The leader's hands: other brokers' admin REST for unload and split (this broker's
    own bundles are handled in process), the health endpoint as the liveness probe (an
    answer, not just a TCP connect: the kernel accepts connections for a frozen process).
    Every call carries this broker's own role and TLS settings (``auth``, the broker-client
    settings)."""

    def __init__(self, cluster: BrokerCluster, auth: ClientCredentials | None = None) -> None:
        self._cluster = cluster
        self._session: aiohttp.ClientSession | None = None
        self._probe_session: aiohttp.ClientSession | None = None
        self.auth: ClientCredentials = auth or NoCredentials()

    def http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=ADMIN_TIMEOUT_S)
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._probe_session is not None:
            await self._probe_session.close()
            self._probe_session = None

    async def _put(self, base: str, path: str, params: Mapping[str, str]) -> None:
        url = base.rstrip("/") + path
        async with self.http().put(url, params=params, **self.auth.request_options()) as resp:
            if resp.status in (401, 403):
                raise PermissionError(
                    f"PUT {url} refused with HTTP {resp.status} {await resp.text()}: "
                    f"{_OWN_ROLE_HINT}"
                )
            if resp.status >= 300:
                raise RuntimeError(f"PUT {url}: HTTP {resp.status} {await resp.text()}")

    async def _base_url(self, owner: BrokerLoadReport, bundle: str) -> str:
        """The owner's admin URL: its HTTPS one (from the ownership data) when TLS is on."""
        ownership = self._cluster.service.namespaces.ownership
        if self.auth.tls_enabled and ownership is not None:
            info = await ownership.get_owner(bundle_of_key(bundle))
            if info is not None:
                return self.auth.pick_url(owner.web_service_url, info.http_url_tls)
        return owner.web_service_url

    async def unload(self, owner: BrokerLoadReport, bundle: str) -> None:
        if owner.broker_id == self._cluster.broker_id:
            await self._cluster.service.namespaces.unload_bundle(bundle_of_key(bundle))
            return
        t, ns, rng = bundle.split("/")
        base = await self._base_url(owner, bundle)
        await self._put(base, f"/admin/v2/namespaces/{t}/{ns}/{rng}/unload", {})

    async def split(
        self, owner: BrokerLoadReport, bundle: str, algorithm: SplitAlgorithm, unload: bool
    ) -> None:
        if owner.broker_id == self._cluster.broker_id:
            await self._cluster.split(bundle_of_key(bundle), algorithm, unload=unload)
            return
        t, ns, rng = bundle.split("/")
        params = {"unload": str(unload).lower(), "splitAlgorithmName": algorithm.value}
        base = await self._base_url(owner, bundle)
        await self._put(base, f"/admin/v2/namespaces/{t}/{ns}/{rng}/split", params)

    async def bundle_count(self, namespace: str) -> int:
        tenant, ns = namespace.split("/")
        return len((await self._cluster.service.resources.bundles(tenant, ns)).ranges)

    async def probe(self, broker: BrokerLoadReport) -> ProbeResult:
        url = broker.web_service_url.rstrip("/") + "/admin/v2/brokers/health"
        if self._probe_session is None:
            # a fresh connection per probe: a kept-alive one to a killed broker would fail
            # as "disconnected" once before the refusals that prove its death
            self._probe_session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True),
                timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S),
            )
        try:
            # this broker's role and TLS settings: a TLS-only broker's health is HTTPS
            async with self._probe_session.get(url, **self.auth.request_options()) as resp:
                await resp.read()
                # any answer proves the process runs (401 with authentication on), but 503:
                # the broker says it lost its metadata session, so cannot keep its bundles
                return ProbeResult.TIMEOUT if resp.status == 503 else ProbeResult.ALIVE
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, ConnectionRefusedError):
                return ProbeResult.REFUSED
            return ProbeResult.TIMEOUT
        except (TimeoutError, aiohttp.ClientError, OSError):
            return ProbeResult.TIMEOUT


class ClusterHost(Protocol):
    """What this broker's part in the cluster needs of its service (``BrokerService`` is
    one): settings, metadata, the namespace service (ownership, identity, unloads), the
    loaded topics, and closing a bundle's topics."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def store(self) -> MetadataStore: ...

    @property
    def resources(self) -> Resources: ...

    @property
    def namespaces(self) -> NamespaceService: ...

    @property
    def topics(self) -> Mapping[str, Topic]: ...

    async def close_topics_of(self, bundle: NamespaceBundle) -> None: ...

    async def list_topics(
        self, tenant: str, namespace: str, domain: str = "persistent"
    ) -> list[str]: ...


class BrokerCluster:
    def __init__(
        self,
        service: ClusterHost,
        clock: Clock,
        *,
        rng: random.Random | None = None,
        credentials: ClientCredentials | None = None,
    ) -> None:
        self.service = service
        self._clock = clock
        self._rng = rng or random.Random()
        self.config = service.config
        self.broker_id = ""
        self.reporter: LoadReporter | None = None
        self.manager: LoadManager | None = None
        self.actions = HttpClusterActions(self, credentials)
        self.draining = False

    def __repr__(self) -> str:
        return f"<BrokerCluster {self.broker_id} {self.manager!r}>"

    async def start(self, web_service_url: str) -> None:
        host = urllib.parse.urlsplit(web_service_url)
        self.broker_id = f"{host.hostname}:{host.port}"
        c = self.config
        self.reporter = LoadReporter(
            self.service.store,
            self._clock,
            self.broker_id,
            pulsar_service_url=self.service.namespaces.service_url,
            web_service_url=web_service_url,
            counters=self.counters,
            sampler=HostUsageSampler(nic_speed_gbps=c.load_balancer_override_broker_nic_speed_gbps),
            policy=report_policy(c),
        )
        await self.reporter.start()
        self.manager = LoadManager(
            self.service.store,
            self._clock,
            LeaderInfo(self.broker_id, web_service_url, self.service.namespaces.service_url),
            load_manager_config(c),
            self.actions,
            rng=self._rng,
        )
        await self.manager.start()

    async def close(self) -> None:
        if self.manager is not None:
            await self.manager.close()
        if self.reporter is not None:
            await self.reporter.close()
        await self.actions.close()

    # -- the report --

    async def counters(self) -> dict[str, BundleCounters]:
        """Cumulative figures per owned bundle, from the loaded topics."""
        ownership = self.service.namespaces.ownership
        if ownership is None:
            return {}
        owned = ownership.owned
        out: dict[str, BundleCounters] = {bundle_key(b): BundleCounters() for b in owned}
        by_ns: dict[tuple[str, str], NamespaceBundles] = {}
        for name, topic in list(self.service.topics.items()):
            tn = topic.name
            ns = (tn.tenant, tn.namespace)
            if ns not in by_ns:
                try:
                    by_ns[ns] = await self.service.resources.bundles(*ns)
                except Exception:
                    continue
            key = bundle_key(NamespaceBundle(tn.tenant, tn.namespace, by_ns[ns].find(name)))
            if key not in out:
                continue
            stats: dict[str, Any] = topic.stats()
            msg_in = int(stats.get("msgInCounter", 0))
            bytes_in = int(stats.get("bytesInCounter", 0))
            subs = stats.get("subscriptions", {}).values()
            consumers = [c for s in subs for c in s.get("consumers", [])]
            msg_out = sum(int(c.get("msgOutCounter", 0)) for c in consumers)
            bytes_out = msg_out * bytes_in // msg_in if msg_in else 0
            b = out[key]
            out[key] = BundleCounters(
                b.msg_in + msg_in,
                b.bytes_in + bytes_in,
                b.msg_out + msg_out,
                b.bytes_out + bytes_out,
                b.topics + 1,
                b.producers + len(stats.get("publishers", [])),
                b.consumers + len(consumers),
            )
        return out

    # -- lookups of unowned bundles --

    async def assign(self, bundle: NamespaceBundle) -> Assignment | None:
        """Where an unowned bundle goes: None means this broker takes it."""
        manager = self.manager
        if manager is None:
            return None
        if manager.is_leader:
            try:
                chosen = await manager.select_broker(bundle_key(bundle))
            except (NoBrokerAvailable, NotLeader):
                return None if not self.draining else await self._to_leader(manager)
            if chosen.broker_id == self.broker_id:
                return None
            return Assignment(chosen.pulsar_service_url, chosen.web_service_url, True)
        return await self._to_leader(manager)

    async def _to_leader(self, manager: LoadManager) -> Assignment | None:
        leader = await manager.leader()
        if leader is None or leader.broker_id == self.broker_id or not leader.pulsar_service_url:
            return None  # no leader yet: take it rather than fail the lookup
        return Assignment(leader.pulsar_service_url, leader.service_url, False)

    async def non_persistent_in_bundle(
        self, http_url: str, http_url_tls: str, tenant: str, namespace: str, bundle: str
    ) -> list[str]:
        """The non-persistent topics the owner at ``http_url`` (``http_url_tls`` when this
        broker's client TLS is on) has loaded in ``bundle``, asked with this broker's role."""
        auth = self.actions.auth
        base = auth.pick_url(http_url, http_url_tls)
        url = f"{base.rstrip('/')}/admin/v2/non-persistent/{tenant}/{namespace}/{bundle}"
        async with self.actions.http().get(url, **auth.request_options()) as resp:
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}")
            data = await resp.json()
        if not isinstance(data, list):
            raise RuntimeError("the answer is not a list")
        return [str(name) for name in data][:LISTED_TOPICS_MAX]

    async def topic_stats(
        self, http_url: str, http_url_tls: str, topic: TopicName
    ) -> dict[str, Any] | None:
        """A topic's stats as its owner (at ``http_url``, or ``http_url_tls`` when this
        broker's client TLS is on) answers them, with this broker's own role; None when the
        owner does not know the topic (404)."""
        auth = self.actions.auth
        base = auth.pick_url(http_url, http_url_tls)
        url = (
            f"{base.rstrip('/')}/admin/v2/{topic.domain}/{topic.tenant}/{topic.namespace}/"
            f"{urllib.parse.quote(topic.local, safe='')}/stats"
        )
        async with self.actions.http().get(
            url, allow_redirects=False, **auth.request_options()
        ) as resp:
            if resp.status == 404:
                return None
            if resp.status != 200:
                raise RuntimeError(f"GET {url}: HTTP {resp.status} {await resp.text()}")
            data = await resp.json()
        if not isinstance(data, dict):
            raise RuntimeError(f"GET {url}: the answer is not an object")
        return data

    async def http_lookup(
        self,
        leader_http_url: str,
        topic: TopicName,
        *,
        listener_name: str = "",
        authoritative: bool = False,
    ) -> tuple[str, ...]:
        """The HTTP lookup answer for ``topic`` of the leader (or, ``authoritative``, of the
        broker the leader chose, which then takes the bundle): (broker URL, HTTP URL, and
        their TLS forms), those of ``listener_name`` when given."""
        url = (
            f"{leader_http_url.rstrip('/')}/lookup/v2/topic/{topic.domain}/{topic.tenant}/"
            f"{topic.namespace}/{urllib.parse.quote(topic.local, safe='')}"
        )
        query = {"authoritative": "true"} if authoritative else {}
        if listener_name:
            query["listenerName"] = listener_name
        options = self.actions.auth.request_options()
        async with self.actions.http().get(url, params=query, **options) as resp:
            if resp.status != 200:
                reason = ""
                with contextlib.suppress(Exception):
                    reason = str((await resp.json()).get("reason", ""))
                if listener_name and reason == str(ListenerNotFound(listener_name)):
                    raise ListenerNotFound(listener_name)
                why = f"lookup through the leader {leader_http_url}: HTTP {resp.status}"
                if resp.status in (401, 403):
                    why += f" ({_OWN_ROLE_HINT})"
                    log.warning("%s", why)
                err = ResourceError(why)
                err.http_status = 503  # the client retries the lookup, as on a busy leader
                raise err
            data = await resp.json()
        return (
            str(data["brokerUrl"]),
            str(data["httpUrl"]),
            str(data.get("brokerUrlTls", "")),
            str(data.get("httpUrlTls", "")),
        )

    # -- split --

    async def split(
        self,
        bundle: NamespaceBundle,
        algorithm: SplitAlgorithm,
        *,
        unload: bool,
        positions: list[int] | None = None,
    ) -> NamespaceBundles:
        """Split an owned bundle (Pulsar's admin split). With ``unload`` the bundle's topics
        are closed and both halves left for the next lookups to place; without, this broker
        takes both halves before the new boundaries are published, so its topics stay."""
        service = self.service
        ownership = service.namespaces.ownership
        assert ownership is not None
        if not ownership.is_owned(bundle):
            raise SplitError(f"bundle {bundle} is not owned by this broker")
        topics = await self._topic_loads(bundle)
        points = split_boundaries(
            algorithm,
            bundle.range,
            topics=topics,
            positions=positions or [],
            thresholds=load_manager_config(self.config).split,
        )
        halves = [
            BundleRange(lo, hi)
            for lo, hi in zip(
                [bundle.range.lower, *points], [*points, bundle.range.upper], strict=True
            )
        ]
        children = [NamespaceBundle(bundle.tenant, bundle.namespace, r) for r in halves]
        with service.namespaces.unloading(bundle) if unload else contextlib.nullcontext():
            if unload:
                await ownership.set_disabled(bundle)
                await service.close_topics_of(bundle)
            else:
                for child in children:
                    await ownership.try_acquire(child)
            try:
                result = await service.resources.split_bundle(
                    bundle.tenant, bundle.namespace, bundle.range, points
                )
            except Exception:
                if not unload:
                    for child in children:
                        await ownership.release(child)
                raise
            await ownership.release(bundle)
        log.info(
            "split bundle %s at %s (%s)%s",
            bundle,
            ", ".join(f"0x{p:08x}" for p in points),
            algorithm.value,
            ", halves unloaded" if unload else "",
        )
        return result

    async def _topic_loads(self, bundle: NamespaceBundle) -> list[TopicLoad]:
        """The bundle's topics with their lifetime rates (for the topic-count and flow
        algorithms): loaded topics and stored ones."""
        names: set[str] = set()
        service = self.service
        for domain in ("persistent", "non-persistent"):
            with contextlib.suppress(Exception):
                names.update(await service.list_topics(bundle.tenant, bundle.namespace, domain))
        loads = []
        for name in names:
            h = topic_hash(name)
            if not bundle.range.contains(h):
                continue
            topic = service.topics.get(name)
            rate = throughput = 0.0
            if topic is not None:
                stats = topic.stats()
                rate = float(stats.get("msgRateIn", 0.0)) + float(stats.get("msgRateOut", 0.0))
                throughput = float(stats.get("msgThroughputIn", 0.0)) + float(
                    stats.get("msgThroughputOut", 0.0)
                )
            loads.append(TopicLoad(h, rate, throughput))
        return loads

    # -- graceful hand-over --

    async def drain(self, unload: Callable[[NamespaceBundle], Awaitable[None]]) -> None:
        """Shutting down: say so in the report (nothing new is placed here), then hand the
        bundles over one at a time, so each one's clients move while the rest are served."""
        self.draining = True
        if self.reporter is not None:
            with contextlib.suppress(Exception):
                await self.reporter.set_draining()
        if self.manager is not None and self.manager.is_leader:
            await self.manager.close()  # the next contender leads and places our bundles
            self.manager = None
        ownership = self.service.namespaces.ownership
        if ownership is None:
            return
        for bundle in ownership.owned:
            try:
                await unload(bundle)
            except Exception as exc:
                log.warning("hand-over of bundle %s: %s", bundle, exc)


__all__ = [
    "Assignment",
    "BrokerCluster",
    "ClientCredentials",
    "HttpClusterActions",
    "bundle_key",
    "bundle_of_key",
    "load_manager_config",
    "report_policy",
]
