"""A replicator reaches a remote cluster over TLS when its registration says so: east knows
west only by west's ``brokerServiceUrlTls`` with ``brokerClientTlsEnabled`` and the CA that
signed west's certificate (``brokerClientTrustCertsFilePath``); messages published in east
arrive in west through that TLS connection. Two real standalones, the official client."""

from __future__ import annotations

import pathlib

import pulsar
from support.geo import CLUSTERS, GeoCluster
from support.net import free_port
from support.security import issue, make_ca
from support.standalone import StandaloneFactory
from support.waiting import wait_until


def test_replication_over_tls_with_the_remote_clusters_trust(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    ca, ca_path = make_ca(tmp_path, "ca")
    files = issue(ca, ca_path, tmp_path, "west", "localhost", "127.0.0.1")
    tls_port = free_port()
    east_proc = standalone_factory.create("east", extra_args=["--cluster-name", "east"])
    west_proc = standalone_factory.create(
        "west",
        extra_args=["--cluster-name", "west"],
        config={
            "brokerServicePortTls": tls_port,
            "tlsCertificateFilePath": files.cert,
            "tlsKeyFilePath": files.key,
        },
    )
    east_proc.start()
    west_proc.start()
    east = GeoCluster("east", east_proc.service_url, [east_proc.web_url])
    west = GeoCluster("west", west_proc.service_url, [west_proc.web_url])
    tls_url = f"pulsar+ssl://127.0.0.1:{tls_port}"
    east.ok(
        "PUT",
        "/admin/v2/clusters/west",
        {
            "serviceUrl": west.web_url,
            "brokerServiceUrlTls": tls_url,
            "brokerClientTlsEnabled": True,
            "brokerClientTrustCertsFilePath": files.ca,
        },
    )
    west.ok("PUT", "/admin/v2/clusters/east", east.cluster_data())
    for cluster in (east, west):
        cluster.ok(
            "PUT", "/admin/v2/tenants/geo", {"adminRoles": [], "allowedClusters": list(CLUSTERS)}
        )
        cluster.ok("PUT", "/admin/v2/namespaces/geo/tls")
        cluster.ok("POST", "/admin/v2/namespaces/geo/tls/replication", list(CLUSTERS))
    topic = "persistent://geo/tls/over-tls"
    ce = pulsar.Client(east.service_url, operation_timeout_seconds=30)
    cw = pulsar.Client(west.service_url, operation_timeout_seconds=30)
    try:
        sub = cw.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        ce.create_producer(topic).send(b"through TLS")
        assert sub.receive(30_000).data() == b"through TLS"
        out = wait_until(
            lambda: east.ok("GET", "/admin/v2/persistent/geo/tls/over-tls/stats")["replication"][
                "west"
            ],
            30,
            "east's replicator stats",
        )
        assert out["outboundConnection"] == tls_url and out["connected"] is True
    finally:
        ce.close()
        cw.close()
