"""One broker process's parts wired together: metadata, managed ledgers, service, HTTP.

Owns: building a ``BrokerService`` on managed ledgers over the bookies registered in the
metadata store (``BookieClient`` per bookie), starting the service's parts in order and
stopping them in reverse (``BrokerServiceRunner``: security, namespaces, policies, the
compaction monitor, load management), serving the admin REST API / HTTP lookup / metrics on
the web port, logging setup, the configuration store beside the local one when
``configuration_metadata_store_url`` names one. Used by ``magnetar broker`` (cluster) and
``magnetar standalone``; tests run a service with ``BrokerServiceRunner`` alone.
Must not know: how the metadata store or the bookies were started.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sys
import time
from typing import Any

from aiohttp import web

from magnetar.bookie.client import BookieClient
from magnetar.bookie.tls import GrpcTls
from magnetar.broker.admin.cluster_api import ClusterApi
from magnetar.broker.admin.http_api import AdminApi
from magnetar.broker.admin.http_security import add_permission_routes, security_middleware
from magnetar.broker.bookkeeper.placement import RackPolicy
from magnetar.broker.compaction import CompactionMonitor
from magnetar.broker.config import BrokerConfig
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.broker.loadbalance.cluster import BrokerCluster
from magnetar.broker.offload.flow import FlowPermits
from magnetar.broker.offload.isolation import OffloadWorker
from magnetar.broker.offload.offloader import OffloaderTuning
from magnetar.broker.offload.registry import OffloaderRegistry
from magnetar.broker.offload.retry import RetryPolicy
from magnetar.broker.policies.offload import broker_level
from magnetar.broker.protocol.listener import BinaryListener
from magnetar.broker.security.broker_client import BrokerClientAuth
from magnetar.broker.service import BrokerService
from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.clock import SystemClock
from magnetar.zk.errors import MetadataError
from magnetar.zk.routing import RoutingMetadataStore
from magnetar.zk.store import MetadataStore

log = logging.getLogger(__name__)


def managed_ledger_config(config: BrokerConfig) -> ManagedLedgerConfig:
    return ManagedLedgerConfig(
        ensemble_size=config.managed_ledger_default_ensemble_size,
        write_quorum=config.managed_ledger_default_write_quorum,
        ack_quorum=config.managed_ledger_default_ack_quorum,
        max_entries_per_ledger=config.managed_ledger_max_entries_per_ledger,
        max_ledger_rollover_time_ms=config.managed_ledger_max_ledger_rollover_time_minutes * 60_000,
        min_ledger_rollover_time_ms=config.managed_ledger_min_ledger_rollover_time_minutes * 60_000,
        retention_time_ms=config.default_retention_time_in_minutes * 60_000,
        retention_size_bytes=config.default_retention_size_in_mb << 20,
        entry_cache_bytes=config.managed_ledger_cache_size_mb << 20,
        entry_cache_eviction_watermark=config.managed_ledger_cache_eviction_watermark,
        entry_cache_eviction_time_threshold_ms=(
            config.managed_ledger_cache_eviction_time_threshold_millis
        ),
        entry_cache_eviction_interval_ms=config.managed_ledger_cache_eviction_interval_ms,
        cursor_backlogged_threshold=config.managed_ledger_cursor_backlogged_threshold,
        cursor_max_entries_per_ledger=config.managed_ledger_cursor_max_entries_per_ledger,
        cursor_rollover_time_ms=config.managed_ledger_cursor_rollover_time_in_seconds * 1000,
        read_ahead_entries=config.managed_ledger_read_ahead_entries,
        read_ahead_bytes=config.managed_ledger_read_ahead_max_size_bytes,
        read_ahead_total_bytes=config.managed_ledger_read_ahead_total_max_size_bytes,
        offload=broker_level(config),
    )


def offloader_tuning(config: BrokerConfig) -> OffloaderTuning:
    """The object-store request bounds, the read deadline and the offload read rate of tiered
    storage."""
    worker = None
    if config.managed_ledger_offload_worker != "off":
        worker = OffloadWorker(config.managed_ledger_offload_worker, bookie_tls=bookie_tls(config))
    return OffloaderTuning(
        worker=worker,
        flow=FlowPermits(config.managed_ledger_offload_flow_permits_per_second),
        read_retry=RetryPolicy(deadline_ms=config.managed_ledger_offload_read_deadline_ms),
        store_request_timeout_ms=config.managed_ledger_offload_store_timeout_ms,
        store_retries=config.managed_ledger_offload_store_retries,
    )


def rack_policy(config: BrokerConfig) -> RackPolicy:
    """Pulsar's ``bookkeeperClientMinNumRacksPerWriteQuorum`` /
    ``bookkeeperClientEnforceMinNumRacksPerWriteQuorum`` for the brokers' ensembles."""
    return RackPolicy(
        config.bookkeeper_client_min_num_racks_per_write_quorum,
        config.bookkeeper_client_enforce_min_num_racks_per_write_quorum,
    )


def bookie_tls(config: BrokerConfig) -> GrpcTls | None:
    """The broker's TLS settings towards bookies (None: plain gRPC)."""
    if not config.bookkeeper_tls_trust_certs_file_path:
        return None
    client_auth = config.bookkeeper_tls_client_authentication
    return GrpcTls(
        config.bookkeeper_tls_certificate_file_path if client_auth else "",
        config.bookkeeper_tls_key_file_path if client_auth else "",
        config.bookkeeper_tls_trust_certs_file_path,
    )


class BrokerServiceRunner:
    """Starts a ``BrokerService``'s parts in order and stops them in reverse.

    ``start``: TLS reloading and authentication, the namespace service (ownership; the
    default cluster, ``public`` tenant and ``public/default`` namespace), the policy
    manager's watches and periodic checks, geo-replication, the ``CompactionMonitor`` (the
    loaded persistent topics over their resolved ``compaction_threshold``). ``start_cluster``
    (once the web URL is known) joins load management when it is enabled and starts resuming
    replication (at once, then every ``replicationPolicyCheckDurationSeconds``). ``close``:
    hand the bundles over (load management), stop loading topics and accepting connections,
    leave load management, stop the periodic work and security, close the topics and
    connections, then release what is still owned.
    """

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.compaction_monitor = CompactionMonitor(
            self._persistent_topics,
            service.policies.compaction_threshold,
            float(service.config.broker_service_compaction_monitor_interval_seconds),
            service.clock,
        )
        self.closed = False
        self._resume: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<BrokerServiceRunner {self.service!r}>"

    async def _resume_replication(self) -> None:
        """Topics with a replication backlog are loaded at start and every
        ``replicationPolicyCheckDurationSeconds`` (``BrokerService.resume_replication``)."""
        service = self.service
        clock = service.clock or SystemClock()
        interval_s = float(service.config.replication_policy_check_duration_seconds)
        while not self.closed:
            try:
                n = await service.resume_replication()
                if n:
                    log.info("resumed the replication of %d topics", n)
            except Exception as exc:  # metadata unreachable now: the next round
                log.warning("resuming replication: %s", exc)
            if interval_s <= 0:
                return
            await clock.sleep(interval_s)

    def _persistent_topics(self) -> list[PersistentTopic]:
        return [t for t in self.service.topics.values() if isinstance(t, PersistentTopic)]

    async def start(self) -> None:
        service = self.service
        if service.tls is not None:
            service.tls.start()
        service.authn.start()
        service.namespaces.start()
        await service.namespaces.ensure_defaults()
        service.policies.start()
        service.replication.start()
        self.compaction_monitor.start()
        log.info("broker service listening on %s", service.namespaces.service_url)

    async def start_cluster(self) -> None:
        """Join the cluster's load management (once the web URL is known), then resume the
        replication of topics with a backlog (their bundles placed as lookups place them)."""
        service = self.service
        if service.config.load_balancer_enabled and service.cluster is None:
            credentials = BrokerClientAuth.from_config(service.config)  # bad settings: error
            service.cluster = BrokerCluster(
                service, service.clock or SystemClock(), credentials=credentials
            )
            service.namespaces.placement = service.cluster
            await service.cluster.start(service.namespaces.web_service_url)
        if self._resume is None and not self.closed:
            self._resume = asyncio.get_running_loop().create_task(self._resume_replication())

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        service = self.service
        cluster = service.cluster
        if cluster is not None:
            await cluster.drain(service.namespaces.unload_bundle)
        service.stop_loading()
        if self._resume is not None:
            self._resume.cancel()
        if cluster is not None:
            await cluster.close()
        service.policies.close()
        self.compaction_monitor.close()
        if service.tls is not None:
            service.tls.close()
        service.authn.close()
        await service.close()
        await service.replication.close()
        try:
            await service.namespaces.release_all()
        except MetadataError as exc:
            # Metadata unreachable (a whole cluster stopping together): the ownership
            # nodes are ephemeral and go with this broker's session.
            log.warning("bundles not released (%s): they go when the session expires", exc)


class BrokerRuntime:
    """A broker on an open metadata store: ``await start()``, then ``await close()``."""

    def __init__(self, config: BrokerConfig, store: MetadataStore, storage: Any = None) -> None:
        """``storage``: a ``TopicStorageFactory`` to use instead of managed ledgers on the
        registered bookies (tests serving topics from memory)."""
        self.config = config
        self.store = store
        ml_config = managed_ledger_config(config)
        # offload settings that cannot work (a driver without its bucket, ...) stop the
        # broker here with the setting's name (InvalidOffloadPolicies is a ValueError)
        self.factory = ManagedLedgerFactory(
            store,
            self._bookie_client,
            ml_config,
            offloaders=OffloaderRegistry(
                defaults=ml_config.offload.resolve(), tuning=offloader_tuning(config)
            ),
        )
        self.factory.ledger_client.registry.rack_policy = rack_policy(config)
        self.storage = storage if storage is not None else ManagedLedgerStorage(self.factory)
        self.service = BrokerService(config, store, self.storage)
        self.runner = BrokerServiceRunner(self.service)
        self.listener = BinaryListener(self.service)
        self._web: web.AppRunner | None = None
        self.web_port = config.web_service_port
        self.web_port_tls = config.web_service_port_tls

    def _bookie_client(self, address: str) -> BookieClient:
        # the fast add transport is plaintext: with TLS to the bookies, adds stay on gRPC
        # (the client refuses it then, and follows later announcements only when enabled)
        return BookieClient(
            address,
            timeout_ms=5_000,
            add_timeout_ms=10_000,
            tls=bookie_tls(self.config),
            add_address=self.factory.ledger_client.registry.add_address(address),
            fast_add=self.config.bookkeeper_fast_add_enabled,
        )

    async def start(self) -> None:
        await self.listener.start()
        await self.runner.start()
        api = AdminApi.of_service(self.service, extra_routes=ClusterApi(self.service).register)
        app = api.app()
        app.middlewares.append(security_middleware(self.service.authn, self.service.authz))
        add_permission_routes(app, self.service.authz)
        self._web = web.AppRunner(app, access_log=None)
        await self._web.setup()
        host = self.config.bind_address
        if self.config.web_service_port >= 0:
            site = web.TCPSite(self._web, host, self.config.web_service_port)
            await site.start()
            self.web_port = int(self._web.addresses[-1][1])
            self.service.namespaces.set_web_service_url(
                f"http://{self.config.advertised_address}:{self.web_port}"
            )
        tls = self.service.tls
        if tls is not None and self.config.web_service_port_tls >= 0:
            site = web.TCPSite(
                self._web, host, self.config.web_service_port_tls, ssl_context=tls.front
            )
            await site.start()
            self.web_port_tls = int(self._web.addresses[-1][1])
            url = f"https://{self.config.advertised_address}:{self.web_port_tls}"
            self.service.namespaces.set_web_service_url_tls(url)
            if self.config.web_service_port < 0:
                self.service.namespaces.set_web_service_url(url)
        await self.runner.start_cluster()
        log.info(
            "broker ready service_url=%s web_url=http://%s:%d",
            self.service.namespaces.service_url,
            self.config.advertised_address,
            self.web_port,
        )

    async def close(self) -> None:
        if self._web is not None:
            await self._web.cleanup()
            self._web = None
        await self.runner.close()
        await self.listener.close()
        await self.storage.close()


def tune_gc_for_serving(service: BrokerService | None = None) -> TopicGcFreezer | None:
    """Collect garbage rarely and never rescan start-up objects; with ``service``, keep
    freezing what bulk topic loads add (``TopicGcFreezer``, on the running loop).

    A broker allocates many short-lived objects per message; with CPython's default
    thresholds ``bench/ledger_perf.py --gc`` measured 4-5 us of collection per add and a p99
    of ~90 ms, against ~0.04 us and 30-50 ms with a 50,000 young-generation threshold and
    the start-up heap frozen. Call once the process is serving.
    """
    gc.set_threshold(50_000, 20, 100)
    gc.freeze()
    if service is None:
        return None
    freezer = TopicGcFreezer(service)
    freezer.start()
    return freezer


class TopicGcFreezer:
    """Keeps the long-lived objects of loaded topics out of the collector's work.

    Every collection of an older generation traverses every object in it: thousands of
    topics loaded after start-up (each a few dozen tracked objects that live as long as the
    topic) made full collections take hundreds of ms, stalling every client. So once
    ``every_topics`` topics were loaded since the last freeze, ``gc.freeze()`` (O(1)) moves
    everything tracked to the permanent generation, which collections skip. The price: a
    reference cycle frozen as garbage, or left by a frozen topic later unloaded, is not
    collected. So once as many topics were unloaded since the last full collection as are
    loaded now (and at least ``every_topics``), the heap is unfrozen, collected once and
    frozen again: one pause, after churn of the whole topic set, never during a bulk load.
    Checked every ``interval_s`` on the loop (a counter compare).
    """

    def __init__(
        self, service: BrokerService, *, every_topics: int = 500, interval_s: float = 0.1
    ) -> None:
        self.service = service
        self.every_topics = every_topics
        self.interval_s = interval_s
        self.freezes = 0
        self.full_collections = 0
        self._loaded_at_freeze = service.topics_loaded_total
        self._unloaded_at_collect = self._unloaded()
        self._timer: asyncio.TimerHandle | None = None

    def _unloaded(self) -> int:
        return self.service.topics_loaded_total - len(self.service.topics)

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._tick)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def check(self) -> None:
        loaded = self.service.topics_loaded_total
        unloaded = self._unloaded()
        churn = unloaded - self._unloaded_at_collect
        if churn >= max(self.every_topics, len(self.service.topics)):
            t0 = time.perf_counter()
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self.full_collections += 1
            self._unloaded_at_collect = unloaded
            self._loaded_at_freeze = loaded
            log.info(
                "gc: %d topics unloaded since the last full collection: collected in %.0f ms",
                churn,
                (time.perf_counter() - t0) * 1000,
            )
        elif loaded - self._loaded_at_freeze >= self.every_topics:
            gc.freeze()
            self.freezes += 1
            self._loaded_at_freeze = loaded

    def _tick(self) -> None:
        self.check()
        self.start()


class _KeyValueFormatter(logging.Formatter):
    """``ts=... level=... logger=... msg="..."``: one line per record, grep-friendly."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line = (
            f"ts={ts}.{int(record.msecs):03d}Z level={record.levelname} "
            f"logger={record.name} msg={json.dumps(record.getMessage())}"
        )
        if record.exc_info:
            line += " exc=" + json.dumps(self.formatException(record.exc_info))
        return line


def setup_logging(level: str = "INFO", extra: dict[str, Any] | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("kazoo").setLevel(logging.WARNING)


async def _open_url(config: BrokerConfig, url: str) -> MetadataStore:
    from magnetar.zk.factory import open_metadata_store

    options = (
        {"session_timeout_ms": config.metadata_store_session_timeout_millis}
        if url.startswith(("zk://", "embedded://"))
        else {}
    )
    return await open_metadata_store(url, **options)


async def with_configuration_store(config: BrokerConfig, local: MetadataStore) -> MetadataStore:
    """``local`` itself, or, with a ``configuration_metadata_store_url`` of its own, a store
    routing ``/admin`` paths (clusters, tenants, policies) to that shared configuration
    store and everything else to ``local`` (``zk/routing.py``). ``local`` is closed if the
    configuration store cannot be opened."""
    url = config.configuration_metadata_store_url
    if not url or url == config.metadata_store_url:
        return local

    async def reopen() -> MetadataStore:
        return await _open_url(config, url)

    log.info("configuration metadata store %s", url)
    try:
        configuration = await reopen()
    except BaseException:
        await local.close()
        raise
    return RoutingMetadataStore(local, configuration, reopen_configuration=reopen)


async def _open_store(config: BrokerConfig) -> MetadataStore:
    local = await _open_url(config, config.metadata_store_url)
    return await with_configuration_store(config, local)


async def run_broker(config: BrokerConfig) -> int:
    """``magnetar broker``: serve until SIGTERM/SIGINT, then shut down in order.

    The signal handlers are installed first: a SIGTERM while the broker is still starting
    (waiting for ZooKeeper, say) stops it cleanly with exit code 0 too. As PID 1 of a
    container a process ignores SIGTERM unless it handles it. Unusable TLS/authentication
    settings stop it with exit code 2 and the reason.
    """
    import asyncio
    import contextlib
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    store: MetadataStore | None = None
    runtime: BrokerRuntime | None = None
    freezer: TopicGcFreezer | None = None

    async def start() -> None:
        nonlocal store, runtime
        log.info("connecting to the metadata store %s", config.metadata_store_url)
        store = await _open_store(config)
        runtime = BrokerRuntime(config, store)
        await runtime.start()

    starting = asyncio.create_task(start())
    stopping = asyncio.create_task(stop.wait())
    code = 0
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            try:
                starting.result()  # a start failure propagates
            except ValueError as exc:  # unusable TLS/authentication settings
                print(f"magnetar broker: {exc}", file=sys.stderr)
                code = 2
                return code
            assert runtime is not None
            freezer = tune_gc_for_serving(runtime.service)
            service_url = runtime.service.namespaces.service_url
            print(
                f"Magnetar broker is ready\n  service URL: {service_url}\n"
                f"  admin URL:   http://{config.advertised_address}:{runtime.web_port}",
                flush=True,
            )
            await stopping
        else:
            log.info("stop requested while starting")
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
    finally:
        stopping.cancel()
        log.info("shutting down")
        if freezer is not None:
            freezer.close()
        if runtime is not None and code == 0:
            await runtime.close()
        if store is not None:
            try:
                await store.close()
            except Exception as exc:
                log.warning("metadata store did not close cleanly: %s", exc)
    log.info("broker stopped")
    return code


async def initialize_metadata(
    config: BrokerConfig, *, web_service_url: str, broker_service_url: str
) -> int:
    """``magnetar zookeeper-init``: see ``broker/cluster_init.py``."""
    from magnetar.broker.cluster_init import initialize_cluster_metadata

    store = await _open_store(config)
    try:
        created = await initialize_cluster_metadata(
            store,
            config.cluster_name,
            web_service_url=web_service_url,
            broker_service_url=broker_service_url,
            default_bundles=config.default_number_of_namespace_bundles,
        )
    finally:
        await store.close()
    print(
        f"cluster {config.cluster_name}: "
        + (f"created {', '.join(created)}" if created else "metadata already initialised"),
        flush=True,
    )
    return 0


__all__ = [
    "BrokerRuntime",
    "BrokerServiceRunner",
    "TopicGcFreezer",
    "bookie_tls",
    "initialize_metadata",
    "managed_ledger_config",
    "run_broker",
    "setup_logging",
    "tune_gc_for_serving",
    "with_configuration_store",
]
