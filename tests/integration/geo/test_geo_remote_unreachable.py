"""The client-based remote when the remote cannot be used: a cluster nobody listens for, no
service URL, or credentials that cannot be used, each a ``ReplicationError`` whose reason the
replicator shows in its stats (and retries)."""

from __future__ import annotations

import pytest
from support.net import free_port

from magnetar.broker.namespace.cluster_data import ClusterData
from magnetar.broker.replication.contracts import ReplicationError
from magnetar.broker.replication.remote import ClientRemoteCluster


async def test_a_cluster_nobody_listens_for() -> None:
    data = ClusterData("west", broker_service_url=f"pulsar://127.0.0.1:{free_port()}")
    remote = ClientRemoteCluster(data, operation_timeout_s=1.0, connection_timeout_ms=500)
    try:
        with pytest.raises(ReplicationError) as err:
            await remote.create_producer("persistent://t/ns/x", "pulsar.repl.east-->west")
        assert "cannot create the replicator producer on cluster west" in err.value.reason
    finally:
        await remote.close()


async def test_clusters_that_cannot_be_reached() -> None:
    with pytest.raises(ReplicationError) as err:
        await ClientRemoteCluster(ClusterData("west")).create_producer("persistent://t/n/x", "p")
    assert err.value.reason == "cluster west has no brokerServiceUrl (or brokerServiceUrlTls)"
    data = ClusterData(
        "west", broker_service_url="pulsar://h:6650", authentication_plugin="AuthenticationToken"
    )
    with pytest.raises(ReplicationError) as err:
        await ClientRemoteCluster(data).create_producer("persistent://t/n/x", "p")
    assert err.value.reason.startswith("cluster west: ") and "token" in err.value.reason
