"""Two clusters for geo-replication tests, in Pulsar's two deployments, with real processes.

Owns:
- ``GeoStandalones`` / fixtures ``geo_standalones`` (per test) and ``geo_pair`` (per module;
  ``restart`` brings a killed cluster back on its data and ports): clusters configured
  separately, each a ``magnetar standalone`` with its own metadata store on its own ports
  (``--port``, ``--web-port``, ``--bookie-port``), named ``east`` (``--cluster-name``) and
  ``west`` (``clusterName`` in its config file: both ways are exercised), each registering the
  other with ``PUT /admin/v2/clusters/{name}``. ``replicated_namespace`` makes the same tenant
  and namespace, replicated to both, in each cluster (separately configured clusters need the
  same tenants, namespaces and policies set in each).
- ``SharedConfiguration`` / fixture ``geo_shared_configuration``: one instance, Pulsar's
  global ZooKeeper: a configuration store (a ZooKeeper chroot) holding clusters, tenants
  and policies once for both clusters, and per cluster its own local store (another
  chroot), its bookies, ``magnetar zookeeper-init --configuration-metadata-store`` and two
  ``magnetar broker`` processes.
Every process started is killed at teardown. Readiness is polled with a deadline.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from support.admin import http
from support.bookies import BookieFactory
from support.broker_process import BrokerProcess
from support.standalone import StandaloneFactory, StandaloneProcess
from support.zookeeper import ZooKeeperServer

CLUSTERS = ("east", "west")


@dataclass
class GeoCluster:
    """One cluster as tests and the other cluster see it."""

    name: str
    service_url: str
    """Every broker of the cluster (``pulsar://h1:p1,h2:p2``)."""
    web_urls: list[str]

    @property
    def web_url(self) -> str:
        return self.web_urls[0]

    def admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One admin REST call to (the first broker of) the cluster."""
        return http(self.web_url, method, path, body)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.admin(method, path, body)
        assert status in (200, 204), f"{method} {path} on {self.name}: {status} {answer}"
        return answer

    def cluster_data(self) -> dict[str, str]:
        """What other clusters register for it (Pulsar's ``ClusterData``)."""
        hosts = ",".join(u.removeprefix("http://") for u in self.web_urls)
        return {"serviceUrl": f"http://{hosts}", "brokerServiceUrl": self.service_url}


class GeoStandalones:
    """Two standalones, each its own cluster, knowing each other."""

    def __init__(self, factory: StandaloneFactory) -> None:
        self.processes: dict[str, StandaloneProcess] = {
            "east": factory.create("east", extra_args=["--cluster-name", "east"]),
            "west": factory.create("west", config={"clusterName": "west"}),
        }
        self.clusters = {
            name: GeoCluster(name, p.service_url, [p.web_url]) for name, p in self.processes.items()
        }

    def __getitem__(self, name: str) -> GeoCluster:
        return self.clusters[name]

    def start(self) -> GeoStandalones:
        for process in self.processes.values():
            process.start()
        for name, cluster in self.clusters.items():
            for other in self.clusters.values():
                if other.name != name:
                    cluster.ok("PUT", f"/admin/v2/clusters/{other.name}", other.cluster_data())
        return self

    def restart(self, name: str, *, kill: bool = True) -> None:
        """SIGKILL (or stop) a cluster's standalone and start it again on the same data and
        ports."""
        process = self.processes[name]
        if kill:
            process.kill()
        else:
            process.stop()
        process.start()

    def replicated_namespace(
        self, namespace: str = "geo/ns", clusters: tuple[str, ...] = CLUSTERS
    ) -> str:
        """``tenant/ns`` in every cluster, allowed on and replicated to ``clusters``."""
        tenant = namespace.partition("/")[0]
        body = {"adminRoles": [], "allowedClusters": list(CLUSTERS)}
        for cluster in self.clusters.values():
            status, answer = cluster.admin("PUT", f"/admin/v2/tenants/{tenant}", body)
            assert status in (204, 409), answer
            cluster.ok("PUT", f"/admin/v2/namespaces/{namespace}")
            cluster.ok("POST", f"/admin/v2/namespaces/{namespace}/replication", list(clusters))
        return namespace


@pytest.fixture
def geo_standalones(standalone_factory: StandaloneFactory) -> Iterator[GeoStandalones]:
    """``east`` and ``west``: two standalones registered with each other."""
    yield GeoStandalones(standalone_factory).start()


@pytest.fixture(scope="module")
def geo_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GeoStandalones]:
    """``east`` and ``west`` shared by the tests of a module (each test its own namespace;
    a test that stops a cluster starts it again)."""
    factory = StandaloneFactory(tmp_path_factory.mktemp("geo"))
    try:
        yield GeoStandalones(factory).start()
    finally:
        factory.close()


@dataclass
class SharedCluster:
    name: str
    local_store: str
    brokers: list[BrokerProcess] = field(default_factory=list)

    @property
    def view(self) -> GeoCluster:
        return GeoCluster(
            self.name,
            "pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in self.brokers),
            [b.web_url for b in self.brokers],
        )


class SharedConfiguration:
    """Two clusters sharing one configuration store, each with its own local store."""

    def __init__(
        self,
        zookeeper: ZooKeeperServer,
        bookies: BookieFactory,
        base: pathlib.Path,
        *,
        brokers_per_cluster: int = 2,
        bookies_per_cluster: int = 1,
    ) -> None:
        root = f"{zookeeper.url}/geo-{uuid.uuid4().hex[:8]}"
        self.configuration_store = f"{root}/global"
        self.base = base
        self.bookies = bookies
        self.brokers_per_cluster = brokers_per_cluster
        self.bookies_per_cluster = bookies_per_cluster
        self.clusters = {name: SharedCluster(name, f"{root}/{name}") for name in CLUSTERS}

    def __getitem__(self, name: str) -> GeoCluster:
        return self.clusters[name].view

    def start(self) -> SharedConfiguration:
        quorum = self.bookies_per_cluster
        config = (
            f"managed_ledger_default_ensemble_size={quorum}\n"
            f"managed_ledger_default_write_quorum={quorum}\n"
            f"managed_ledger_default_ack_quorum={quorum}\n"
        )
        for cluster in self.clusters.values():
            self.bookies.start_many(self.bookies_per_cluster, metadata=cluster.local_store)
            for i in range(self.brokers_per_cluster):
                broker = BrokerProcess(
                    self.base,
                    f"{cluster.name}-broker-{i + 1}",
                    cluster.local_store,
                    extra_config=config,
                )
                broker.cmd += [
                    "--cluster-name",
                    cluster.name,
                    "--configuration-metadata-store",
                    self.configuration_store,
                ]
                cluster.brokers.append(broker)
            self._initialize(cluster)
            for broker in cluster.brokers:
                broker.start()
        return self

    def _initialize(self, cluster: SharedCluster) -> None:
        """``magnetar zookeeper-init`` for the cluster, as an operator runs it."""
        view = cluster.view
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "magnetar.broker.cli",
                "zookeeper-init",
                "--metadata",
                cluster.local_store,
                "--configuration-metadata-store",
                self.configuration_store,
                "--cluster-name",
                cluster.name,
                "--web-service-url",
                view.cluster_data()["serviceUrl"],
                "--broker-service-url",
                view.service_url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr

    def close(self) -> None:
        for cluster in self.clusters.values():
            for broker in cluster.brokers:
                broker.kill()


@pytest.fixture
def geo_shared_configuration(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[SharedConfiguration]:
    """``east`` and ``west``, two brokers each, sharing one configuration store."""
    geo = SharedConfiguration(zookeeper_server, bookie_factory, tmp_path)
    try:
        yield geo.start()
    finally:
        geo.close()


__all__ = [
    "GeoCluster",
    "GeoStandalones",
    "SharedConfiguration",
    "geo_pair",
    "geo_shared_configuration",
    "geo_standalones",
]
