"""A topic's admin request sent to a broker that does not own the topic is redirected (307)
to the owner, as Pulsar's brokers answer it (topic-ownership validation), on a real
two-broker cluster: the ``Location`` is the owner's web URL with the same path and query; a
client that follows it (urllib for a GET, magctl's transport for every method) gets the
owner's answer, and a PUT reaches the owner with its effect."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pulsar
import pytest
from support.cluster import Cluster, wait_for_brokers

from magnetar.client.magctl.http import AdminHttp


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_topic_admin_on_a_non_owner_redirects_to_the_owner(two_broker_cluster: Cluster) -> None:
    cluster = two_broker_cluster
    first, _second = cluster.brokers
    first.admin("PUT", "/admin/v2/namespaces/public/redir", {"bundles": {"numBundles": 16}})
    wait_for_brokers(first, 2)
    topic = "persistent://public/redir/stats-here"
    producer = cluster.client(first.service_url).create_producer(topic)
    for i in range(3):
        producer.send(b"m%d" % i)
    owner = cluster.owner(topic)
    other = next(b for b in cluster.brokers if b is not owner)
    path = "/admin/v2/persistent/public/redir/stats-here/stats?getPreciseBacklog=false"

    opener = urllib.request.build_opener(_NoRedirect())
    with pytest.raises(urllib.error.HTTPError) as redirect:
        opener.open(other.web_url + path, timeout=30)
    assert redirect.value.code == 307
    assert redirect.value.headers["Location"] == owner.web_url.rstrip("/") + path

    followed = json.loads(other.admin("GET", path))  # urllib follows a GET's 307
    assert followed["msgInCounter"] == 3

    admin = AdminHttp(other.web_url)  # magctl's transport follows a PUT's too
    admin.request("PUT", "/admin/v2/persistent/public/redir/stats-here/compaction")
    status = json.loads(
        owner.admin("GET", "/admin/v2/persistent/public/redir/stats-here/compaction")
    )
    assert status["status"] in ("RUNNING", "SUCCESS")
    assert admin.request("GET", path)["msgInCounter"] == 3


def test_partitioned_stats_gather_partitions_from_their_owners(two_broker_cluster: Cluster) -> None:
    cluster = two_broker_cluster
    first, second = cluster.brokers
    first.admin("PUT", "/admin/v2/namespaces/public/parts", {"bundles": {"numBundles": 16}})
    wait_for_brokers(first, 2)
    first.admin("PUT", "/admin/v2/persistent/public/parts/spread/partitions", 12)
    topic = "persistent://public/parts/spread"
    producer = cluster.client(first.service_url).create_producer(
        topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    for i in range(24):
        producer.send(b"m%d" % i)
    owners = {cluster.owner(f"{topic}-partition-{i}").name for i in range(12)}
    assert owners == {first.name, second.name}, "the leader placed partitions on both"
    path = "/admin/v2/persistent/public/parts/spread/partitioned-stats?perPartition=true"
    for b in (first, second):  # either broker gathers every partition's stats
        stats = json.loads(b.admin("GET", path))
        assert stats["msgInCounter"] == 24, b.name
        assert len(stats["partitions"]) == 12, b.name
    # a partition-wide call that is not gathered (yet) answers 503 naming a partition's
    # owner, never a redirect of the whole request to one partition's owner
    with pytest.raises(urllib.error.HTTPError) as refused:
        first.admin("GET", "/admin/v2/persistent/public/parts/spread/subscriptions")
    assert refused.value.code == 503
    assert "owned by" in json.loads(refused.value.read())["reason"]
