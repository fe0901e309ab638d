"""The namespace policy ``autoTopicCreation`` (Pulsar's ``autoTopicCreationOverride``) on a
real standalone: the admin REST paths, the broker honouring it for the official client
(producer path and partitioned-metadata path), and ``magctl apply`` of a Namespace manifest.
The standalone's broker settings are Pulsar's defaults (auto-create, non-partitioned).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pulsar
import pytest
from support.admin import http
from support.magctl import Magctl
from support.standalone import StandaloneProcess


@pytest.fixture
def client(server: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(server.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        yield c
    finally:
        c.close()


def _namespace(server: StandaloneProcess, tenant: str, *namespaces: str) -> None:
    status, body = http(
        server.web_url, "PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone"]}
    )
    assert status in (200, 204), body
    for ns in namespaces:
        status, body = http(server.web_url, "PUT", f"/admin/v2/namespaces/{tenant}/{ns}")
        assert status in (200, 204), body


def test_rest_round_trip_and_bad_bodies(server: StandaloneProcess) -> None:
    _namespace(server, "atc-rest", "ns")
    path = "/admin/v2/namespaces/atc-rest/ns/autoTopicCreation"
    status, unset = http(server.web_url, "GET", path)
    assert status in (200, 204) and unset is None
    body = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3}
    assert http(server.web_url, "POST", path, body)[0] == 204
    assert http(server.web_url, "GET", path) == (200, body)
    # stored in the Policies document under Pulsar's field name
    status, policies = http(server.web_url, "GET", "/admin/v2/namespaces/atc-rest/ns")
    assert status == 200 and policies["autoTopicCreationOverride"] == body
    for bad in (
        {"allowAutoTopicCreation": "yes"},
        {"allowAutoTopicCreation": True},  # topicType is required when allowed
        {"allowAutoTopicCreation": True, "topicType": "sharded"},
        {"allowAutoTopicCreation": True, "topicType": "partitioned"},
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 0},
        {"allowAutoTopicCreation": True, "topicType": "non-partitioned", "defaultNumPartitions": 2},
        [1, 2],
    ):
        status, _ = http(server.web_url, "POST", path, bad)
        assert status in (400, 412), (bad, status)
    assert http(server.web_url, "GET", path) == (200, body)  # the bad ones changed nothing
    assert http(server.web_url, "DELETE", path)[0] == 204
    status, unset = http(server.web_url, "GET", path)
    assert status in (200, 204) and unset is None
    # Pulsar has no topic-level form of this policy
    status, _ = http(server.web_url, "GET", "/admin/v2/persistent/atc-rest/ns/t/autoTopicCreation")
    assert status in (404, 405)


def test_broker_honours_the_namespace_override(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    _namespace(server, "atc", "closed", "open", "parts")
    base = "/admin/v2/namespaces/atc"
    assert (
        http(
            server.web_url,
            "POST",
            f"{base}/closed/autoTopicCreation",
            {"allowAutoTopicCreation": False},
        )[0]
        == 204
    )
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://atc/closed/unknown")
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe("persistent://atc/closed/unknown2", "s")
    # another namespace keeps the broker's setting (auto-create)
    producer = client.create_producer("persistent://atc/open/fresh")
    producer.send(b"x")
    producer.close()
    status, topics = http(server.web_url, "GET", "/admin/v2/persistent/atc/open")
    assert status == 200 and "persistent://atc/open/fresh" in topics
    # an explicitly created topic in the closed namespace still works
    assert http(server.web_url, "PUT", "/admin/v2/persistent/atc/closed/made")[0] in (200, 204)
    client.create_producer("persistent://atc/closed/made").close()

    assert (
        http(
            server.web_url,
            "POST",
            f"{base}/parts/autoTopicCreation",
            {
                "allowAutoTopicCreation": True,
                "topicType": "partitioned",
                "defaultNumPartitions": 3,
            },
        )[0]
        == 204
    )
    producer = client.create_producer("persistent://atc/parts/auto")
    producer.send(b"y")
    producer.close()
    status, meta = http(server.web_url, "GET", "/admin/v2/persistent/atc/parts/auto/partitions")
    assert status == 200 and meta["partitions"] == 3
    # removing the override gives the broker's setting back (non-partitioned)
    assert http(server.web_url, "DELETE", f"{base}/closed/autoTopicCreation")[0] == 204
    client.create_producer("persistent://atc/closed/now-allowed").close()


MANIFEST = """\
apiVersion: magnetar.io/v1alpha1
kind: Tenant
metadata: {name: atc-apply}
spec: {allowedClusters: [standalone]}
---
apiVersion: magnetar.io/v1alpha1
kind: Namespace
metadata: {name: atc-apply/ns}
spec:
  policies:
    messageTTL: 1h
    autoTopicCreation:
      allowAutoTopicCreation: true
      topicType: partitioned
      defaultNumPartitions: %d
"""


def test_magctl_apply_diff_and_get(
    server: StandaloneProcess, magctl: Magctl, tmp_path: pathlib.Path
) -> None:
    url = server.web_url
    path = tmp_path / "ns.yaml"
    path.write_text(MANIFEST % 3)
    assert magctl("diff", "-f", str(path), admin_url=url).code == 1
    r = magctl("apply", "-f", str(path), admin_url=url)
    assert r.code == 0, r.err
    assert http(url, "GET", "/admin/v2/namespaces/atc-apply/ns/autoTopicCreation") == (
        200,
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3},
    )
    again = magctl("apply", "-f", str(path), admin_url=url)
    assert again.code == 0, again.err
    assert "namespace/atc-apply/ns unchanged" in again.out
    assert magctl("diff", "-f", str(path), admin_url=url).code == 0
    got = magctl("get", "ns", "atc-apply/ns", "-o", "yaml", admin_url=url)
    assert got.code == 0, got.err
    assert (
        "    autoTopicCreation:\n      allowAutoTopicCreation: true\n"
        "      topicType: partitioned\n      defaultNumPartitions: 3\n"
    ) in got.out
    path.write_text(MANIFEST % 5)
    diff = magctl("diff", "-f", str(path), admin_url=url)
    assert diff.code == 1
    assert "-      defaultNumPartitions: 3\n+      defaultNumPartitions: 5\n" in diff.out
    assert magctl("apply", "-f", str(path), admin_url=url).code == 0
    assert (
        http(url, "GET", "/admin/v2/namespaces/atc-apply/ns/autoTopicCreation")[1][
            "defaultNumPartitions"
        ]
        == 5
    )
    # a bad value is a usage error before anything is sent; a Topic cannot carry it
    path.write_text(MANIFEST.replace("partitioned\n", "sharded\n") % 3)
    bad = magctl("apply", "-f", str(path), admin_url=url)
    assert bad.code == 2 and "topicType" in bad.err
    topic = tmp_path / "topic.yaml"
    topic.write_text(
        "apiVersion: magnetar.io/v1alpha1\nkind: Topic\n"
        "metadata: {name: t, namespace: atc-apply/ns}\n"
        "spec: {policies: {autoTopicCreation: {allowAutoTopicCreation: false}}}\n"
    )
    bad = magctl("apply", "-f", str(topic), admin_url=url)
    assert bad.code == 2 and "namespace policy" in bad.err
