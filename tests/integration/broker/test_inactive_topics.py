"""Inactive topics are deleted as Pulsar deletes them (``brokerDeleteInactiveTopics*`` and the
namespace / topic ``inactiveTopicPolicies``), on a real standalone with the official client.

One standalone sweeps every second and deletes topics idle for over 2 s. The topics that must
stay are made idle first; the ones that must go are made idle after them, so by the time the
last of those is gone, every sweep that could have deleted a kept topic has run (the barrier:
no sleep decides anything).
"""

from __future__ import annotations

import pulsar
import pytest
from support.admin import http
from support.standalone import StandaloneFactory, StandaloneProcess
from support.waiting import wait_until

pytestmark = pytest.mark.integration

NS = "public/default"


def topics(node: StandaloneProcess, ns: str = NS) -> set[str]:
    status, body = http(node.web_url, "GET", f"/admin/v2/persistent/{ns}")
    assert status == 200, body
    return set(body)


def partitioned(node: StandaloneProcess, ns: str = NS) -> set[str]:
    status, body = http(node.web_url, "GET", f"/admin/v2/persistent/{ns}/partitioned")
    assert status == 200, body
    return set(body)


def produce(client: pulsar.Client, topic: str, n: int = 3) -> None:
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send(f"m{i}".encode())
    producer.close()


def test_idle_topics_go_and_kept_ones_stay(standalone_factory: StandaloneFactory) -> None:
    node = standalone_factory.create(
        config={
            "brokerDeleteInactiveTopicsFrequencySeconds": 1,
            "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": 2,
            "brokerDeleteInactivePartitionedTopicMetadataEnabled": True,
        }
    ).start(timeout_s=90)
    web = node.web_url
    for ns, policy in (
        ("public/keep", {"deleteWhileInactive": False}),
        ("public/caught", {"inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up"}),
    ):
        assert http(web, "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
        body = {
            "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
            "maxInactiveDurationSeconds": 2,
            "deleteWhileInactive": True,
            **policy,
        }
        path = f"/admin/v2/namespaces/{ns}/inactiveTopicPolicies"
        assert http(web, "POST", path, body)[0] == 204
        assert http(web, "GET", path) == (200, body)
    bad = {"inactiveTopicDeleteMode": "never", "maxInactiveDurationSeconds": 2}
    status, _ = http(web, "POST", "/admin/v2/namespaces/public/keep/inactiveTopicPolicies", bad)
    assert status in (400, 412)

    base = "persistent://public"
    client = pulsar.Client(node.service_url, operation_timeout_seconds=30)
    try:
        # kept: a durable subscription (no consumer) under delete_when_no_subscriptions
        client.subscribe(f"{base}/default/with-sub", "s").close()
        # kept: the namespace says deleteWhileInactive=false
        produce(client, f"{base}/keep/no-delete")
        # kept: a subscription with a backlog under delete_when_subscriptions_caught_up
        client.subscribe(f"{base}/caught/backlog", "s").close()
        produce(client, f"{base}/caught/backlog")
        # kept: the topic's own policy says deleteWhileInactive=false
        produce(client, f"{base}/default/topic-kept")
        topic_path = "/admin/v2/persistent/public/default/topic-kept/inactiveTopicPolicies"
        own = {
            "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
            "maxInactiveDurationSeconds": 2,
            "deleteWhileInactive": False,
        }
        assert http(web, "POST", topic_path, own)[0] == 204

        # gone: written, no subscription
        produce(client, f"{base}/default/gone")
        # gone: every subscription caught up, under delete_when_subscriptions_caught_up
        consumer = client.subscribe(f"{base}/caught/acked", "s")
        produce(client, f"{base}/caught/acked")
        for _ in range(3):
            consumer.acknowledge(consumer.receive(10_000))
        consumer.close()
        # gone: both partitions, then the partitioned topic's metadata
        assert http(web, "PUT", "/admin/v2/persistent/public/default/parts/partitions", 2)[0] == 204
        produce(client, f"{base}/default/parts")
    finally:
        client.close()

    wait_until(
        lambda: (
            not ({f"{base}/default/gone", f"{base}/default/parts-partition-0"} & topics(node))
            and f"{base}/default/parts" not in partitioned(node)
            and f"{base}/caught/acked" not in topics(node, "public/caught")
        ),
        30,
        "the idle topics deleted",
    )
    assert {f"{base}/default/with-sub", f"{base}/default/topic-kept"} <= topics(node)
    assert f"{base}/keep/no-delete" in topics(node, "public/keep")
    assert f"{base}/caught/backlog" in topics(node, "public/caught")
    log = node.log_path.read_text(errors="replace")
    assert "deleted inactive topic persistent://public/default/gone" in log

    # a deleted topic comes back empty when it is used again (auto-creation)
    client = pulsar.Client(node.service_url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(f"{base}/default/gone", pulsar.MessageId.earliest)
        assert not reader.has_message_available()
    finally:
        client.close()
    node.stop()
