"""``PUT`` / ``POST /admin/v2/clusters/{cluster}`` behind the REST layer: Pulsar's 204 /
409 / 404 / 412 / 400 answers, decided by ``Resources`` over an in-memory metadata store."""

from __future__ import annotations

import json

import pytest

from magnetar.broker.namespace.resources import (
    InvalidResource,
    PreconditionFailed,
    ResourceConflict,
    ResourceNotFound,
    Resources,
    check_cluster_data,
)
from magnetar.zk import MemoryMetadataServer, paths

GOOD = {"serviceUrl": "http://b1:8080", "brokerServiceUrl": "pulsar://b1:6650,b2:6650"}


async def test_create_then_conflict_then_update() -> None:
    store = MemoryMetadataServer().connect()
    res = Resources(store, "standalone")
    await res.create_cluster("east", GOOD)
    assert "east" in await res.list_clusters()
    with pytest.raises(ResourceConflict) as err:
        await res.create_cluster("east", GOOD)
    assert err.value.http_status == 409 and str(err.value) == "Cluster already exists"
    await res.update_cluster("east", {"serviceUrl": "http://b9:8080"})
    got = await store.get(paths.cluster("east"))
    assert got is not None and json.loads(got.value) == {"serviceUrl": "http://b9:8080"}


async def test_update_of_a_missing_cluster_is_404() -> None:
    res = Resources(MemoryMetadataServer().connect(), "standalone")
    with pytest.raises(ResourceNotFound) as err:
        await res.update_cluster("nowhere", GOOD)
    assert err.value.http_status == 404


async def test_bad_names_and_bodies_are_refused_before_anything_is_stored() -> None:
    store = MemoryMetadataServer().connect()
    res = Resources(store, "standalone")
    with pytest.raises(PreconditionFailed):
        await res.create_cluster("no/slash", GOOD)
    with pytest.raises(InvalidResource):
        await res.create_cluster("west", {"brokerServiceUrl": "http://b1:6650"})
    assert await store.get(paths.cluster("west")) is None


@pytest.mark.parametrize(
    "body",
    [
        [],
        "text",
        {"serviceUrl": "pulsar://b1:8080"},
        {"serviceUrlTls": "http://b1:8443"},
        {"brokerServiceUrl": "b1:6650"},
        {"brokerServiceUrlTls": "pulsar://b1:6651"},
        {"brokerServiceUrl": 6650},
        {"serviceUrl": "http://"},
        {"peerClusterNames": ["x" * 70_000]},
    ],
)
def test_cluster_data_checks(body: object) -> None:
    with pytest.raises(InvalidResource):
        check_cluster_data(body)


def test_cluster_data_accepts_pulsar_fields() -> None:
    body = {
        "serviceUrl": "http://b1:8080",
        "serviceUrlTls": "https://b1:8443",
        "brokerServiceUrl": "pulsar://b1:6650",
        "brokerServiceUrlTls": "pulsar+ssl://b1:6651",
        "proxyServiceUrl": "",
        "peerClusterNames": [],
        "brokerClientTlsEnabled": False,
    }
    assert check_cluster_data(body) == body
    assert check_cluster_data(None) == {}
