"""Topic compaction (issue 5 §5) with the official client: keyed messages (batched and
not) with overwrites and tombstones, compaction triggered over Pulsar's admin path, then
``read_compacted`` readers and subscriptions see exactly the latest value per key with
their original message ids, and continue on the live tail; the view survives a standalone
restart; automatic compaction once the ``compactionThreshold`` policy is exceeded.
"""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest
from support.admin import Admin, http
from support.broker import InProcessBroker
from support.metrics import sample
from support.standalone import StandaloneFactory
from support.waiting import wait_until

Earliest = pulsar.InitialPosition.Earliest


def topic_path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://")


def compact_and_wait(base: str, topic: str, timeout_s: float = 20.0) -> None:
    status, got = http(base, "PUT", topic_path(topic) + "/compaction")
    assert status == 204, (status, got)
    wait_for_success(base, topic, timeout_s)


def wait_for_success(base: str, topic: str, timeout_s: float = 20.0) -> None:
    def done() -> bool:
        status, got = http(base, "GET", topic_path(topic) + "/compaction")
        assert status == 200, (status, got)
        assert got["status"] != "ERROR", got
        return bool(got["status"] == "SUCCESS")

    wait_until(done, timeout_s, f"compaction of {topic}")


Ids = dict[str, tuple[int, int, int]]


def publish_keyed(client: pulsar.Client, topic: str) -> tuple[dict[str, bytes], Ids, int]:
    """Overwrites and tombstones through a batching and a non-batching producer.
    Returns (latest value per live key, its message id, messages published)."""
    plain = client.create_producer(topic, batching_enabled=False)
    batched = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=5
    )
    latest: dict[str, bytes] = {}
    ids: Ids = {}
    sent = 0

    def remember(key: str, value: bytes) -> Callable[[Any, pulsar.MessageId], None]:
        def done(res: Any, mid: pulsar.MessageId) -> None:
            assert res == pulsar.Result.Ok, res
            ids[key + "/" + value.decode()] = (mid.ledger_id(), mid.entry_id(), mid.batch_index())

        return done

    for round_ in range(3):
        for k in range(8):
            key, value = f"k{k}", f"v{round_}-{k}".encode()
            if round_ == 1 and k % 2:
                batched.send_async(value, remember(key, value), partition_key=key)
            else:
                mid = plain.send(value, partition_key=key)
                ids[key + "/" + value.decode()] = (
                    mid.ledger_id(),
                    mid.entry_id(),
                    mid.batch_index(),
                )
            latest[key] = value
            sent += 1
        batched.flush()
    plain.send(b"no key at all")  # left out of the view
    sent += 1
    for k in (2, 5):  # tombstones: an empty payload deletes the key
        batched.send_async(b"", lambda res, mid: None, partition_key=f"k{k}")
        latest.pop(f"k{k}")
        sent += 1
    batched.flush()
    # an overwrite inside one batch: only the second member may survive
    batched.send_async(b"v3-0a", lambda res, mid: None, partition_key="k0")
    batched.send_async(b"v3-0b", remember("k0", b"v3-0b"), partition_key="k0")
    batched.flush()
    latest["k0"] = b"v3-0b"
    sent += 2
    plain.close()
    batched.close()
    return latest, {k: ids[k + "/" + v.decode()] for k, v in latest.items()}, sent


def drain(read: Callable[[int], pulsar.Message], n: int) -> list[pulsar.Message]:
    return [read(10_000) for _ in range(n)]


def as_ids(msgs: list[pulsar.Message]) -> Ids:
    out: Ids = {}
    for m in msgs:
        mid = m.message_id()
        assert m.partition_key() not in out, f"{m.partition_key()} delivered twice"
        out[m.partition_key()] = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
    return out


@pytest.fixture
def broker() -> Iterator[InProcessBroker]:
    b = InProcessBroker(
        broker_service_compaction_monitor_interval_seconds=1, max_message_size=10_000
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def test_read_compacted_sees_latest_value_per_key_then_the_live_tail(
    admin: Admin, client: pulsar.Client
) -> None:
    topic = _topic("compact")
    status, got = http(admin.url, "GET", topic_path(topic) + "/compaction")
    assert status == 404, (status, got)  # no such topic yet
    latest, ids, sent = publish_keyed(client, topic)
    status, got = http(admin.url, "GET", topic_path(topic) + "/compaction")
    assert (status, got) == (200, {"status": "NOT_RUN"})
    compact_and_wait(admin.url, topic)

    # a reader from the earliest position: the view, with the original message ids
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    msgs = drain(reader.read_next, len(latest))
    assert {m.partition_key(): m.data() for m in msgs} == latest
    assert as_ids(msgs) == ids
    # a durable Exclusive subscription reads the same view
    consumer = client.subscribe(
        topic, "compacted-sub", initial_position=Earliest, is_read_compacted=True
    )
    sub_msgs = drain(consumer.receive, len(latest))
    assert as_ids(sub_msgs) == ids
    consumer.acknowledge_cumulative(sub_msgs[-1])

    # after the horizon: the live tail, for both
    producer = client.create_producer(topic, batching_enabled=False)
    after = producer.send(b"after", partition_key="k1")
    for got_msg in (reader.read_next(10_000), consumer.receive(10_000)):
        assert got_msg.data() == b"after"
        assert got_msg.message_id().entry_id() == after.entry_id()
    assert not reader.has_message_available()
    # seeking back to the earliest position serves the view again, then the tail
    reader.seek(pulsar.MessageId.earliest)
    again = drain(reader.read_next, len(latest) + 1)
    assert as_ids(again[:-1]) == ids
    assert again[-1].data() == b"after"

    # a reader that does not ask for the compacted view sees every message
    full = client.create_reader(topic, pulsar.MessageId.earliest)
    everything = drain(full.read_next, sent + 1)
    assert everything[-1].data() == b"after"
    assert not full.has_message_available()

    stats = http(admin.url, "GET", topic_path(topic) + "/stats")[1]
    assert stats["compaction"]["lastCompactionRemovedEventCount"] == sent - len(latest)
    assert stats["compaction"]["lastCompactionSucceedTimestamp"] > 0
    assert "__compaction" in stats["subscriptions"]
    with urllib.request.urlopen(admin.url + "/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    labels = {"cluster": "standalone", "namespace": "public/default", "topic": topic}
    assert sample(metrics, "pulsar_compaction_succeed_count", **labels) == 1


def test_read_compacted_refused_on_shared_and_non_persistent(
    broker: InProcessBroker, client: pulsar.Client
) -> None:
    from magnetar.client import ConsumerType, NotAllowedError
    from magnetar.client.sync import Client as OurClient

    topic = _topic("refused")
    # the official client refuses Shared / Key_Shared read_compacted before asking
    for kind in (pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared):
        with pytest.raises(pulsar.InvalidConfiguration):
            client.subscribe(topic, "s", consumer_type=kind, is_read_compacted=True)
    # so it does on non-persistent topics
    np_topic = "non-persistent://public/default/np-" + uuid.uuid4().hex[:8]
    with pytest.raises(pulsar.InvalidConfiguration):
        client.subscribe(np_topic, "s", is_read_compacted=True)
    # the broker refuses both too (a client that asks gets NotAllowed, with the reason)
    ours = OurClient(broker.service_url, operation_timeout_seconds=5)
    try:
        for our_kind in (ConsumerType.Shared, ConsumerType.KeyShared):
            with pytest.raises(NotAllowedError, match="failover or exclusive"):
                ours.subscribe(topic, "s", consumer_type=our_kind, is_read_compacted=True)
        with pytest.raises(NotAllowedError, match="persistent topics"):
            ours.subscribe(np_topic, "s", is_read_compacted=True)
    finally:
        ours.close()
    # the same subscription without read_compacted is fine
    client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared).close()


def test_automatic_compaction_over_the_threshold_policy(
    admin: Admin, client: pulsar.Client
) -> None:
    topic = _topic("auto")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"x" * 10, partition_key="a")
    status, got = http(admin.url, "POST", topic_path(topic) + "/compactionThreshold", 500)
    assert status == 204, (status, got)
    # under the threshold: the monitor (every second here) leaves the topic alone
    runner = admin.broker.runner
    assert runner is not None
    checks = runner.compaction_monitor.checks
    wait_until(lambda: runner.compaction_monitor.checks >= checks + 2, 10, "checks")
    assert http(admin.url, "GET", topic_path(topic) + "/compaction")[1]["status"] == "NOT_RUN"
    for i in range(40):
        producer.send(f"value-{i:03d}".encode() * 2, partition_key=f"k{i % 4}")
    wait_for_success(admin.url, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    got_msgs = drain(reader.read_next, 5)
    assert {m.partition_key(): m.data() for m in got_msgs} == {
        "a": b"x" * 10,
        **{f"k{k}": f"value-{36 + k:03d}".encode() * 2 for k in range(4)},
    }
    assert not reader.has_message_available()


def test_compacted_view_survives_standalone_restart(
    standalone_factory: StandaloneFactory,
) -> None:
    sa = standalone_factory.create().start()
    topic = "persistent://public/default/compacted-restart"
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        latest, ids, _ = publish_keyed(client, topic)
        compact_and_wait(sa.web_url, topic, 30)
    finally:
        client.close()
    sa.stop()
    sa.start()
    # the stored view is found again: status, statistics and the view itself
    status, got = http(sa.web_url, "GET", topic_path(topic) + "/compaction")
    assert (status, got) == (200, {"status": "SUCCESS"})
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        msgs = drain(reader.read_next, len(latest))
        assert {m.partition_key(): m.data() for m in msgs} == latest
        assert as_ids(msgs) == ids
        assert not reader.has_message_available()
    finally:
        client.close()
    # deleting the topic deletes its views too (they sit under the __compaction cursor)
    status, got = http(sa.web_url, "DELETE", topic_path(topic) + "?force=true")
    assert status == 204, (status, got)
    assert http(sa.web_url, "GET", topic_path(topic) + "/compaction")[0] == 404


def test_individual_acks_of_compacted_batches_complete_their_entries(
    admin: Admin, client: pulsar.Client
) -> None:
    """With batch-index acks, acking every delivered member of a partially retained batch
    acknowledges the whole entry (the members compacted out count as acknowledged)."""
    topic = _topic("acks")
    latest, _, _ = publish_keyed(client, topic)
    compact_and_wait(admin.url, topic)

    def subscribe() -> pulsar.Consumer:
        return client.subscribe(
            topic,
            "acking",
            initial_position=Earliest,
            is_read_compacted=True,
            batch_index_ack_enabled=True,
        )

    consumer = subscribe()
    msgs = drain(consumer.receive, len(latest))
    assert {m.partition_key(): m.data() for m in msgs} == latest
    for m in msgs:
        consumer.acknowledge(m)
    consumer.close()  # flushes the acks
    consumer = subscribe()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"fresh", partition_key="k7")
    # nothing of the view comes again: the first message is the new one
    assert consumer.receive(10_000).data() == b"fresh"


def test_chunked_values_are_compacted_whole(admin: Admin, client: pulsar.Client) -> None:
    """A chunked message spans several entries: the view keeps all of them or none."""
    topic = _topic("chunks")
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = {k: bytes([65 + i]) * 25_000 for i, k in enumerate(("a", "b"))}  # > max size
    producer.send(b"A" * 25_000, partition_key="a")
    producer.send(b"small", partition_key="b")
    producer.send(big["a"], partition_key="a")
    producer.send(big["b"], partition_key="b")
    producer.send(b"c", partition_key="c")
    stats = http(admin.url, "GET", topic_path(topic) + "/stats")[1]
    assert stats["numberOfEntries"] >= 2 + 3 * 3  # the large values went as chunks
    compact_and_wait(admin.url, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    got = {m.partition_key(): m.data() for m in drain(reader.read_next, 3)}
    assert got == {**big, "c": b"c"}
    assert not reader.has_message_available()
