"""Progress of long verbs against a real ``magnetar standalone`` (issue 16 §2): drawn on
stderr when it is a terminal (a pseudo-terminal here), nothing at all when it is a pipe, and
stdout the same either way.

Each verb runs as a real process: once with stderr on a pipe (quiet), once on a pty (drawn).
The status line is redrawn with ``\\r`` + erase-line; ``frames`` splits what was drawn into
the texts shown, in order.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pulsar
import pytest
from support.magctl import Magctl
from support.standalone import StandaloneProcess

from magnetar.client.magctl.progress import CLEAR_LINE


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


def frames(err: str, *, drop_suffix: str = "") -> list[str]:
    """The status texts drawn, in order, repeats (redraws) folded; the line is left clean."""
    assert err.endswith(CLEAR_LINE), repr(err)
    shown: list[str] = []
    for drawn in err.split(CLEAR_LINE):
        text = drawn.removesuffix(drop_suffix) if drop_suffix else drawn
        if text and (not shown or shown[-1] != text):
            shown.append(text)
    return shown


def ok(r: object) -> str:
    assert getattr(r, "code") == 0, getattr(r, "err")  # noqa: B009
    return str(getattr(r, "out"))  # noqa: B009


def _manifests(d: pathlib.Path, tenant: str) -> list[pathlib.Path]:
    d.mkdir()
    docs = {
        "1-tenant.yaml": "apiVersion: magnetar.io/v1alpha1\nkind: Tenant\n"
        f"metadata: {{name: {tenant}}}\n",
        "2-namespace.yaml": "apiVersion: magnetar.io/v1alpha1\nkind: Namespace\n"
        f"metadata: {{name: {tenant}/ns}}\nspec: {{policies: {{messageTTL: 1h}}}}\n",
        "3-topic.yaml": "apiVersion: magnetar.io/v1alpha1\nkind: Topic\n"
        f"metadata: {{name: t, namespace: {tenant}/ns}}\nspec: {{partitions: 2}}\n",
    }
    paths = []
    for name, text in docs.items():
        (d / name).write_text(text)
        paths.append(d / name)
    return paths


def test_apply_a_directory(magctl_term: Magctl, url: str, tmp_path: pathlib.Path) -> None:
    paths = _manifests(tmp_path / "m", "prog-apply")
    piped = magctl_term("apply", "-f", str(tmp_path / "m"), admin_url=url, tty=False)
    assert ok(piped) == (
        "tenant/prog-apply created\n"
        "namespace/prog-apply/ns created\n"
        "topic/persistent://prog-apply/ns/t created\n"
    )
    assert piped.err == ""
    on_tty = magctl_term("apply", "-f", str(tmp_path / "m"), admin_url=url, tty=True)
    assert ok(on_tty) == (
        "tenant/prog-apply unchanged\n"
        "namespace/prog-apply/ns unchanged\n"
        "topic/persistent://prog-apply/ns/t unchanged\n"
    )
    assert frames(on_tty.err) == [f"[{i}/3] applying {p}" for i, p in enumerate(paths, 1)]


def test_delete_all_topics_and_a_namespace_with_force(
    magctl: Magctl, magctl_term: Magctl, url: str
) -> None:
    ok(magctl("create", "tenant", "prog-del", admin_url=url))
    ok(magctl("create", "ns", "prog-del/ns", admin_url=url))
    names = [f"persistent://prog-del/ns/{x}" for x in ("a", "b", "c")]
    for name in names:
        ok(magctl("create", "topic", name, admin_url=url))
    piped = magctl_term("delete", "topics", "--all", "-n", "prog-del/ns", admin_url=url, tty=False)
    assert ok(piped) == "".join(f'topic "{n}" deleted\n' for n in names)
    assert piped.err == ""
    for name in names:
        ok(magctl("create", "topic", name, admin_url=url))
    on_tty = magctl_term("delete", "topics", "--all", "-n", "prog-del/ns", admin_url=url)
    assert ok(on_tty) == "".join(f'topic "{n}" deleted\n' for n in names)
    assert frames(on_tty.err) == [f"[{i}/3] deleting topics {n}" for i, n in enumerate(names, 1)]

    for name in names[:2]:
        ok(magctl("create", "topic", name, admin_url=url))
    on_tty = magctl_term("delete", "ns", "prog-del/ns", "--force", admin_url=url)
    assert ok(on_tty) == 'namespace "prog-del/ns" deleted\n'
    assert frames(on_tty.err) == [
        "[1/1] deleting namespaces prog-del/ns",
        f"[1/2] deleting the topics of prog-del/ns {names[0]}",
        f"[2/2] deleting the topics of prog-del/ns {names[1]}",
        "[1/1] deleting namespaces prog-del/ns",
    ]


def test_compact_wait_over_partitions(
    magctl: Magctl, magctl_term: Magctl, url: str, client: pulsar.Client
) -> None:
    topic = "persistent://public/default/prog-compact"
    ok(magctl("create", "topic", topic, "-p", "2", admin_url=url))
    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 5}")
    producer.close()
    piped = magctl_term("compact", "topic", topic, "--wait", admin_url=url, tty=False)
    assert ok(piped) == f"topic/{topic} compacted\n"
    assert piped.err == ""
    on_tty = magctl_term("compact", "topic", topic, "--wait", admin_url=url)
    assert ok(on_tty) == f"topic/{topic} compacted\n"
    # while a partition's compaction runs its line says so: that part depends on timing
    assert frames(on_tty.err, drop_suffix=" (running)") == [
        f"[1/2] compacting {topic}-partition-0",
        f"[2/2] compacting {topic}-partition-1",
    ]


def test_unload_and_clear_over_partitions(magctl: Magctl, magctl_term: Magctl, url: str) -> None:
    topic = "persistent://public/default/prog-unload"
    ok(magctl("create", "topic", topic, "-p", "3", admin_url=url))
    ok(magctl("create", "sub", "s", "--topic", topic, admin_url=url))
    piped = magctl_term("unload", "topic", topic, admin_url=url, tty=False)
    assert ok(piped) == f"topic/{topic} unloaded\n"
    assert piped.err == ""
    on_tty = magctl_term("unload", "topic", topic, admin_url=url)
    assert ok(on_tty) == f"topic/{topic} unloaded\n"
    assert frames(on_tty.err) == [f"[{i + 1}/3] unloading {topic}-partition-{i}" for i in range(3)]
    on_tty = magctl_term("clear", "sub", "s", "--topic", topic, admin_url=url)
    assert ok(on_tty) == "subscription/s cleared\n"
    assert frames(on_tty.err) == [
        f"[{i + 1}/3] clearing s on {topic}-partition-{i}" for i in range(3)
    ]


def test_an_error_starts_on_a_clean_line(
    magctl_term: Magctl, url: str, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "1.yaml").write_text(
        "apiVersion: magnetar.io/v1alpha1\nkind: Tenant\nmetadata: {name: prog-err}\n"
    )
    (tmp_path / "m" / "2.yaml").write_text(
        "apiVersion: magnetar.io/v1alpha1\nkind: Namespace\nmetadata: {name: prog-nope/ns}\n"
    )
    r = magctl_term("apply", "-f", str(tmp_path / "m"), admin_url=url)
    assert r.code == 1
    assert r.out == "tenant/prog-err created\n"
    drawn, _, message = r.err.rpartition(CLEAR_LINE)
    assert message.startswith("Error from server (NotFound)"), r.err
    assert "Traceback" not in r.err
    assert frames(drawn + CLEAR_LINE)[-1].startswith("[2/2] applying")
