"""Tiered storage through the admin REST API, ``magctl`` and ``/metrics``, on a real
``magnetar standalone`` offloading to a directory (the filesystem driver).

REST: a namespace's ``offloadThreshold`` / ``offloadThresholdInSeconds`` /
``offloadDeletionLagMs`` / ``offloadPolicies`` with Pulsar's paths, defaults and JSON names
(and Pulsar's habit of keeping the threshold inside ``offloadPolicies`` in step), bodies
refused naming the field; a topic's own ``offloadPolicies`` (``?applied=true``: merged with
the namespace's and the broker's); ``PUT/GET .../offload`` and what it refuses.
magctl: ``offload topic --wait``, ``describe topic`` with the offload status and
``offloadedStorageSize``, Namespace manifests with the offload policies (apply, get, diff),
``peek`` of offloaded messages. ``/metrics``: Pulsar's tiered-storage series.
"""

from __future__ import annotations

import pathlib
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest
import yaml
from support.admin import http
from support.magctl import Magctl
from support.offload import OffloadAdmin, broker_settings
from support.standalone import StandaloneProcess

NS = "/admin/v2/namespaces/public/default"
T = "/admin/v2/persistent/public/default"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("magctl-offload")
    conf = broker_settings(directory=pathlib.Path(base / "offloaded"), entries_per_ledger=10)
    proc = StandaloneProcess(base / "data", base / "standalone.log", config=conf)
    try:
        proc.start(timeout_s=90)
        yield proc
    finally:
        proc.stop()


def ok(r: object) -> str:
    assert getattr(r, "code") == 0, getattr(r, "err")  # noqa: B009
    return str(getattr(r, "out"))  # noqa: B009


def produce(server: StandaloneProcess, topic: str, n: int) -> None:
    client = pulsar.Client(server.service_url, log_conf_file_path=None)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(f"msg-{i}".encode())
    client.close()


def test_namespace_offload_policies_with_pulsars_paths_and_names(server: StandaloneProcess) -> None:
    url = server.web_url
    assert http(url, "GET", f"{NS}/offloadThreshold") == (200, -1)
    assert http(url, "GET", f"{NS}/offloadThresholdInSeconds") == (200, -1)
    assert http(url, "GET", f"{NS}/offloadDeletionLagMs") == (200, None)
    assert http(url, "GET", f"{NS}/offloadPolicies") == (200, None)
    policies = {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "/tmp/elsewhere"}
    assert http(url, "POST", f"{NS}/offloadPolicies", policies)[0] == 204
    assert http(url, "PUT", f"{NS}/offloadThreshold", 1 << 20)[0] == 204
    assert http(url, "PUT", f"{NS}/offloadDeletionLagMs", 60_000)[0] == 204
    assert http(url, "GET", f"{NS}/offloadThreshold") == (200, 1 << 20)
    stored = http(url, "GET", f"{NS}/offloadPolicies")[1]
    assert stored == {
        **policies,
        "managedLedgerOffloadThresholdInBytes": 1 << 20,  # kept in step, as Pulsar does
        "managedLedgerOffloadDeletionLagInMillis": 60_000,
    }
    status, body = http(
        url, "POST", f"{NS}/offloadPolicies", {"managedLedgerOffloadDriver": "aws-s3"}
    )
    assert status == 400 and "s3ManagedLedgerOffloadBucket" in body["reason"]
    status, body = http(url, "POST", f"{NS}/offloadPolicies", {"nope": 1})
    assert status == 400 and "nope" in body["reason"]
    assert http(url, "PUT", f"{NS}/offloadDeletionLagMs", -5)[0] == 400
    assert http(url, "DELETE", f"{NS}/removeOffloadPolicies")[0] == 204
    assert http(url, "DELETE", f"{NS}/offloadDeletionLagMs")[0] == 204
    assert http(url, "DELETE", f"{NS}/offloadThreshold")[0] == 204
    assert http(url, "GET", f"{NS}/offloadPolicies") == (200, None)
    assert http(url, "GET", f"{NS}/offloadThreshold") == (200, -1)


def test_topic_offload_policies_and_the_applied_merge(server: StandaloneProcess) -> None:
    url = server.web_url
    topic = f"{T}/own-policies"
    produce(server, topic.replace("/admin/v2/persistent/", "persistent://"), 1)
    assert http(url, "GET", f"{topic}/offloadPolicies") == (200, None)
    own = {
        "managedLedgerOffloadDriver": "filesystem",
        "fileSystemURI": "/tmp/topic-own",
        "managedLedgerOffloadThresholdInSeconds": 3600,
    }
    assert http(url, "POST", f"{topic}/offloadPolicies", own)[0] == 204
    assert http(url, "GET", f"{topic}/offloadPolicies") == (200, own)
    applied = http(url, "GET", f"{topic}/offloadPolicies?applied=true")[1]
    assert applied["fileSystemURI"] == "/tmp/topic-own"  # the topic's own
    assert applied["managedLedgerOffloadDeletionLagInMillis"] == 0  # the broker's
    assert http(url, "DELETE", f"{topic}/offloadPolicies")[0] == 204
    assert http(url, "GET", f"{topic}/offloadPolicies") == (200, None)


def test_manual_offload_refuses_what_cannot_work(server: StandaloneProcess) -> None:
    url = server.web_url
    produce(server, "persistent://public/default/refusals", 25)
    status, body = http(url, "PUT", f"{T}/refusals/offload", {"ledgerId": 999999, "entryId": 0})
    assert status == 400 and "Invalid position for offload" in body["reason"]
    assert http(url, "PUT", f"{T}/parted/partitions", 2)[0] == 204
    status, body = http(url, "PUT", f"{T}/parted/offload")
    assert status == 412 and "partition by partition" in body["reason"]
    status, body = http(url, "PUT", "/admin/v2/non-persistent/public/default/np/offload")
    assert status == 405
    assert http(url, "GET", f"{T}/never-written/offload")[0] == 404


def test_magctl_offload_describe_peek_and_metrics(
    magctl: Magctl, server: StandaloneProcess
) -> None:
    url = server.web_url
    topic = "persistent://public/default/via-magctl"
    produce(server, topic, 35)
    out = ok(magctl("offload", "topic", topic, "--wait", admin_url=url))
    admin = OffloadAdmin(url, topic)
    current = admin.internal_stats()["ledgers"][-1]["ledgerId"]
    assert out == f"topic/{topic} offloaded (messages before {current}:0)\n"
    admin.wait_offloaded(bookie_deleted=True)
    described = yaml.safe_load(ok(magctl("get", "topic", topic, "-o", "yaml", admin_url=url)))
    assert described["status"]["offloadedStorageSize"] > 0
    full = ok(magctl("describe", "topic", topic, admin_url=url))
    assert "SUCCESS" in full and "offloadedStorageSize" in full
    peeked = yaml.safe_load(
        ok(magctl("peek", "topic", topic, "--position", "earliest", "-o", "yaml", admin_url=url))
    )
    assert peeked[0]["payload"] == "msg-0"  # read from the offloaded first ledger
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    line = next(
        ln
        for ln in text.splitlines()
        if ln.startswith("pulsar_storage_offloaded_size{") and "via-magctl" in ln
    )
    assert float(line.rsplit(" ", 1)[1]) > 0
    assert "brk_ledgeroffloader_offload_error_total{" in text
    # the storage layout readers outside the broker plan with (the Spark connector's):
    # offloaded ledgers are listed with their record, never left out once off the bookies
    layout = http(url, "GET", f"{T}/via-magctl/ledgers")[1]
    stats = admin.internal_stats()["ledgers"]
    assert [led["ledgerId"] for led in layout["ledgers"]] == [led["ledgerId"] for led in stats]
    for led in layout["ledgers"][:-1]:
        assert led["offloaded"] and led["bookkeeperDeleted"] and led["ensembles"] == []
        assert led["offloadContext"]["record"]["ledgerId"] == led["ledgerId"]
    assert "offloaded" not in layout["ledgers"][-1]  # the current ledger, on the bookies


def test_namespace_manifest_carries_the_offload_policies(
    magctl: Magctl, server: StandaloneProcess
) -> None:
    url = server.web_url
    assert http(url, "PUT", "/admin/v2/tenants/tiered", {})[0] == 204
    manifest = (
        "apiVersion: magnetar.io/v1alpha1\nkind: Namespace\nmetadata: {name: tiered/cold}\n"
        "spec:\n  policies:\n"
        "    offloadPolicies: {managedLedgerOffloadDriver: filesystem, "
        "fileSystemURI: /tmp/cold}\n"
        "    offloadThreshold: 10M\n"
        "    offloadThresholdInSeconds: 1d\n"
        "    offloadDeletionLag: 1h\n"
    )
    assert ok(magctl("apply", "-f", "-", admin_url=url, stdin=manifest)) == (
        "namespace/tiered/cold created\n"
    )
    got = yaml.safe_load(ok(magctl("get", "ns", "tiered/cold", "-o", "yaml", admin_url=url)))
    policies = got["spec"]["policies"]
    assert policies["offloadThreshold"] == "10M"
    assert policies["offloadThresholdInSeconds"] == "1d"
    assert policies["offloadDeletionLag"] == "1h"
    assert policies["offloadPolicies"]["fileSystemURI"] == "/tmp/cold"
    assert http(url, "GET", "/admin/v2/namespaces/tiered/cold/offloadThreshold") == (
        200,
        10 << 20,
    )
    assert magctl("diff", "-f", "-", admin_url=url, stdin=manifest).code == 0
