"""Non-persistent topics loaded on different brokers of a real two-broker cluster are all
listed, whichever broker is asked: the REST listing and GET_TOPICS_OF_NAMESPACE ask each
bundle's owner (Pulsar's ``GET /admin/v2/non-persistent/{tenant}/{ns}/{bundle}``), so an
official regex consumer at one broker subscribes to the topics the other one serves."""

from __future__ import annotations

import itertools
import json
import re

import pulsar
from support.cluster import Cluster, wait_for_brokers


def test_each_broker_lists_the_non_persistent_topics_of_both(two_broker_cluster: Cluster) -> None:
    cluster = two_broker_cluster
    first, second = cluster.brokers
    first.admin("PUT", "/admin/v2/namespaces/public/np", {"bundles": {"numBundles": 16}})
    wait_for_brokers(first, 2)
    client = cluster.client(first.service_url, 60)
    topics = [f"non-persistent://public/np/t{i}" for i in range(12)]
    producers = {t: client.create_producer(t) for t in topics}
    owners = {cluster.owner(t).name for t in topics}
    assert owners == {first.name, second.name}, "the leader placed topics on both brokers"
    for b in (first, second):
        listed = json.loads(b.admin("GET", "/admin/v2/non-persistent/public/np"))
        assert sorted(listed) == sorted(topics), b.name
    boundaries = json.loads(first.admin("GET", "/admin/v2/namespaces/public/np/bundles"))[
        "boundaries"
    ]
    ranges = [f"{lo}_{hi}" for lo, hi in itertools.pairwise(boundaries)]
    local = {
        b.name: [
            t
            for rng in ranges
            for t in json.loads(b.admin("GET", f"/admin/v2/non-persistent/public/np/{rng}"))
        ]
        for b in (first, second)
    }
    assert sorted(local[first.name] + local[second.name]) == sorted(topics)
    assert set(local[first.name]).isdisjoint(local[second.name])
    consumer = client.subscribe(
        re.compile("persistent://public/np/t.*"),
        "rx",
        regex_subscription_mode=pulsar.RegexSubscriptionMode.NonPersistentOnly,
    )
    for t, p in producers.items():
        p.send(t.encode())
    got = set()
    while len(got) < len(topics):
        got.add(consumer.receive(30_000).topic_name())
    assert got == set(topics)
