"""magctl against a real ``magnetar standalone``: every verb and output format, golden
outputs, apply idempotence, diff exit codes, subscription and topic operations.

Messages are produced with the official ``pulsar-client``. Each test works in its own tenant.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pulsar
import pytest
import yaml
from support.admin import http
from support.magctl import Magctl
from support.standalone import StandaloneProcess

GOLDEN_TABLE = """\
NAME     PARTITIONS   PERSISTENT   PRODUCERS   SUBSCRIPTIONS   BACKLOG   STORAGE
orders   3            true         0           0               0         0
plain    0            true         0           0               0         0
"""

GOLDEN_NAMESPACE_YAML = """\
apiVersion: magnetar.io/v1alpha1
kind: Namespace
metadata:
  name: golden/prod
spec:
  bundles: 2
  replicationClusters:
  - standalone
  policies:
    retention:
      time: 1w
      size: 10G
    messageTTL: 1h
    backlogQuotas:
    - type: destination_storage
      limit: 1G
      limitTime: -1
      policy: producer_exception
    deduplication: true
"""

GOLDEN_TENANT_YAML = """\
apiVersion: magnetar.io/v1alpha1
kind: Tenant
metadata:
  name: golden
spec:
  adminRoles:
  - ops
  allowedClusters:
  - standalone
"""

MANIFESTS = """\
apiVersion: magnetar.io/v1alpha1
kind: Tenant
metadata: {name: shop}
spec: {adminRoles: [ops]}
---
apiVersion: magnetar.io/v1alpha1
kind: Namespace
metadata: {name: shop/orders}
spec:
  bundles: 2
  policies:
    retention: {time: 7d, size: 10G}
    messageTTL: 1h
    backlogQuotas: [{type: destination_storage, limit: 1G, policy: producer_exception}]
    deduplication: true
    publishRate: {publishThrottlingRateInMsg: 100}
---
apiVersion: magnetar.io/v1alpha1
kind: List
items:
- apiVersion: magnetar.io/v1alpha1
  kind: Topic
  metadata: {name: payments, namespace: shop/orders}
  spec: {partitions: 2, policies: {messageTTL: 30m}}
- apiVersion: magnetar.io/v1alpha1
  kind: Topic
  metadata: {name: audit, namespace: shop/orders}
- apiVersion: magnetar.io/v1alpha1
  kind: Subscription
  metadata: {name: billing, namespace: shop/orders}
  spec: {topic: payments, initialPosition: earliest}
"""


@pytest.fixture
def url(server: StandaloneProcess) -> str:
    return server.web_url


@pytest.fixture
def client(server: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(server.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        yield c
    finally:
        c.close()


def ok(r: object) -> str:
    assert getattr(r, "code") == 0, getattr(r, "err")  # noqa: B009
    return str(getattr(r, "out"))  # noqa: B009


def test_golden_table_and_yaml(magctl: Magctl, url: str) -> None:
    assert ok(magctl("create", "tenant", "golden", "--admin-roles", "ops", admin_url=url)) == (
        "tenant/golden created\n"
    )
    ok(magctl("create", "ns", "golden/prod", "--bundles", "2", admin_url=url))
    ok(magctl("create", "topic", "orders", "-n", "golden/prod", "-p", "3", admin_url=url))
    ok(magctl("create", "tp", "golden/prod/plain", admin_url=url))
    assert ok(magctl("get", "topics", "-n", "golden/prod", admin_url=url)) == GOLDEN_TABLE
    assert ok(magctl("get", "tenant", "golden", "-o", "yaml", admin_url=url)) == (
        GOLDEN_TENANT_YAML
    )
    policies = (
        "apiVersion: magnetar.io/v1alpha1\nkind: Namespace\nmetadata: {name: golden/prod}\n"
        "spec:\n  policies:\n    retention: {time: 7d, size: 10G}\n    messageTTL: 3600\n"
        "    backlogQuotas: [{limit: 1G, policy: producer_exception}]\n"
        "    deduplication: true\n"
    )
    assert ok(magctl("apply", "-f", "-", admin_url=url, stdin=policies)) == (
        "namespace/golden/prod configured\n"
    )
    assert ok(magctl("get", "ns", "golden/prod", "-o", "yaml", admin_url=url)) == (
        GOLDEN_NAMESPACE_YAML
    )


def test_output_formats(magctl: Magctl, url: str) -> None:
    ok(magctl("create", "tenant", "fmt", admin_url=url))
    ok(magctl("create", "namespace", "fmt/ns", admin_url=url))
    for name, parts in (("b", "2"), ("a", "5"), ("c", "0")):
        ok(magctl("create", "topic", name, "-n", "fmt/ns", "--partitions", parts, admin_url=url))
    get = ("get", "topics", "-n", "fmt/ns")
    data = json.loads(ok(magctl(*get, "-o", "json", admin_url=url)))
    assert data["kind"] == "List"
    assert data["apiVersion"] == "magnetar.io/v1alpha1"
    assert [i["metadata"]["name"] for i in data["items"]] == ["a", "b", "c"]
    one = json.loads(ok(magctl("get", "topic", "a", "-n", "fmt/ns", "-o", "json", admin_url=url)))
    assert one["kind"] == "Topic"
    assert one["spec"]["partitions"] == 5
    assert ok(magctl(*get, "-o", "name", admin_url=url)).splitlines() == [
        "topic/persistent://fmt/ns/a",
        "topic/persistent://fmt/ns/b",
        "topic/persistent://fmt/ns/c",
    ]
    assert ok(magctl(*get, "-o", "jsonpath={.items[*].metadata.name}", admin_url=url)) == "a b c"
    assert (
        ok(
            magctl(
                *get,
                "-o",
                'jsonpath={range .items[*]}{.status.fullName}{"\\n"}{end}',
                admin_url=url,
            )
        ).splitlines()[0]
        == "persistent://fmt/ns/a"
    )
    cols = ok(
        magctl(
            *get,
            "-o",
            "custom-columns=NAME:.metadata.name,PARTS:.spec.partitions",
            "--sort-by",
            ".spec.partitions",
            admin_url=url,
        )
    )
    assert cols == "NAME   PARTS\nc      0\nb      2\na      5\n"
    assert (
        ok(magctl(*get, "--no-headers", "--sort-by", "{.spec.partitions}", admin_url=url))
        .split("\n")[0]
        .split()[0]
        == "c"
    )
    wide = ok(magctl(*get, "-o", "wide", admin_url=url)).splitlines()[0].split()
    assert wide[-4:] == ["MSG-IN", "BYTES-IN", "LABELS", "FULL-NAME"]
    parsed = yaml.safe_load(ok(magctl("get", "tp/a", "-n", "fmt/ns", "-o", "yaml", admin_url=url)))
    assert parsed["status"]["fullName"] == "persistent://fmt/ns/a"
    assert magctl(*get, "-l", "team=pay", admin_url=url).err == (
        "No resources found in fmt/ns namespace.\n"
    )
    assert ok(
        magctl("get", "partitions", "--topic", "b", "-n", "fmt/ns", "-o", "name", admin_url=url)
    ).splitlines() == [
        "partition/persistent://fmt/ns/b-partition-0",
        "partition/persistent://fmt/ns/b-partition-1",
    ]
    bundles = ok(magctl("get", "bdl", "-n", "fmt/ns", "--no-headers", admin_url=url))
    assert len(bundles.splitlines()) == 4
    assert "standalone" in ok(magctl("get", "clusters", admin_url=url))
    assert len(ok(magctl("get", "brokers", "--no-headers", admin_url=url)).splitlines()) == 1
    assert len(ok(magctl("get", "bookies", "--no-headers", admin_url=url)).splitlines()) == 1
    described = ok(magctl("describe", "topic", "b", "-n", "fmt/ns", admin_url=url))
    assert "Name:" in described
    assert "persistent://fmt/ns/b" in described
    assert "Owner:" in described
    assert "Bundle:" in described


def test_errors_from_the_server_in_kubectl_form(
    magctl: Magctl, magctl_proc: Magctl, url: str
) -> None:
    r = magctl_proc("get", "topic", "persistent://public/default/nope", admin_url=url)
    assert r.code == 1
    assert (
        r.err == 'Error from server (NotFound): topics "persistent://public/default/nope" '
        "not found\n"
    )
    assert "Traceback" not in r.err
    ok(magctl("create", "tenant", "dup", admin_url=url))
    r = magctl("create", "tenant", "dup", admin_url=url)
    assert r.code == 1
    assert r.err == 'Error from server (AlreadyExists): tenants "dup" already exists\n'
    r = magctl("get", "ns", "dup/none", admin_url=url)
    assert r.err == 'Error from server (NotFound): namespaces "dup/none" not found\n'
    ok(magctl("create", "ns", "dup/full", admin_url=url))
    ok(magctl("create", "topic", "x", "-n", "dup/full", admin_url=url))
    r = magctl("delete", "ns", "dup/full", admin_url=url)
    assert r.code == 1
    assert r.err.startswith('Error from server (Conflict): namespaces "dup/full": ')
    assert ok(magctl("delete", "topic", "x", "-n", "dup/full", admin_url=url)) == (
        'topic "persistent://dup/full/x" deleted\n'
    )
    assert magctl("delete", "topics", "-n", "dup/full", admin_url=url).code == 2  # no names
    ok(magctl("create", "topic", "y", "-n", "dup/full", "-p", "3", admin_url=url))
    ok(magctl("create", "topic", "z", "-n", "dup/full", admin_url=url))
    assert magctl("delete", "ns", "dup/full", admin_url=url).code == 1  # not empty
    assert ok(magctl("delete", "ns", "dup/full", "--force", admin_url=url)) == (
        'namespace "dup/full" deleted\n'
    )
    assert magctl("get", "ns", "dup/full", admin_url=url).code == 1
    ok(magctl("delete", "tenant", "dup", admin_url=url))


def test_delete_all_topics_of_a_namespace(magctl: Magctl, url: str) -> None:
    ok(magctl("create", "tenant", "del", admin_url=url))
    ok(magctl("create", "ns", "del/ns", admin_url=url))
    ok(magctl("create", "topic", "p", "-n", "del/ns", "-p", "2", admin_url=url))
    ok(magctl("create", "topic", "q", "-n", "del/ns", admin_url=url))
    out = ok(magctl("delete", "topics", "--all", "-n", "del/ns", admin_url=url))
    assert out.splitlines() == [
        'topic "persistent://del/ns/p" deleted',
        'topic "persistent://del/ns/q" deleted',
    ]
    assert magctl("get", "topics", "-n", "del/ns", admin_url=url).out == ""


def test_apply_is_idempotent_and_diff_exit_codes(
    magctl: Magctl, url: str, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(MANIFESTS)
    before = magctl("diff", "-f", str(path), admin_url=url)
    assert before.code == 1
    assert "+++ merged/tenant.shop" in before.out
    dry = magctl("apply", "-f", str(path), "--dry-run=server", admin_url=url)
    assert dry.out.splitlines()[0] == "tenant/shop created (server dry run)"
    assert magctl("get", "tenant", "shop", admin_url=url).code == 1  # nothing was written
    assert ok(magctl("apply", "-f", str(path), admin_url=url)).splitlines() == [
        "tenant/shop created",
        "namespace/shop/orders created",
        "topic/persistent://shop/orders/payments created",
        "topic/persistent://shop/orders/audit created",
        "subscription/billing created",
    ]
    again = ok(magctl("apply", "-f", str(tmp_path), admin_url=url)).splitlines()
    assert again == [
        "tenant/shop unchanged",
        "namespace/shop/orders unchanged",
        "topic/persistent://shop/orders/payments unchanged",
        "topic/persistent://shop/orders/audit unchanged",
        "subscription/billing unchanged",
    ]
    assert magctl("diff", "-f", str(path), admin_url=url).code == 0
    ttl = magctl(
        "get",
        "topic",
        "payments",
        "-n",
        "shop/orders",
        "-o",
        "jsonpath={.spec.policies.messageTTL}",
        admin_url=url,
    )
    assert ok(ttl) == "30m"
    subs = ok(magctl("get", "subs", "-n", "shop/orders", "-o", "name", admin_url=url))
    assert subs == "subscription/billing\n"
    # change: TTL 1h -> 2h, grow partitions 2 -> 3, drop deduplication (null = remove)
    changed = (
        MANIFESTS.replace("messageTTL: 1h", "messageTTL: 2h")
        .replace("partitions: 2", "partitions: 3")
        .replace("deduplication: true", "deduplication: null")
    )
    path.write_text(changed)
    diff = magctl("diff", "-f", str(path), admin_url=url)
    assert diff.code == 1
    assert "-    messageTTL: 1h\n+    messageTTL: 2h\n" in diff.out
    assert "-  partitions: 2\n+  partitions: 3\n" in diff.out
    out = ok(magctl("apply", "-f", str(path), admin_url=url)).splitlines()
    assert out[1] == "namespace/shop/orders configured"
    assert out[2] == "topic/persistent://shop/orders/payments configured"
    assert magctl("diff", "-f", str(path), admin_url=url).code == 0
    ns = yaml.safe_load(ok(magctl("get", "ns", "shop/orders", "-o", "yaml", admin_url=url)))
    assert ns["spec"]["policies"]["messageTTL"] == "2h"
    assert "deduplication" not in ns["spec"]["policies"]
    shrink = changed.replace("partitions: 3", "partitions: 1")
    path.write_text(shrink)
    r = magctl("apply", "-f", str(path), admin_url=url)
    assert r.code == 2
    assert "partitions can only grow" in r.err


def _produce(client: pulsar.Client, topic: str, n: int) -> None:
    producer = client.create_producer(topic)
    for i in range(n):
        producer.send(f"msg-{i}".encode(), properties={"i": str(i)})
    producer.close()


def _backlog(magctl: Magctl, url: str, sub: str, topic: str) -> int:
    r = magctl(
        "get", "sub", sub, "--topic", topic, "-o", "jsonpath={.status.msgBacklog}", admin_url=url
    )
    return int(ok(r))


def test_subscription_operations(magctl: Magctl, url: str, client: pulsar.Client) -> None:
    topic = "persistent://public/default/ops"
    ok(magctl("create", "topic", topic, admin_url=url))
    assert (
        ok(magctl("create", "sub", "s", "--topic", topic, "--position", "earliest", admin_url=url))
        == "subscription/s created\n"
    )
    _produce(client, topic, 10)
    assert _backlog(magctl, url, "s", topic) == 10
    peeked = yaml.safe_load(
        ok(magctl("peek", "sub", "s", "--topic", topic, "-n", "2", "-o", "yaml", admin_url=url))
    )
    assert [m["payload"] for m in peeked] == ["msg-0", "msg-1"]
    assert peeked[1]["PROPERTY-i"] == "1"
    assert _backlog(magctl, url, "s", topic) == 10  # peek consumes nothing
    assert ok(magctl("skip", "sub", "s", "--topic", topic, "--count", "3", admin_url=url)) == (
        "subscription/s skipped 3\n"
    )
    assert _backlog(magctl, url, "s", topic) == 7
    first = yaml.safe_load(
        ok(magctl("peek", "sub", "s", "--topic", topic, "-o", "yaml", admin_url=url))
    )
    assert first[0]["payload"] == "msg-3"
    ok(magctl("seek", "sub", "s", "--topic", topic, "--to", "earliest", admin_url=url))
    assert _backlog(magctl, url, "s", topic) == 10
    ok(magctl("clear", "sub", "s", "--topic", topic, admin_url=url))
    assert _backlog(magctl, url, "s", topic) == 0
    ok(magctl("seek", "sub", "s", "--topic", topic, "--time", "1h", admin_url=url))
    assert _backlog(magctl, url, "s", topic) == 10  # all were published within the hour
    ok(magctl("expire", "sub", "s", "--topic", topic, "--older-than", "1h", admin_url=url))
    assert _backlog(magctl, url, "s", topic) == 10  # none is that old
    ok(magctl("expire", "sub", "s", "--topic", topic, "--older-than", "0s", admin_url=url))
    assert _backlog(magctl, url, "s", topic) == 0
    examined = yaml.safe_load(
        ok(magctl("peek", "topic", topic, "--position", "latest", "-o", "yaml", admin_url=url))
    )
    assert examined[0]["payload"] == "msg-9"
    r = magctl("skip", "topic", topic, "--count", "1", admin_url=url)
    assert r.code == 2
    assert "skip does not apply to topics" in r.err
    assert magctl("get", "sub", "nope", "--topic", topic, admin_url=url).err == (
        'Error from server (NotFound): subscriptions "nope" not found\n'
    )
    ok(magctl("delete", "sub", "s", "--topic", topic, admin_url=url))
    assert magctl("get", "subs", "--topic", topic, admin_url=url).out == ""


def test_topic_operations(
    magctl: Magctl, url: str, server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = "persistent://public/default/grow"
    ok(magctl("create", "topic", topic, "-p", "2", admin_url=url))
    looked = json.loads(ok(magctl("lookup", "topic", topic, "-o", "json", admin_url=url)))
    assert [x["brokerUrl"] for x in looked] == [server.service_url] * 2
    assert ok(magctl("scale", "topic", topic, "--partitions", "4", admin_url=url)) == (
        f"topic/{topic} scaled to 4 partitions\n"
    )
    r = magctl("scale", "topic", topic, "--partitions", "3", admin_url=url)
    assert r.code == 2
    assert "only grow" in r.err
    assert ok(magctl("unload", "topic", topic, admin_url=url)) == f"topic/{topic} unloaded\n"
    assert ok(magctl("unload", "ns", "public/default", admin_url=url)) == (
        "namespace/public/default unloaded\n"
    )
    compacted = "persistent://public/default/compact-me"
    producer = client.create_producer(compacted)
    for i in range(20):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
    producer.close()
    assert ok(magctl("compact", "topic", compacted, "--wait", admin_url=url)) == (
        f"topic/{compacted} compacted\n"
    )
    ledgers = ok(magctl("get", "ledgers", "--topic", compacted, "--no-headers", admin_url=url))
    assert ledgers.split()[1] == compacted


def test_split_bundle(magctl: Magctl, url: str, client: pulsar.Client) -> None:
    ok(magctl("create", "tenant", "split", admin_url=url))
    ok(magctl("create", "ns", "split/ns", "--bundles", "1", admin_url=url))
    for i in range(6):
        producer = client.create_producer(f"persistent://split/ns/t{i}")
        producer.send(b"x")
        producer.close()
    full = "0x00000000_0xffffffff"
    assert ok(magctl("split", "bundle", full, "-n", "split/ns", admin_url=url)) == (
        f"bundle/{full} split into 0x00000000_0x7fffffff, 0x7fffffff_0xffffffff\n"
    )
    out = ok(
        magctl(
            "split",
            "bdl",
            "0x7fffffff_0xffffffff",
            "-n",
            "split/ns",
            "--boundaries",
            "0x90000000,0xa0000000",
            admin_url=url,
        )
    )
    assert out.endswith("0x7fffffff_0x90000000, 0x90000000_0xa0000000, 0xa0000000_0xffffffff\n")
    names = ok(magctl("get", "bundles", "-n", "split/ns", "-o", "name", admin_url=url))
    assert len(names.splitlines()) == 4
    r = magctl(
        "split",
        "bundle",
        "0x90000000_0xa0000000",
        "-n",
        "split/ns",
        "--boundaries",
        "0x10",
        admin_url=url,
    )
    assert r.code == 1
    assert "must lie inside" in r.err
    r = magctl("split", "bundle", "0x00000000_0x00000010", "-n", "split/ns", admin_url=url)
    assert r.err == 'Error from server (NotFound): bundles "0x00000000_0x00000010" not found\n'
    # every topic is still served after the splits (they reload in their new bundles)
    for i in range(6):
        producer = client.create_producer(f"persistent://split/ns/t{i}")
        producer.send(b"y")
        producer.close()


def test_top_once(magctl: Magctl, url: str, client: pulsar.Client) -> None:
    topic = "persistent://public/default/top-me"
    consumer = client.subscribe(topic, "watcher")
    producer = client.create_producer(topic)
    producer.send(b"warm-up")
    out = ok(magctl("top", "topics", "--once", "--interval", "0.1", admin_url=url))
    assert out.splitlines()[0].split() == [
        "NAME",
        "RATE-IN",
        "RATE-OUT",
        "THROUGHPUT-IN",
        "BACKLOG",
        "REPL-BACKLOG",
        "STORAGE",
    ]
    assert topic in out
    subs = ok(
        magctl(
            "top",
            "subs",
            "--topic",
            topic,
            "--once",
            "--interval",
            "0.1",
            "--sort-by",
            "backlog",
            admin_url=url,
        )
    )
    assert subs.splitlines()[1].split()[:2] == ["watcher", topic]
    bundles = ok(
        magctl(
            "top", "bundles", "-n", "public/default", "--once", "--interval", "0.1", admin_url=url
        )
    )
    assert bundles.splitlines()[0].split() == [
        "NAME",
        "RATE-IN",
        "RATE-OUT",
        "THROUGHPUT-IN",
        "BACKLOG",
        "REPL-BACKLOG",
        "TOPICS",
    ]
    assert all(line.startswith("0x") for line in bundles.splitlines()[1:])
    brokers = ok(magctl("top", "brokers", "--once", "--interval", "0.1", admin_url=url))
    assert brokers.splitlines()[1].split()[0] == url.removeprefix("http://")
    assert magctl("top", "tenants", "--once", admin_url=url).code == 2
    producer.close()
    consumer.close()


def test_get_watch_streams_changes(url: str, magctl: Magctl, config_file: pathlib.Path) -> None:
    import os
    import subprocess
    import sys
    import threading

    ok(magctl("create", "tenant", "watch", admin_url=url))
    ok(magctl("create", "ns", "watch/ns", admin_url=url))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar.client.magctl",
            "get",
            "topics",
            "-n",
            "watch/ns",
            "-w",
            "--watch-interval",
            "0.2",
            "-s",
            url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MAGCTL_CONFIG": str(config_file)},
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True
    )
    reader.start()
    try:
        ok(magctl("create", "topic", "first", "-n", "watch/ns", admin_url=url))
        from support.waiting import wait_until

        wait_until(lambda: any(line.startswith("first") for line in lines), 30, "first row")
        ok(magctl("create", "topic", "second", "-n", "watch/ns", "-p", "2", admin_url=url))
        wait_until(lambda: any(line.startswith("second") for line in lines), 30, "second row")
    finally:
        proc.kill()
        proc.wait(10)
    assert sum(1 for line in lines if line.startswith("NAME")) <= 1  # one header at most


def test_edit_applies_the_saved_yaml(
    magctl: Magctl, url: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    ok(magctl("create", "tenant", "edit", admin_url=url))
    ok(magctl("create", "ns", "edit/ns", admin_url=url))
    ok(
        magctl(
            "apply",
            "-f",
            "-",
            admin_url=url,
            stdin=(
                "apiVersion: magnetar.io/v1alpha1\nkind: Namespace\nmetadata: {name: edit/ns}\n"
                "spec: {policies: {messageTTL: 1h, deduplication: true}}\n"
            ),
        )
    )
    script = tmp_path / "editor.py"
    script.write_text(
        "import sys, pathlib\n"
        "p = pathlib.Path(sys.argv[1])\n"
        "text = p.read_text().replace('messageTTL: 1h', 'messageTTL: 3h')\n"
        "p.write_text(text.replace('    deduplication: true\\n', ''))\n"
    )
    monkeypatch.setenv("MAGCTL_EDITOR", f"{sys.executable} {script}")
    assert ok(magctl("edit", "ns", "edit/ns", admin_url=url)) == "namespace/edit/ns edited\n"
    ns = yaml.safe_load(ok(magctl("get", "ns", "edit/ns", "-o", "yaml", admin_url=url)))
    assert ns["spec"]["policies"] == {"messageTTL": "3h"}  # deduplication was deleted
    monkeypatch.setenv("MAGCTL_EDITOR", "true")  # saves nothing
    r = magctl("edit", "ns", "edit/ns", admin_url=url)
    assert (r.code, r.err) == (0, "Edit cancelled, no changes made.\n")
    monkeypatch.setenv("MAGCTL_EDITOR", "false")
    r = magctl("edit", "ns", "edit/ns", admin_url=url)
    assert r.code == 1
    assert "nothing was changed" in r.err
    assert magctl("edit", "bundles", "x", admin_url=url).code == 2


LABELLED = """\
apiVersion: magnetar.io/v1alpha1
kind: Namespace
metadata: {name: lbl/ns, labels: {env: prod}}
---
apiVersion: magnetar.io/v1alpha1
kind: Topic
metadata: {name: pay, namespace: lbl/ns, labels: {team: pay, tier: gold}}
spec: {partitions: 2}
---
apiVersion: magnetar.io/v1alpha1
kind: Topic
metadata: {name: ship, namespace: lbl/ns, labels: {team: ship}}
---
apiVersion: magnetar.io/v1alpha1
kind: Topic
metadata: {name: misc, namespace: lbl/ns}
"""


def test_labels_are_properties_and_select(magctl: Magctl, url: str) -> None:
    ok(magctl("create", "tenant", "lbl", admin_url=url))
    assert ok(magctl("apply", "-f", "-", admin_url=url, stdin=LABELLED)).splitlines() == [
        "namespace/lbl/ns created",
        "topic/persistent://lbl/ns/pay created",
        "topic/persistent://lbl/ns/ship created",
        "topic/persistent://lbl/ns/misc created",
    ]
    assert magctl("diff", "-f", "-", admin_url=url, stdin=LABELLED).code == 0
    get = ("get", "topics", "-n", "lbl/ns", "-o", "jsonpath={.items[*].metadata.name}")
    assert ok(magctl(*get, "-l", "team=pay", admin_url=url)) == "pay"
    assert ok(magctl(*get, "-l", "team in (pay,ship)", admin_url=url)) == "pay ship"
    assert ok(magctl(*get, "-l", "!team", admin_url=url)) == "misc"
    assert ok(magctl(*get, "-l", "team,tier!=gold", admin_url=url)) == "ship"
    assert ok(magctl("get", "ns", "-l", "env=prod", "-o", "name", admin_url=url)) == (
        "namespace/lbl/ns\n"
    )
    changed = LABELLED.replace("{team: pay, tier: gold}", "{team: pay}")
    diff = magctl("diff", "-f", "-", admin_url=url, stdin=changed)
    assert diff.code == 1
    assert "-    tier: gold\n" in diff.out
    ok(magctl("apply", "-f", "-", admin_url=url, stdin=changed))
    assert (
        ok(
            magctl(
                "get",
                "tp",
                "pay",
                "-n",
                "lbl/ns",
                "-o",
                "jsonpath={.metadata.labels}",
                admin_url=url,
            )
        )
        == '{"team": "pay"}'
    )
    out = ok(magctl("delete", "topics", "-n", "lbl/ns", "-l", "team", admin_url=url))
    assert sorted(out.splitlines()) == [
        'topic "persistent://lbl/ns/pay" deleted',
        'topic "persistent://lbl/ns/ship" deleted',
    ]
    r = magctl(
        "apply",
        "-f",
        "-",
        admin_url=url,
        stdin=(
            "apiVersion: magnetar.io/v1alpha1\nkind: Tenant\nmetadata: {name: x, labels: {a: b}}\n"
        ),
    )
    assert r.code == 2
    assert "namespaces and topics only" in r.err


def test_apply_prune_deletes_what_the_manifests_dropped(magctl: Magctl, url: str) -> None:
    ok(magctl("create", "tenant", "prune", admin_url=url))
    three = "".join(
        "---\napiVersion: magnetar.io/v1alpha1\nkind: Topic\n"
        f"metadata: {{name: {n}, namespace: prune/ns, labels: {{app: shop}}}}\n"
        for n in ("a", "b", "c")
    )
    ns = (
        "apiVersion: magnetar.io/v1alpha1\nkind: Namespace\n"
        "metadata: {name: prune/ns, labels: {app: shop}}\n"
    )
    ok(magctl("apply", "-f", "-", admin_url=url, stdin=ns + three))
    ok(magctl("create", "topic", "unlabelled", "-n", "prune/ns", admin_url=url))
    two = "".join("---\n" + doc for doc in three.split("---\n")[1:3])  # a and b
    r = magctl("apply", "-f", "-", "--prune", admin_url=url, stdin=ns + two)
    assert r.code == 2  # --prune needs -l
    dry = ok(
        magctl(
            "apply",
            "-f",
            "-",
            "--prune",
            "-l",
            "app=shop",
            "--dry-run",
            "client",
            admin_url=url,
            stdin=ns + two,
        )
    )
    assert dry.splitlines()[-1] == "topic/persistent://prune/ns/c pruned (dry run)"
    out = ok(magctl("apply", "-f", "-", "--prune", "-l", "app=shop", admin_url=url, stdin=ns + two))
    assert out.splitlines()[-1] == "topic/persistent://prune/ns/c pruned"
    names = ok(
        magctl(
            "get",
            "topics",
            "-n",
            "prune/ns",
            "-o",
            "jsonpath={.items[*].metadata.name}",
            admin_url=url,
        )
    )
    assert names == "a b unlabelled"  # the unlabelled topic is not the selector's


def test_get_yaml_round_trips_through_apply(magctl: Magctl, url: str) -> None:
    ok(magctl("create", "tenant", "trip", "--admin-roles", "ops", admin_url=url))
    ok(
        magctl(
            "apply",
            "-f",
            "-",
            admin_url=url,
            stdin=(
                "apiVersion: magnetar.io/v1alpha1\nkind: Namespace\n"
                "metadata: {name: trip/ns, labels: {env: test}}\n"
                "spec: {bundles: 2, policies: {retention: {time: 3h, size: 1G}, messageTTL: 10m,\n"
                "  dispatchRate: {dispatchThrottlingRateInMsg: 50}}}\n"
            ),
        )
    )
    ok(magctl("create", "topic", "a", "-n", "trip/ns", "-p", "2", admin_url=url))
    ok(magctl("create", "sub", "s", "--topic", "a", "-n", "trip/ns", admin_url=url))
    dumps = [
        ok(magctl("get", "tenant", "trip", "-o", "yaml", admin_url=url)),
        ok(magctl("get", "ns", "-n", "trip", "-o", "yaml", admin_url=url)),
        ok(magctl("get", "topics", "-n", "trip/ns", "-o", "yaml", admin_url=url)),
        ok(magctl("get", "subs", "-n", "trip/ns", "-o", "json", admin_url=url)),
    ]
    for dump in dumps:
        assert magctl("diff", "-f", "-", admin_url=url, stdin=dump).code == 0, dump
        applied = ok(magctl("apply", "-f", "-", admin_url=url, stdin=dump))
        assert all(line.endswith(" unchanged") for line in applied.splitlines()), applied


def test_version_of_client_and_server(magctl: Magctl, url: str) -> None:
    lines = ok(magctl("version", admin_url=url)).splitlines()
    assert lines[0] == "Client Version: 0.1.0"
    assert lines[1].startswith("Server Version: ")
    assert lines[1] != "Server Version: unknown"
    report = json.loads(ok(magctl("version", "-o", "json", admin_url=url)))
    assert report["serverVersion"]["adminUrl"] == url
    assert report["serverVersion"]["version"] == lines[1].removeprefix("Server Version: ")
    assert yaml.safe_load(ok(magctl("version", "-o", "yaml", admin_url=url))) == report


def test_bash_completion_asks_the_server_for_names(
    magctl: Magctl, url: str, tmp_path: pathlib.Path, config_file: pathlib.Path
) -> None:
    """Names after a resource type come from ``magctl get TYPE -o name`` against the current
    context; contexts after ``--context`` from the config file."""
    ok(magctl("config", "set-context", "local", "--admin-url", url))
    for tenant in ("compl-a", "compl-b", "other"):
        ok(magctl("create", "tenant", tenant))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = f'#!/bin/sh\nexec {sys.executable} -m magnetar.client.magctl "$@"\n'
    (bindir / "magctl").write_text(shim)
    (bindir / "magctl").chmod(0o755)
    done = subprocess.run(
        [
            "bash",
            "-c",
            "source <(magctl completion bash) && "
            "COMP_WORDS=(magctl get tenants compl); COMP_CWORD=3; _magctl; echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl delete tn o); COMP_CWORD=3; _magctl; echo ${COMPREPLY[@]}; "
            "COMP_WORDS=(magctl get --context lo); COMP_CWORD=3; _magctl; echo ${COMPREPLY[@]}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            "PATH": f"{bindir}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "MAGCTL_CONFIG": os.environ["MAGCTL_CONFIG"],
        },
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["compl-a", "compl-b"]
    assert lines[1].split() == ["other"]
    assert lines[2] == "local"


def test_delete_a_cluster(magctl: Magctl, url: str) -> None:
    data = {"serviceUrl": "http://b3.example.com:8080", "brokerServiceUrl": "pulsar://b3:6650"}
    assert http(url, "PUT", "/admin/v2/clusters/spare", data)[0] == 204
    assert ok(magctl("delete", "cluster", "spare", admin_url=url)) == 'cluster "spare" deleted\n'
    assert "spare" not in ok(magctl("get", "clusters", "-o", "name", admin_url=url))
    refused = magctl("delete", "cluster", "standalone", admin_url=url)
    assert refused.code == 1 and "this broker serves" in refused.err


def test_set_context_namespace_is_stored_and_used_by_namespaced_verbs(
    magctl: Magctl, url: str, config_file: pathlib.Path
) -> None:
    """kubectl's ``set-context NAME --namespace NS``: stored in the context, shown by ``config
    view`` and ``get-contexts``, and the namespace of every namespaced verb in it."""
    ok(magctl("create", "tenant", "ctxns", admin_url=url))
    ok(magctl("create", "namespace", "ctxns/prod", admin_url=url))
    ok(magctl("create", "topic", "only-in-prod", "-n", "ctxns/prod", admin_url=url))
    ok(magctl("create", "topic", "ctx-in-default", admin_url=url))
    ok(magctl("config", "set-context", "alpha", "--admin-url", url, "--namespace", "ctxns/prod"))
    ok(magctl("config", "use-context", "alpha"))
    view = yaml.safe_load(ok(magctl("config", "view")))
    assert view["contexts"] == [
        {"name": "alpha", "context": {"cluster": "alpha", "namespace": "ctxns/prod"}}
    ]
    row = [r.split() for r in ok(magctl("config", "get-contexts")).splitlines()][1]
    assert row[-1] == "ctxns/prod"
    names = ok(magctl("get", "topics", "-o", "name"))
    assert "only-in-prod" in names and "ctx-in-default" not in names
    ok(magctl("create", "topic", "made-in-context"))
    status, topics = http(url, "GET", "/admin/v2/persistent/ctxns/prod")
    assert status == 200 and "persistent://ctxns/prod/made-in-context" in topics
    assert "only-in-prod" not in ok(magctl("get", "topics", "-o", "name", "-n", "public/default"))
    bad = magctl("config", "set-context", "beta", "--namespace", "no-slash")
    assert bad.code == 2 and "tenant/namespace" in bad.err
