"""Geo-replication's admin REST on two real standalones configured separately (``east``
named by ``--cluster-name``, ``west`` by ``clusterName`` in its config file), each knowing
the other through ``PUT /admin/v2/clusters/{name}``: clusters, tenants' allowed clusters,
namespace replication clusters and PIP-321 allowed clusters, the topic-level override, the
replicator dispatch rate, and every refusal with Pulsar's status and reason."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from support.geo import GeoStandalones
from support.standalone import StandaloneFactory


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GeoStandalones]:
    factory = StandaloneFactory(tmp_path_factory.mktemp("geo"))
    try:
        yield GeoStandalones(factory).start()
    finally:
        factory.close()


def _namespace(pair: GeoStandalones) -> str:
    return pair.replicated_namespace(f"geo/n{uuid.uuid4().hex[:6]}", clusters=("east",))


def test_each_cluster_has_its_name_and_knows_the_other(pair: GeoStandalones) -> None:
    east, west = pair["east"], pair["west"]
    assert sorted(east.ok("GET", "/admin/v2/clusters")) == ["east", "west"]
    assert sorted(west.ok("GET", "/admin/v2/clusters")) == ["east", "west"]
    assert east.ok("GET", "/admin/v2/clusters/west") == west.cluster_data()
    itself = west.ok("GET", "/admin/v2/clusters/west")
    assert itself["brokerServiceUrl"] == west.service_url
    # the standalone's own cluster and tenant carry its name
    assert east.ok("GET", "/admin/v2/tenants/public")["allowedClusters"] == ["east"]
    assert west.ok("GET", "/admin/v2/namespaces/public/default/replication") == ["west"]


def test_namespace_replication_clusters(pair: GeoStandalones) -> None:
    east = pair["east"]
    ns = _namespace(pair)
    base = f"/admin/v2/namespaces/{ns}"
    assert east.ok("GET", base + "/replication") == ["east"]
    assert east.admin("POST", base + "/replication", ["west", "east"])[0] == 204
    assert east.ok("GET", base + "/replication") == ["east", "west"]
    assert east.ok("GET", base)["replication_clusters"] == ["east", "west"]
    status, body = east.admin("POST", base + "/replication", [])
    assert (status, body["reason"]) == (412, "ClusterIds should not be null or empty")
    status, body = east.admin("POST", base + "/replication", ["east", "nowhere"])
    assert (status, body["reason"]) == (403, "Invalid cluster id: nowhere")
    assert east.admin("POST", base + "/replication", "east")[0] == 400
    assert east.admin("POST", "/admin/v2/namespaces/geo/none/replication", ["east"])[0] == 404
    # a tenant not allowed on west
    tenant = f"solo{uuid.uuid4().hex[:6]}"
    east.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["east"]})
    east.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
    status, body = east.admin("POST", f"/admin/v2/namespaces/{tenant}/ns/replication", ["west"])
    assert status == 403
    assert body["reason"] == (
        f"Cluster [west] is not in the list of allowed clusters list for tenant [{tenant}]"
    )


def test_namespace_allowed_clusters(pair: GeoStandalones) -> None:
    east = pair["east"]
    ns = _namespace(pair)
    base = f"/admin/v2/namespaces/{ns}"
    east.ok("POST", base + "/replication", ["east", "west"])
    assert east.ok("GET", base + "/allowedClusters") == []
    status, body = east.admin("POST", base + "/allowedClusters", ["east"])
    assert (
        status == 400
        and "Allowed clusters do not contain the replication cluster" in (body["reason"])
    )
    east.ok("POST", base + "/allowedClusters", ["west", "east"])
    assert east.ok("GET", base + "/allowedClusters") == ["east", "west"]
    east.ok("POST", base + "/replication", ["east"])
    east.ok("POST", base + "/allowedClusters", ["east"])
    status, body = east.admin("POST", base + "/replication", ["east", "west"])
    assert (status, body["reason"]) == (
        400,
        f"Cluster [west] is not in the list of allowed clusters list for namespace [{ns}]",
    )


def test_topic_level_replication_clusters(pair: GeoStandalones) -> None:
    east = pair["east"]
    ns = _namespace(pair)
    east.ok("POST", f"/admin/v2/namespaces/{ns}/replication", ["east", "west"])
    topic = f"/admin/v2/persistent/{ns}/orders/replication"
    assert east.ok("GET", topic) is None
    assert east.ok("GET", topic + "?applied=true") == ["east", "west"]
    assert east.admin("POST", topic, ["east"])[0] == 204
    assert east.ok("GET", topic) == ["east"]
    status, body = east.admin("POST", topic, ["east", "mars"])
    assert (status, body["reason"]) == (403, "Invalid cluster id: mars")
    status, body = east.admin("POST", f"/admin/v2/non-persistent/{ns}/np/replication", ["east"])
    assert status == 412
    assert east.admin("DELETE", topic)[0] == 204
    assert east.ok("GET", topic) is None


def test_replicator_dispatch_rate_policy(pair: GeoStandalones) -> None:
    east = pair["east"]
    ns = _namespace(pair)
    path = f"/admin/v2/namespaces/{ns}/replicatorDispatchRate"
    rate = {
        "dispatchThrottlingRateInMsg": 100,
        "dispatchThrottlingRateInByte": 1024,
        "ratePeriodInSecond": 1,
    }
    assert east.ok("GET", path) is None
    east.ok("POST", path, rate)
    assert east.ok("GET", path) == {**rate, "relativeToPublishRate": False}
    east.ok("DELETE", path)
    assert east.ok("GET", path) is None


def test_clusters_in_use_and_what_is_not_supported(pair: GeoStandalones) -> None:
    east = pair["east"]
    status, body = east.admin("DELETE", "/admin/v2/clusters/west")
    assert status == 412 and body["reason"].startswith("Cluster not empty")
    urls = {"serviceUrl": "http://h:8080", "brokerServiceUrl": "pulsar://h:6650"}
    name = f"c{uuid.uuid4().hex[:6]}"
    for extra, reason in (
        ({"proxyServiceUrl": "pulsar://proxy:6650"}, "proxyServiceUrl is not supported"),
        ({"brokerClientTlsTrustStore": "/k.jks"}, "Java key stores are not supported"),
        ({"authenticationPlugin": "com.example.Kerberos"}, "is not supported"),
    ):
        status, body = east.admin("PUT", f"/admin/v2/clusters/{name}", {**urls, **extra})
        assert status == 412 and reason in body["reason"], body
    token = {
        "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "authenticationParameters": "token:abc",
        "brokerClientTlsEnabled": True,
        "brokerServiceUrlTls": "pulsar+ssl://h:6651",
    }
    assert east.admin("PUT", f"/admin/v2/clusters/{name}", {**urls, **token})[0] == 204
    tenant = f"t{uuid.uuid4().hex[:6]}"
    status, body = east.admin(
        "PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["east", "mars"]}
    )
    assert (status, body["reason"]) == (412, "Clusters do not exist")
    east.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["east", name]})
    east.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
    east.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/replication", ["east", name])
    status, body = east.admin("POST", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["east"]})
    assert status == 412 and body["reason"].startswith("Active namespaces")
    east.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/replication", ["east"])
    east.ok("POST", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["east"]})
    assert east.admin("DELETE", f"/admin/v2/clusters/{name}")[0] == 204
