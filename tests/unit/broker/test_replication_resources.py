"""Which clusters a tenant, a namespace and a topic may use, checked as Pulsar checks them:
``Resources`` over an in-memory store, with Pulsar's statuses and reasons (403 for a cluster
unknown or not allowed for the tenant, 400 for one the namespace does not allow, 412 for an
empty list, peers together or a cluster still in use)."""

from __future__ import annotations

import json

import pytest

from magnetar.broker.errors import ResourceError
from magnetar.broker.namespace.cluster_data import ClusterData, check_cluster_data
from magnetar.broker.namespace.resources import Resources, TenantInfo
from magnetar.zk import MemoryMetadataServer, paths

URLS = {"serviceUrl": "http://h:8080", "brokerServiceUrl": "pulsar://h:6650"}


async def _world() -> Resources:
    res = Resources(MemoryMetadataServer().connect(), "east")
    for name in ("east", "west", "central"):
        await res.create_cluster(name, URLS)
    await res.create_tenant("t", TenantInfo([], ["east", "west"]))
    await res.create_namespace("t", "ns")
    return res


async def _refused(call: object, status: int, reason: str = "") -> ResourceError:
    with pytest.raises(ResourceError) as err:
        await call  # type: ignore[misc]
    assert err.value.http_status == status, err.value.reason
    assert reason in err.value.reason
    return err.value


async def test_a_namespace_is_created_replicated_to_the_local_cluster() -> None:
    res = await _world()
    assert await res.get_replication_clusters("t", "ns") == ["east"]
    policies = await res.get_policies("t", "ns")
    assert policies["replication_clusters"] == ["east"]
    await res.create_namespace("t", "both", {"replication_clusters": ["west", "east"]})
    assert await res.get_replication_clusters("t", "both") == ["east", "west"]
    await _refused(
        res.create_namespace("t", "far", {"replication_clusters": ["central"]}),
        403,
        "Cluster [central] is not in the list of allowed clusters list for tenant [t]",
    )
    await _refused(
        res.create_namespace(
            "t", "narrow", {"replication_clusters": ["east", "west"], "allowed_clusters": ["east"]}
        ),
        400,
        "is not in the list of allowed clusters list for namespace [t/narrow]",
    )


async def test_setting_the_replication_clusters_of_a_namespace() -> None:
    res = await _world()
    await _refused(
        res.set_replication_clusters("t", "ns", []), 412, "ClusterIds should not be null or empty"
    )
    await _refused(res.set_replication_clusters("t", "ns", "east"), 400, "JSON list")
    await _refused(
        res.set_replication_clusters("t", "ns", ["east", "global"]),
        412,
        "Cannot specify global in the list of replication clusters",
    )
    await _refused(
        res.set_replication_clusters("t", "ns", ["east", "nowhere"]),
        403,
        "Invalid cluster id: nowhere",
    )
    await _refused(
        res.set_replication_clusters("t", "ns", ["east", "central"]),
        403,
        "Cluster [central] is not in the list of allowed clusters list for tenant [t]",
    )
    await _refused(res.set_replication_clusters("t", "none", ["east"]), 404)
    assert await res.set_replication_clusters("t", "ns", ["west", "east", "west"]) == [
        "east",
        "west",
    ]
    assert await res.get_replication_clusters("t", "ns") == ["east", "west"]


async def test_peers_cannot_replicate_together() -> None:
    res = await _world()
    await res.update_cluster("west", {**URLS, "peerClusterNames": ["east"]})
    await _refused(
        res.set_replication_clusters("t", "ns", ["east", "west"]),
        412,
        "[west] peer cluster: ['east'] is already part of replicated cluster",
    )


async def test_namespace_allowed_clusters_pip_321() -> None:
    res = await _world()
    await res.set_replication_clusters("t", "ns", ["east", "west"])
    await _refused(
        res.set_namespace_allowed_clusters("t", "ns", ["east"]),
        400,
        "Allowed clusters do not contain the replication cluster ['east', 'west']",
    )
    await _refused(
        res.set_namespace_allowed_clusters("t", "ns", ["east", "west", "central"]),
        403,
        "Cluster [central] is not in the list of allowed clusters list for tenant [t]",
    )
    assert await res.set_namespace_allowed_clusters("t", "ns", ["west", "east"]) == [
        "east",
        "west",
    ]
    assert await res.get_namespace_allowed_clusters("t", "ns") == ["east", "west"]
    await res.set_replication_clusters("t", "ns", ["east"])
    await res.set_namespace_allowed_clusters("t", "ns", ["east"])
    await _refused(
        res.set_replication_clusters("t", "ns", ["east", "west"]),
        400,
        "Cluster [west] is not in the list of allowed clusters list for namespace [t/ns]",
    )
    await res.set_namespace_allowed_clusters("t", "ns", [])  # no restriction any more
    assert await res.get_namespace_allowed_clusters("t", "ns") == []
    await res.set_replication_clusters("t", "ns", ["east", "west"])


async def test_the_topic_level_override() -> None:
    res = await _world()
    key = ("t", "ns", "persistent", "orders")
    assert await res.get_topic_replication_clusters(*key, applied=False) is None
    assert await res.get_topic_replication_clusters(*key, applied=True) == ["east"]
    assert await res.set_topic_replication_clusters(*key, ["west", "east"]) == ["east", "west"]
    assert await res.get_topic_replication_clusters(*key, applied=False) == ["east", "west"]
    other = ("t", "ns", "persistent", "other")
    assert await res.get_topic_replication_clusters(*other, applied=False) is None
    await _refused(res.set_topic_replication_clusters(*key, []), 412, "should not be null")
    await _refused(res.set_topic_replication_clusters(*key, ["x"]), 403, "Invalid cluster id: x")
    await _refused(res.set_topic_replication_clusters(*key, ["central"]), 403, "for tenant [t]")
    await _refused(
        res.set_topic_replication_clusters("t", "ns", "non-persistent", "np", ["east"]),
        412,
        "only supported on persistent topics",
    )
    await res.remove_topic_replication_clusters(*key)
    assert await res.get_topic_replication_clusters(*key, applied=False) is None


async def test_tenants_name_registered_clusters_and_keep_those_in_use() -> None:
    res = await _world()
    await _refused(
        res.create_tenant("u", TenantInfo([], ["east", "mars"])), 412, "Clusters do not exist"
    )
    await _refused(res.create_tenant("u", TenantInfo([], ["east", " "])), 412, "can not be empty")
    await _refused(res.update_tenant("t", TenantInfo([], [])), 412, "Clusters can not be empty")
    await res.set_replication_clusters("t", "ns", ["east", "west"])
    await _refused(res.update_tenant("t", TenantInfo([], ["east"])), 412, "Active namespaces: t/ns")
    await res.update_tenant("t", TenantInfo(["ops"], ["east", "west", "central"]))
    await res.set_replication_clusters("t", "ns", ["east"])
    await res.update_tenant("t", TenantInfo(["ops"], ["east"]))
    assert (await res.get_tenant("t")).allowed_clusters == ["east"]
    assert await res.add_tenant_cluster("t", "west") is True
    assert await res.add_tenant_cluster("t", "west") is False
    assert (await res.get_tenant("t")).allowed_clusters == ["east", "west"]


async def test_a_cluster_in_use_is_not_deleted() -> None:
    res = await _world()
    await _refused(res.delete_cluster("west"), 412, "Cluster not empty: tenant t")
    await _refused(res.delete_cluster("east"), 412, "this broker serves")
    # a namespace written without the checks (an older deployment) still pins its clusters
    await res.store.put(
        paths.namespace_policies("legacy", "ns"),
        json.dumps({"replication_clusters": ["central"]}).encode(),
    )
    await _refused(res.delete_cluster("central"), 412, "namespace legacy/ns replicates to it")
    await res.store.delete_recursive(paths.tenant_policies("legacy"))
    await res.delete_cluster("central")
    await _refused(res.delete_cluster("central"), 404, "Cluster does not exist")


def test_cluster_data_refuses_what_magnetar_does_not_do() -> None:
    with pytest.raises(ResourceError) as err:
        check_cluster_data({**URLS, "proxyServiceUrl": "pulsar://proxy:6650"})
    assert err.value.http_status == 412 and "proxyServiceUrl is not supported" in err.value.reason
    with pytest.raises(ResourceError) as err:
        check_cluster_data({**URLS, "proxyServiceUrl": "http://proxy"})
    assert err.value.http_status == 400  # a wrong scheme first, as Pulsar
    with pytest.raises(ResourceError) as err:
        check_cluster_data({**URLS, "brokerClientTlsTrustStore": "/k.jks"})
    assert err.value.http_status == 412 and "key stores" in err.value.reason
    for bad in ({"brokerClientTlsEnabled": "yes"}, {"authenticationPlugin": 3}):
        with pytest.raises(ResourceError) as err:
            check_cluster_data({**URLS, **bad})
        assert err.value.http_status == 400


def test_cluster_data_as_a_replicator_reads_it() -> None:
    plain = ClusterData.from_json("west", URLS)
    assert plain.replication_service_url == "pulsar://h:6650" and not plain.uses_tls
    assert plain.admin_url == "http://h:8080"
    tls = ClusterData.from_json(
        "west",
        {
            **URLS,
            "serviceUrlTls": "https://h:8443",
            "brokerServiceUrlTls": "pulsar+ssl://h:6651",
            "brokerClientTlsEnabled": True,
            "brokerClientTrustCertsFilePath": "/ca.pem",
            "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "authenticationParameters": "token:secret",
        },
    )
    assert tls.uses_tls and tls.replication_service_url == "pulsar+ssl://h:6651"
    assert tls.admin_url == "https://h:8443" and tls.trust_certs_file_path == "/ca.pem"
    assert "secret" not in repr(tls)
    only_tls = ClusterData.from_json("w", {"brokerServiceUrlTls": "pulsar+ssl://h:6651"})
    assert only_tls.uses_tls
