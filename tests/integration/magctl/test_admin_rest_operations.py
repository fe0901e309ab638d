"""The admin REST operation endpoints (``broker/admin/ops_api.py``) on a real standalone,
each with Pulsar's path and JSON shape. Each of these answered 404, 405 or wrong data before.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from support.admin import http
from support.standalone import StandaloneProcess
from support.waiting import wait_until

NS = "/admin/v2/namespaces/public/default"
T = "/admin/v2/persistent/public/default"


@pytest.fixture
def client(server: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(server.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        yield c
    finally:
        c.close()


def call(server: StandaloneProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return http(server.web_url, method, path, body)


def raw(server: StandaloneProcess, path: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(server.web_url + path, timeout=10) as r:
            return r.status, dict(r.headers.items()), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read()


def produce(client: pulsar.Client, topic: str, n: int) -> None:
    p = client.create_producer(topic)
    for i in range(n):
        p.send(f"m{i}".encode())
    p.close()


def backlog(server: StandaloneProcess, topic_path: str, sub: str) -> int:
    status, stats = call(server, "GET", f"{topic_path}/stats")
    assert status == 200, stats
    return int(stats["subscriptions"][sub]["msgBacklog"])


def test_unknown_routes_answer_json(server: StandaloneProcess) -> None:
    status, body = call(server, "GET", "/admin/v2/no/such/thing/here/at/all")
    assert status == 404
    assert body["reason"].startswith("Unknown route: GET /admin/v2/no/such")
    status, body = call(server, "PATCH", "/admin/v2/tenants")
    assert status == 405
    assert "Unknown route" in body["reason"]


def test_cluster_brokers_bookies_version_configuration(server: StandaloneProcess) -> None:
    status, data = call(server, "GET", "/admin/v2/clusters/standalone")
    assert status == 200
    assert data["brokerServiceUrl"].startswith("pulsar://")
    assert call(server, "GET", "/admin/v2/clusters/nope")[0] == 404
    status, brokers = call(server, "GET", "/admin/v2/brokers/standalone")
    assert (status, brokers) == (200, [f"127.0.0.1:{server.web_port}"])
    status, bookies = call(server, "GET", "/admin/v2/bookies/all")
    assert status == 200
    (entry,) = bookies["bookies"]
    assert entry["bookieId"] == f"127.0.0.1:{server.bookie_port}"
    assert entry["state"] == "writable"
    assert entry["address"] == f"127.0.0.1:{server.bookie_port}"
    assert call(server, "GET", "/admin/v2/bookies/racks-info") == (200, {})
    code, _, body = raw(server, "/admin/v2/brokers/version")
    assert (code, body) == (200, b"0.1.0")
    assert call(server, "GET", "/admin/v2/brokers/configuration") == (200, [])
    status, runtime = call(server, "GET", "/admin/v2/brokers/configuration/runtime")
    assert status == 200
    assert runtime["cluster_name"] == "standalone"
    assert raw(server, "/admin/v2/brokers/health")[2] == b"ok"  # still served


def test_subscription_create_skip_clear_expire_reset(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = f"{T}/rest-subs"
    assert call(server, "PUT", topic)[0] == 204
    produce(client, "persistent://public/default/rest-subs", 6)
    earliest = {"ledgerId": -1, "entryId": -1}
    assert call(server, "PUT", f"{topic}/subscription/a", earliest)[0] == 204
    assert call(server, "PUT", f"{topic}/subscription/a", earliest)[0] == 409
    assert call(server, "PUT", f"{topic}/subscription/latest")[0] == 204  # default: latest
    assert backlog(server, topic, "a") == 6
    assert backlog(server, topic, "latest") == 0
    assert call(server, "POST", f"{topic}/subscription/a/skip/2")[0] == 204
    assert backlog(server, topic, "a") == 4
    assert call(server, "POST", f"{topic}/subscription/a/skip/x")[0] == 412
    assert call(server, "POST", f"{topic}/subscription/a/skip_all")[0] == 204
    assert backlog(server, topic, "a") == 0
    assert call(server, "POST", f"{topic}/subscription/a/resetcursor", earliest)[0] == 204
    assert backlog(server, topic, "a") == 6
    assert call(server, "POST", f"{topic}/subscription/a/expireMessages/3600")[0] == 204
    assert backlog(server, topic, "a") == 6
    assert call(server, "POST", f"{topic}/subscription/a/expireMessages/0")[0] == 204
    assert backlog(server, topic, "a") == 0
    assert call(server, "POST", f"{topic}/subscription/a/resetcursor/0")[0] == 204
    assert backlog(server, topic, "a") == 6
    assert call(server, "POST", f"{topic}/subscription/nope/skip_all")[0] == 404


def test_peek_and_examine_messages(server: StandaloneProcess, client: pulsar.Client) -> None:
    topic = f"{T}/rest-peek"
    assert call(server, "PUT", topic)[0] == 204
    assert call(server, "PUT", f"{topic}/subscription/s", {"ledgerId": -1, "entryId": -1})[0] == 204
    produce(client, "persistent://public/default/rest-peek", 3)
    code, headers, body = raw(server, f"{topic}/subscription/s/position/2")
    assert (code, body) == (200, b"m1")
    assert headers["X-Pulsar-Message-ID"].count(":") == 1
    assert "X-Pulsar-publish-time" in headers
    assert raw(server, f"{topic}/subscription/s/position/9")[0] == 404
    examine = f"{topic}/examinemessage?messagePosition=1&initialPosition="
    code, _, body = raw(server, examine + "earliest")
    assert (code, body) == (200, b"m0")
    code, _, body = raw(server, examine + "latest")
    assert (code, body) == (200, b"m2")


def test_last_message_id_and_internal_stats(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = f"{T}/rest-internal"
    assert call(server, "PUT", topic)[0] == 204
    assert call(server, "PUT", f"{topic}/subscription/s")[0] == 204
    produce(client, "persistent://public/default/rest-internal", 4)
    status, last = call(server, "GET", f"{topic}/lastMessageId")
    assert status == 200
    assert last["entryId"] == 3
    assert last["partitionIndex"] == -1
    status, stats = call(server, "GET", f"{topic}/internalStats")
    assert status == 200
    assert stats["numberOfEntries"] == 4
    assert stats["lastConfirmedEntry"] == f"{last['ledgerId']}:3"
    assert [lg["ledgerId"] for lg in stats["ledgers"]] == [last["ledgerId"]]
    assert set(stats["cursors"]) == {"s"}
    assert call(server, "GET", f"{T}/rest-none/internalStats")[0] == 404


def test_partitioned_topic_stats_subscriptions_and_unload(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = f"{T}/rest-parted"
    full = "persistent://public/default/rest-parted"
    assert call(server, "PUT", f"{topic}/partitions", 2)[0] == 204
    assert call(server, "PUT", f"{topic}/subscription/s", {"ledgerId": -1, "entryId": -1})[0] == 204
    produce(client, full, 8)
    status, stats = call(server, "GET", f"{topic}/partitioned-stats")
    assert status == 200
    assert stats["metadata"] == {"partitions": 2}
    assert stats["msgInCounter"] == 8
    assert stats["subscriptions"]["s"]["msgBacklog"] == 8
    assert set(stats["partitions"]) == {f"{full}-partition-0", f"{full}-partition-1"}
    status, plain = call(server, "GET", f"{topic}/stats")  # the partitioned name answers too
    assert status == 200
    assert plain["msgInCounter"] == 8
    assert call(server, "GET", f"{topic}/subscriptions") == (200, ["s"])
    assert call(server, "GET", f"{T}/rest-internal/partitioned-stats")[0] == 404

    def loaded() -> set[str]:
        _, by_ns = call(server, "GET", "/admin/v2/broker-stats/topics")
        topics: set[str] = set()
        for bundles in by_ns.get("public/default", {}).values():
            topics.update(bundles.get("persistent", {}))
        return topics

    assert f"{full}-partition-0" in loaded()
    assert call(server, "PUT", f"{topic}/unload")[0] == 204
    wait_until(
        lambda: not {f"{full}-partition-0", f"{full}-partition-1"} & loaded(),
        30,
        "partitions unloaded",
    )


def test_namespace_and_bundle_unload(server: StandaloneProcess, client: pulsar.Client) -> None:
    produce(client, "persistent://public/default/rest-unload", 1)
    assert call(server, "PUT", f"{NS}/unload")[0] == 204
    status, bundles = call(server, "GET", f"{NS}/bundles")
    assert status == 200
    first = f"{bundles['boundaries'][0]}_{bundles['boundaries'][1]}"
    assert call(server, "PUT", f"{NS}/{first}/unload")[0] == 204
    assert call(server, "PUT", f"{NS}/0x00000000_0x00000001/unload")[0] == 404
    assert call(server, "PUT", "/admin/v2/namespaces/public/none/unload")[0] == 404
    produce(client, "persistent://public/default/rest-unload", 1)  # served again after


def test_namespace_permissions(server: StandaloneProcess) -> None:
    assert call(server, "GET", f"{NS}/permissions") == (200, {})
    assert call(server, "GET", "/admin/v2/namespaces/public/none/permissions")[0] == 404


def test_non_persistent_topics_are_listed_while_active(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = "non-persistent://public/default/rest-np"
    producer = client.create_producer(topic)
    try:
        status, names = call(server, "GET", "/admin/v2/non-persistent/public/default")
        assert status == 200
        assert topic in names
        status, names = call(server, "GET", f"{NS}/topics?mode=ALL")
        assert status == 200
        assert topic in names
    finally:
        producer.close()


def test_owned_namespaces_and_a_topics_bundle(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    produce(client, "persistent://public/default/rest-owned", 1)
    status, bundle = call(
        server, "GET", "/lookup/v2/topic/persistent/public/default/rest-owned/bundle"
    )
    assert status == 200
    assert bundle.startswith("0x") and "_0x" in bundle
    me = f"127.0.0.1:{server.web_port}"
    status, owned = call(server, "GET", f"/admin/v2/brokers/standalone/{me}/ownedNamespaces")
    assert status == 200
    assert f"public/default/{bundle}" in owned
    assert owned[f"public/default/{bundle}"]["is_active"] is True
    assert (
        call(server, "GET", "/admin/v2/brokers/standalone/10.0.0.1:8080/ownedNamespaces")[0] == 404
    )
    assert call(server, "GET", "/lookup/v2/topic/persistent/public/none/x/bundle")[0] == 404


def test_split_bundle_endpoint(server: StandaloneProcess) -> None:
    assert call(server, "PUT", "/admin/v2/tenants/rest-split", {})[0] == 204
    base = "/admin/v2/namespaces/rest-split/ns"
    assert call(server, "PUT", base, {"bundles": {"numBundles": 1}})[0] == 204
    status, ranges = call(server, "PUT", f"{base}/0x00000000_0xffffffff/split")
    assert (status, ranges) == (200, ["0x00000000_0x7fffffff", "0x7fffffff_0xffffffff"])
    status, ranges = call(server, "PUT", f"{base}/0x7fffffff_0xffffffff/split", ["0x90000000"])
    assert ranges == ["0x7fffffff_0x90000000", "0x90000000_0xffffffff"]
    assert (
        call(server, "PUT", f"{base}/0x00000000_0x7fffffff/split?splitAlgorithmName=nope")[0] == 412
    )
    assert call(server, "GET", f"{base}/bundles")[1]["numBundles"] == 3


def test_namespace_and_topic_properties(server: StandaloneProcess) -> None:
    assert call(server, "GET", f"{NS}/properties") == (200, {})
    assert call(server, "PUT", f"{NS}/properties", {"a": "1"})[0] == 204
    assert call(server, "PUT", f"{NS}/properties", {"b": "2"})[0] == 204  # merged
    assert call(server, "GET", f"{NS}/properties") == (200, {"a": "1", "b": "2"})
    assert call(server, "PUT", f"{NS}/properties", {"a": 1})[0] == 412
    assert call(server, "DELETE", f"{NS}/properties")[0] == 204
    assert call(server, "GET", f"{NS}/properties") == (200, {})
    topic = f"{T}/rest-props"
    assert call(server, "PUT", f"{topic}/partitions", 2)[0] == 204
    assert call(server, "PUT", f"{topic}/properties", {"team": "pay", "x": "y"})[0] == 204
    assert call(server, "GET", f"{topic}/properties") == (200, {"team": "pay", "x": "y"})
    assert call(server, "GET", f"{topic}-partition-1/properties")[1] == {"team": "pay", "x": "y"}
    assert call(server, "DELETE", f"{topic}/properties?key=x")[0] == 204
    assert call(server, "DELETE", f"{topic}/properties?key=x")[0] == 404
    assert call(server, "GET", f"{topic}/properties") == (200, {"team": "pay"})


def test_a_namespace_path_we_lack_is_an_unknown_route(server: StandaloneProcess) -> None:
    status, body = call(server, "PUT", "/admin/v2/namespaces/public/x/noSuchPolicy", 10)
    assert status == 404
    assert body == {"reason": "Unknown route: PUT /admin/v2/namespaces/public/x/noSuchPolicy"}
    status, body = call(server, "GET", "/admin/v2/namespaces/public/default/no/such")
    assert status == 404 and body["reason"].startswith("Unknown route: GET")


def test_a_malformed_dispatch_rate_in_a_namespace_body_is_refused(
    server: StandaloneProcess,
) -> None:
    status, body = call(
        server, "PUT", "/admin/v2/namespaces/public/bad-rate", {"dispatchRate": {"standalone": "x"}}
    )
    assert 400 <= status < 500, (status, body)
    assert "dispatchRate" in body["reason"]
    assert call(server, "GET", "/admin/v2/namespaces/public/bad-rate")[0] == 404
    rate = {"dispatchThrottlingRateInMsg": 10, "ratePeriodInSecond": 1}
    ok = call(
        server,
        "PUT",
        "/admin/v2/namespaces/public/good-rate",
        {"dispatchRate": {"standalone": rate}},
    )
    assert ok[0] == 204
