"""Topic terminate and truncate (Pulsar's admin REST paths and ``magctl terminate|truncate``)
on a real standalone with the official client. Both routes answered 404 before.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import pulsar
import pytest
from support.admin import http
from support.magctl import Magctl
from support.standalone import StandaloneProcess
from support.waiting import wait_until

T = "/admin/v2/persistent/public/default"


@pytest.fixture
def client(server: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(server.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        yield c
    finally:
        c.close()


def stats(server: StandaloneProcess, local: str) -> dict:
    status, data = http(server.web_url, "GET", f"{T}/{local}/stats")
    assert status == 200, data
    return data


def test_terminate_refuses_producers_and_sends_and_survives_unload(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = "persistent://public/default/term-1"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(3)]
    status, last = http(server.web_url, "POST", f"{T}/term-1/terminate")
    assert status == 200, last
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    assert last["partitionIndex"] == -1
    # terminating again answers the same position
    assert http(server.web_url, "POST", f"{T}/term-1/terminate") == (200, last)

    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"late")
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)

    # the consumer still reads everything stored before the termination, then nothing more
    got = [consumer.receive(timeout_millis=30_000).data() for _ in range(3)]
    assert got == [b"m0", b"m1", b"m2"]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    for _ in range(3):
        reader.read_next(timeout_millis=30_000)
    assert not reader.has_message_available()  # caught up: the end of the topic

    # the flag is stored with the managed ledger: an unload (reopen) keeps it
    assert http(server.web_url, "PUT", f"{T}/term-1/unload")[0] == 204
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)
    status, internal = http(server.web_url, "GET", f"{T}/term-1/internalStats")
    assert status == 200
    assert internal["state"] == "Terminated"
    assert http(server.web_url, "POST", f"{T}/term-1/terminate") == (200, last)
    # truncating a terminated topic is refused (nothing may be written to roll over to)
    assert http(server.web_url, "DELETE", f"{T}/term-1/truncate")[0] == 405


def test_terminate_partitions_and_errors(server: StandaloneProcess, client: pulsar.Client) -> None:
    assert http(server.web_url, "PUT", f"{T}/term-p/partitions", 2)[0] == 204
    producer = client.create_producer("persistent://public/default/term-p")
    for i in range(4):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}")
    producer.close()
    status, body = http(server.web_url, "POST", f"{T}/term-p/terminate")
    assert status == 405, body
    status, per = http(server.web_url, "POST", f"{T}/term-p/terminate/partitions")
    assert status == 200, per
    assert sorted(per) == ["0", "1"]
    assert [per[k]["partitionIndex"] for k in ("0", "1")] == [0, 1]
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer("persistent://public/default/term-p-partition-1")
    assert http(server.web_url, "POST", f"{T}/nope-none/terminate")[0] == 404
    assert http(server.web_url, "POST", f"{T}/nope-none/terminate/partitions")[0] == 404
    assert http(server.web_url, "DELETE", f"{T}/nope-none/truncate")[0] == 404


def test_truncate_deletes_earlier_messages_and_new_ones_flow(
    server: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = "persistent://public/default/trunc-1"
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"old{i}".encode())
    assert stats(server, "trunc-1")["subscriptions"]["s"]["msgBacklog"] == 5
    status, before = http(server.web_url, "GET", f"{T}/trunc-1/internalStats")
    old_ledgers = {x["ledgerId"] for x in before["ledgers"]}

    assert http(server.web_url, "DELETE", f"{T}/trunc-1/truncate") == (204, None)

    wait_until(
        lambda: stats(server, "trunc-1")["subscriptions"]["s"]["msgBacklog"] == 0, timeout_s=60
    )
    status, after = http(server.web_url, "GET", f"{T}/trunc-1/internalStats")
    assert status == 200
    assert not old_ledgers & {x["ledgerId"] for x in after["ledgers"]}
    assert after["numberOfEntries"] == 0
    # a new reader from the earliest position sees none of the old messages
    producer.send(b"new")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(timeout_millis=30_000).data() == b"new"
    # the subscription goes on with what is sent after the truncation
    while True:
        msg = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge(msg)
        if msg.data() == b"new":
            break
        assert msg.data().startswith(b"old")  # dispatched before the truncation
    producer.close()


def test_magctl_terminate_and_truncate(
    magctl: Magctl, magctl_proc: Magctl, server: StandaloneProcess, client: pulsar.Client
) -> None:
    url = server.web_url
    topic = "persistent://public/default/mag-term"
    producer = client.create_producer(topic, batching_enabled=False)
    mid = producer.send(b"x")
    producer.close()
    r = magctl("truncate", "topic", "mag-term", "-n", "public/default", admin_url=url)
    assert (r.code, r.out, r.err) == (0, f"topic/{topic} truncated\n", "")
    r = magctl("terminate", "topic", topic, admin_url=url)
    assert r.code == 0, r.err
    assert r.out.startswith(f"topic/{topic} terminated (last message id ")
    r = magctl("terminate", "topic", topic, "-o", "json", admin_url=url)
    assert r.code == 0, r.err
    assert json.loads(r.out)["partitionIndex"] == -1
    assert json.loads(r.out)["ledgerId"] >= mid.ledger_id()
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic)

    r = magctl_proc("terminate", "topic", "persistent://public/default/absent", admin_url=url)
    assert r.code == 1
    assert r.err.startswith(
        'Error from server (NotFound): topics "persistent://public/default/absent"'
    )
    assert "Traceback" not in r.err
    r = magctl_proc("truncate", "topic", "persistent://a/b/c/d", admin_url=url)
    assert r.code == 2
    assert r.err.startswith('error: invalid topic name "persistent://a/b/c/d"')
    assert "Traceback" not in r.err
    r = magctl("terminate", "ns", "public/default", admin_url=url)
    assert (r.code, r.err) == (2, "error: terminate does not apply to namespaces (only topics)\n")

    parted = "persistent://public/default/mag-term-p"
    assert magctl("create", "topic", parted, "-p", "2", admin_url=url).code == 0
    r = magctl("terminate", "topic", parted, admin_url=url)
    assert r.code == 0, r.err
    assert r.out.startswith(f"topic/{parted} terminated (last message ids 0=")
    assert ", 1=" in r.out
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(parted)


def test_termination_survives_a_restart(tmp_path: pathlib.Path) -> None:
    """The flag is in the managed ledger's metadata node: a restarted standalone (same data
    directory) still refuses producers and still serves what was stored."""
    proc = StandaloneProcess(tmp_path / "data", tmp_path / "standalone.log")
    topic = "persistent://public/default/term-restart"
    try:
        proc.start(timeout_s=90)
        c = pulsar.Client(proc.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
        try:
            c.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest).close()
            p = c.create_producer(topic, batching_enabled=False)
            for i in range(3):
                p.send(f"m{i}".encode())
            status, last = http(proc.web_url, "POST", f"{T}/term-restart/terminate")
            assert status == 200, last
        finally:
            c.close()
        assert proc.stop() == 0, proc.log_tail()
        proc.start(timeout_s=90)
        c = pulsar.Client(proc.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
        try:
            with pytest.raises(pulsar.TopicTerminated):
                c.create_producer(topic)
            consumer = c.subscribe(topic, "s")
            got = [consumer.receive(timeout_millis=30_000).data() for _ in range(3)]
            assert got == [b"m0", b"m1", b"m2"]
            assert http(proc.web_url, "POST", f"{T}/term-restart/terminate") == (200, last)
        finally:
            c.close()
    finally:
        proc.kill()
