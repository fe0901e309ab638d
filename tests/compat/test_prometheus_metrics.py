"""``/metrics`` with Pulsar's names and labels, parsed with ``prometheus_client.parser``,
after real traffic from the official client."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from support.admin import Admin
from support.broker import InProcessBroker
from support.metrics import families, sample
from support.waiting import wait_until

TOPIC_SERIES = (
    "pulsar_rate_in",
    "pulsar_rate_out",
    "pulsar_throughput_in",
    "pulsar_throughput_out",
    "pulsar_msg_backlog",
    "pulsar_storage_size",
    "pulsar_subscriptions_count",
    "pulsar_producers_count",
    "pulsar_consumers_count",
    "pulsar_in_messages",
    "pulsar_in_bytes",
    "pulsar_out_messages",
    "pulsar_out_bytes",
    "pulsar_storage_write_latency_le_0_5",
    "pulsar_storage_write_latency_le_1",
    "pulsar_storage_write_latency_le_5",
    "pulsar_storage_write_latency_le_10",
    "pulsar_storage_write_latency_le_20",
    "pulsar_storage_write_latency_le_50",
    "pulsar_storage_write_latency_le_100",
    "pulsar_storage_write_latency_le_200",
    "pulsar_storage_write_latency_le_1000",
    "pulsar_storage_write_latency_le_overflow",
    "pulsar_storage_write_latency_count",
    "pulsar_storage_write_latency_sum",
)
SUBSCRIPTION_SERIES = (
    "pulsar_subscription_back_log",
    "pulsar_subscription_unacked_messages",
    "pulsar_subscription_msg_rate_out",
    "pulsar_subscription_msg_throughput_out",
    "pulsar_subscription_msg_rate_redeliver",
    "pulsar_subscription_delayed",
    "pulsar_subscription_consumers_count",
)
ML_SERIES = (
    "pulsar_ml_AddEntryMessagesRate",
    "pulsar_ml_AddEntryBytesRate",
    "pulsar_ml_StoredMessagesSize",
    "pulsar_ml_NumberOfMessagesInBacklog",
)


def scrape(admin: Admin) -> str:
    with urllib.request.urlopen(admin.url + "/metrics", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        return str(resp.read().decode())


def test_pulsar_names_types_labels_and_rates(
    broker: InProcessBroker, client: pulsar.Client, admin: Admin
) -> None:
    topic = f"persistent://public/default/metrics-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, negative_ack_redelivery_delay_ms=100
    )
    producer = client.create_producer(topic, batching_enabled=False)
    scrape(admin)  # the first scrape is the rates' baseline
    for i in range(20):
        producer.send(f"m{i}".encode())
    for _ in range(5):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.negative_acknowledge(consumer.receive(timeout_millis=10_000))
    labels = {"cluster": "standalone", "namespace": "public/default", "topic": topic}
    text = ""

    def rates_seen() -> bool:
        nonlocal text
        text = scrape(admin)
        return (sample(text, "pulsar_rate_in", **labels) or 0) > 0 and (
            sample(text, "pulsar_throughput_out", **labels) or 0
        ) > 0

    wait_until(rates_seen, 30, "pulsar_rate_in and pulsar_throughput_out above 0")
    fams = families(text)
    for name in TOPIC_SERIES:
        assert name in fams, name
        assert (
            sample(text, name + ("_total" if fams[name].type == "counter" else ""), **labels)
            is not None
        ), name
    for name in (*TOPIC_SERIES, *SUBSCRIPTION_SERIES, *ML_SERIES):
        assert fams[name].documentation, f"{name} has no # HELP"
    assert fams["pulsar_in_messages"].type == "counter"
    assert fams["pulsar_rate_in"].type == "gauge"
    assert sample(text, "pulsar_in_messages_total", **labels) == 20
    assert sample(text, "pulsar_producers_count", **labels) == 1
    assert sample(text, "pulsar_consumers_count", **labels) == 1
    sub = {**labels, "subscription": "sub"}
    for name in SUBSCRIPTION_SERIES:
        assert sample(text, name, **sub) is not None, name
    assert sample(text, "pulsar_subscription_back_log", **sub) == 15
    assert sample(text, "pulsar_msg_backlog", **labels) == 15
    written = sample(text, "pulsar_storage_write_latency_count", **labels)
    assert written is not None and written >= 1
    buckets = sum(
        sample(text, f"pulsar_storage_write_latency_le_{b}", **labels) or 0
        for b in ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000", "overflow")
    )
    assert buckets == written
    assert (sample(text, "pulsar_storage_size", **labels) or 0) > 0
    ns = {"cluster": "standalone", "namespace": "public/default"}
    for name in ML_SERIES:
        assert sample(text, name, **ns) is not None, name
    assert sample(text, "pulsar_ml_StoredMessagesSize", **ns) == sample(
        text, "pulsar_storage_size", **labels
    )
    assert sample(text, "pulsar_broker_topics_count", cluster="standalone") == 1
    assert "process_cpu_seconds" in fams
    # the entry cache and the read-ahead budget, broker-wide (this broker's memory storage
    # has neither: zeros; their values: tests/unit/ledger/test_ledger_read_ahead.py)
    for name in (
        "pulsar_ml_cache_used_size",
        "magnetar_ml_read_ahead_held_bytes",
        "magnetar_ml_read_ahead_max_bytes",
        "magnetar_ml_read_ahead_refused_total",
        "magnetar_ml_ledgers_given_up_total",
        "magnetar_ml_adds_moved_total",
    ):
        assert sample(text, name, cluster="standalone") is not None, name

    def redelivery_seen() -> bool:
        nonlocal text
        text = scrape(admin)
        return (sample(text, "pulsar_subscription_msg_rate_redeliver", **sub) or 0) > 0

    wait_until(redelivery_seen, 30, "the negative ack shows as a redelivery rate")
    producer.close()
    consumer.close()


class TestNamespaceLevel:
    @pytest.fixture
    def broker(self) -> Iterator[InProcessBroker]:
        b = InProcessBroker(expose_topic_level_metrics_in_prometheus=False).start()
        try:
            yield b
        finally:
            b.stop()

    def test_topic_series_are_summed_per_namespace(
        self, broker: InProcessBroker, client: pulsar.Client, admin: Admin
    ) -> None:
        for name in ("a", "b"):
            producer = client.create_producer(f"persistent://public/default/ns-level-{name}")
            for _ in range(3):
                producer.send(b"x")
            producer.close()
        text = scrape(admin)
        ns = {"cluster": "standalone", "namespace": "public/default"}
        assert sample(text, "pulsar_in_messages_total", **ns) == 6
        for family in families(text).values():
            for s in family.samples:  # no series names a topic or a subscription
                assert "topic" not in s.labels, s
                assert "subscription" not in s.labels, s
