"""Namespace policies (issue 5 §4) with the official client: each one set through the admin
REST API (Pulsar's paths and JSON shapes), applied live to loaded topics, and its effect
observed through ``import pulsar``.

The broker runs in-process with a ``VirtualClock`` (started at the real time, so publish
times stamped by the client are comparable): TTL and backlog-quota checks run when a test
calls ``PolicyManager.check_now()`` after moving the clock, never on wall-clock timers.
Retention is proven on real storage: ZooKeeper, a bookie process, and bytes of its entry
logs going down once consumed ledgers fall outside retention.
"""

from __future__ import annotations

import contextlib
import pathlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest
from support.admin import Admin
from support.broker import InProcessBroker
from support.waiting import wait_until

from magnetar.clock import VirtualClock

Shared = pulsar.ConsumerType.Shared
Earliest = pulsar.InitialPosition.Earliest
NS = "/admin/v2/namespaces/public/default"


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(start_ms=time.time_ns() // 1_000_000)


@pytest.fixture
def broker(clock: VirtualClock) -> Iterator[InProcessBroker]:
    b = InProcessBroker(clock=clock).start()
    try:
        yield b
    finally:
        b.stop()


def _topic(prefix: str = "p") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def _policies(broker: InProcessBroker, topic: str) -> Any:
    async def get() -> Any:
        assert broker.service is not None
        state = broker.service.policies._states.get(topic)
        return None if state is None else state.policies

    return broker.call(get)


def _applied(broker: InProcessBroker, topic: str, pred: Callable[[Any], bool]) -> None:
    wait_until(lambda: (p := _policies(broker, topic)) is not None and pred(p), what="policy")


def _check_now(broker: InProcessBroker) -> None:
    async def run() -> None:
        assert broker.service is not None
        await broker.service.policies.check_now()

    broker.call(run)


def _advance(broker: InProcessBroker, clock: VirtualClock, seconds: float) -> None:
    async def run() -> None:
        clock.advance(seconds)

    broker.call(run)


def _backlog(admin: Admin, topic: str, sub: str) -> int:
    local = topic.split("://", 1)[1]
    return int(admin.get(f"/admin/v2/persistent/{local}/stats")["subscriptions"][sub]["msgBacklog"])


# -- REST and storage ------------------------------------------------------------------------


def test_every_policy_rest_round_trip_with_pulsar_field_names(admin: Admin) -> None:
    cases: list[tuple[str, Any, str, Any]] = [
        ("messageTTL", 120, "message_ttl_in_seconds", 120),
        (
            "retention",
            {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
            "retention_policies",
            {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
        ),
        ("maxProducersPerTopic", 3, "max_producers_per_topic", 3),
        ("maxConsumersPerTopic", 4, "max_consumers_per_topic", 4),
        ("maxUnackedMessagesPerConsumer", 5, "max_unacked_messages_per_consumer", 5),
        ("maxUnackedMessagesPerSubscription", 6, "max_unacked_messages_per_subscription", 6),
        ("deduplication", True, "deduplicationEnabled", True),
        (
            "delayedDelivery",
            {"active": False, "tickTime": 500},
            "delayed_delivery_policies",
            {"active": False, "tickTime": 500},
        ),
    ]
    for name, body, field, stored in cases:
        admin.post(f"{NS}/{name}", body)
        assert admin.get(f"{NS}/{name}") == stored
        assert admin.get(NS)[field] == stored
    rate = {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1000}
    admin.post(f"{NS}/publishRate", rate)
    assert admin.get(f"{NS}/publishRate") == rate
    assert admin.get(NS)["publishMaxMessageRate"] == {"standalone": rate}
    dispatch = {
        "dispatchThrottlingRateInMsg": 7,
        "dispatchThrottlingRateInByte": -1,
        "ratePeriodInSecond": 1,
    }
    admin.post(f"{NS}/dispatchRate", dispatch)
    got = admin.get(f"{NS}/dispatchRate")
    assert {k: got[k] for k in dispatch} == dispatch
    assert "standalone" in admin.get(NS)["topicDispatchRate"]
    quota = {"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"}
    admin.post(f"{NS}/backlogQuota?backlogQuotaType=destination_storage", quota)
    age = {"limitSize": -1, "limitTime": 30, "policy": "consumer_backlog_eviction"}
    admin.post(f"{NS}/backlogQuota?backlogQuotaType=message_age", age)
    assert admin.get(f"{NS}/backlogQuotaMap") == {"destination_storage": quota, "message_age": age}
    assert admin.get(NS)["backlog_quota_map"]["message_age"] == age
    # errors as Pulsar answers them
    status, _ = admin.request("POST", f"{NS}/messageTTL", "soon")
    assert status == 400
    status, _ = admin.request("POST", f"{NS}/backlogQuota", {"limitSize": 1, "policy": "nope"})
    assert status == 400
    status, _ = admin.request("GET", "/admin/v2/namespaces/public/nope/messageTTL")
    assert status == 404
    # DELETE removes the field
    for name, _, field, _ in cases:
        assert admin.request("DELETE", f"{NS}/{name}")[0] == 204
        assert field not in admin.get(NS)
    admin.request("DELETE", f"{NS}/backlogQuota?backlogQuotaType=message_age")
    assert admin.get(f"{NS}/backlogQuotaMap") == {"destination_storage": quota}


# -- TTL ---------------------------------------------------------------------------------------


def test_message_ttl_expires_unacked_messages_and_applies_live(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client, clock: VirtualClock
) -> None:
    topic = _topic("ttl")
    client.subscribe(topic, "s", consumer_type=Shared).close()  # a durable backlog
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(b"m%d" % i)
    assert _backlog(admin, topic, "s") == 10
    _advance(broker, clock, 120)
    _check_now(broker)
    assert _backlog(admin, topic, "s") == 10  # no TTL yet
    admin.post(f"{NS}/messageTTL", 60)
    _applied(broker, topic, lambda p: p.message_ttl_s == 60)
    _check_now(broker)
    assert _backlog(admin, topic, "s") == 0  # all older than 60 s (virtual)
    for i in range(5):  # stamped with the real time: 120 s (virtual) old already
        producer.send(b"n%d" % i)
    admin.post(f"{NS}/messageTTL", 300)
    _applied(broker, topic, lambda p: p.message_ttl_s == 300)
    _check_now(broker)
    assert _backlog(admin, topic, "s") == 5  # younger than the new TTL: kept
    admin.request("DELETE", f"{NS}/messageTTL")
    _applied(broker, topic, lambda p: p.message_ttl_s == 0)
    _advance(broker, clock, 600)
    _check_now(broker)
    assert _backlog(admin, topic, "s") == 5  # TTL removed live: nothing expires
    consumer = client.subscribe(topic, "s", consumer_type=Shared)
    got = sorted(consumer.receive(5000).data() for _ in range(5))
    assert got == [b"n%d" % i for i in range(5)]  # the expired ones are never delivered


def test_message_ttl_never_expires_the_compaction_subscription(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client, clock: VirtualClock
) -> None:
    topic = _topic("ttl-compaction")
    local = topic.split("://", 1)[1]
    client.subscribe(topic, "s").close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"v1", partition_key="k")
    status, _ = admin.request("PUT", f"/admin/v2/persistent/{local}/compaction")
    assert status == 204
    wait_until(
        lambda: admin.get(f"/admin/v2/persistent/{local}/compaction")["status"] == "SUCCESS",
        what="compaction",
    )
    for i in range(4):  # not compacted yet: the __compaction cursor keeps them
        producer.send(b"v%d" % (i + 2), partition_key="k")
    assert _backlog(admin, topic, "__compaction") == 4
    admin.post(f"{NS}/messageTTL", 60)
    _applied(broker, topic, lambda p: p.message_ttl_s == 60)
    _advance(broker, clock, 120)
    _check_now(broker)
    assert _backlog(admin, topic, "s") == 0  # expired
    assert _backlog(admin, topic, "__compaction") == 4  # as Pulsar: TTL skips compaction


def test_topic_level_policies_override_the_namespace_live(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client, clock: VirtualClock
) -> None:
    a, b = _topic("tl-a"), _topic("tl-b")
    for t in (a, b):
        client.subscribe(t, "s").close()
        _fill(client, t, 5).close()
    admin.post(f"{NS}/messageTTL", 3600)
    path_a = "/admin/v2/persistent/" + a.split("://", 1)[1]
    admin.post(f"{path_a}/messageTTL", 60)
    assert admin.get(f"{path_a}/messageTTL") == 60
    _applied(broker, a, lambda p: p.message_ttl_s == 60)
    _applied(broker, b, lambda p: p.message_ttl_s == 3600)
    _advance(broker, clock, 120)
    _check_now(broker)
    assert (_backlog(admin, a, "s"), _backlog(admin, b, "s")) == (0, 5)
    # a topic-level cap, then removed: the namespace value applies again
    admin.post(f"{path_a}/maxProducersPerTopic", 1)
    _applied(broker, a, lambda p: p.max_producers == 1)
    p1 = client.create_producer(a)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(a)
    client.create_producer(b).close()  # not capped
    admin.request("DELETE", f"{path_a}/maxProducersPerTopic")
    _applied(broker, a, lambda p: p.max_producers == 0)
    client.create_producer(a).close()
    p1.close()
    status, _ = admin.request("POST", f"{path_a}/messageTTL", "x")
    assert status == 400


# -- backlog quotas ----------------------------------------------------------------------------


def _fill(client: pulsar.Client, topic: str, n: int, size: int = 100) -> pulsar.Producer:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(b"%05d" % i + b"x" * (size - 5))
    return producer


def test_backlog_quota_producer_exception(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client
) -> None:
    topic = _topic("bq-exc")
    client.subscribe(topic, "s").close()
    producer = _fill(client, topic, 20)
    admin.post(
        f"{NS}/backlogQuota",
        {"limitSize": 1000, "limitTime": -1, "policy": "producer_exception"},
    )
    _applied(broker, topic, lambda p: p.backlog_quotas)
    _check_now(broker)
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    with pytest.raises(pulsar.PulsarException):
        producer.send(
            b"late",
        )
    # raising the limit live lets producers in again
    admin.post(
        f"{NS}/backlogQuota",
        {"limitSize": 1 << 20, "limitTime": -1, "policy": "producer_exception"},
    )
    _applied(broker, topic, lambda p: p.backlog_quotas[0][1].limit_size == 1 << 20)
    _check_now(broker)
    client.create_producer(topic).send(b"ok")


def test_backlog_quota_producer_request_hold(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client, clock: VirtualClock
) -> None:
    topic = _topic("bq-hold")
    consumer = client.subscribe(topic, "s", consumer_type=Shared)
    producer = _fill(client, topic, 20)
    admin.post(
        f"{NS}/backlogQuota",
        {"limitSize": 1000, "limitTime": -1, "policy": "producer_request_hold"},
    )
    _applied(broker, topic, lambda p: p.backlog_quotas)
    _check_now(broker)
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
        client.create_producer(topic)
    receipts: list[Any] = []
    producer.send_async(b"held", lambda res, mid: receipts.append(res))

    def held() -> int:
        async def get() -> int:
            assert broker.service is not None
            return broker.service.policies.statistics().held_sends

        return int(broker.call(get))

    wait_until(lambda: held() == 1, what="send held")
    assert receipts == []
    for _ in range(20):
        consumer.acknowledge(consumer.receive(5000))
    wait_until(lambda: _backlog(admin, topic, "s") <= 1, what="acks")
    _advance(broker, clock, 1.0)  # the held topic's re-check: within quota, sends released
    wait_until(lambda: receipts == [pulsar.Result.Ok], what="held send stored")
    assert consumer.receive(5000).data() == b"held"


def test_backlog_quota_consumer_backlog_eviction(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client
) -> None:
    topic = _topic("bq-evict")
    client.subscribe(topic, "slow").close()
    producer = _fill(client, topic, 50)
    admin.post(
        f"{NS}/backlogQuota",
        {"limitSize": 1000, "limitTime": -1, "policy": "consumer_backlog_eviction"},
    )
    _applied(broker, topic, lambda p: p.backlog_quotas)
    local = topic.split("://", 1)[1]
    topic_stats = admin.get(f"/admin/v2/persistent/{local}/stats")
    assert topic_stats["backlogSize"] <= 1000  # evicted as soon as the quota was applied
    assert topic_stats["backlogQuotaLimitSize"] == 1000
    _check_now(broker)
    backlog = _backlog(admin, topic, "slow")
    assert backlog <= 10  # 1000 bytes of ~100-byte entries
    producer.send(b"still-accepted")  # eviction never blocks producers
    consumer = client.subscribe(topic, "slow", initial_position=Earliest)
    first = consumer.receive(5000).data()
    assert first[:5] >= b"%05d" % (50 - backlog)  # the oldest were skipped


def test_message_age_quota_evicts_on_the_periodic_check(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client, clock: VirtualClock
) -> None:
    topic = _topic("bq-age")
    client.subscribe(topic, "slow").close()
    _fill(client, topic, 10)
    admin.post(
        f"{NS}/backlogQuota?backlogQuotaType=message_age",
        {"limitSize": -1, "limitTime": 30, "policy": "consumer_backlog_eviction"},
    )
    _applied(broker, topic, lambda p: p.backlog_quotas)
    assert _backlog(admin, topic, "slow") == 10
    # no check_now here: the broker's own check (every 60 s of its clock) does it
    _advance(broker, clock, 61)
    wait_until(lambda: _backlog(admin, topic, "slow") == 0, what="periodic eviction")


# -- caps and limits ---------------------------------------------------------------------------


def test_max_producers_and_consumers_per_topic_live(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client
) -> None:
    topic = _topic("caps")
    p1 = client.create_producer(topic)
    c1 = client.subscribe(topic, "s", consumer_type=Shared)
    admin.post(f"{NS}/maxProducersPerTopic", 1)
    admin.post(f"{NS}/maxConsumersPerTopic", 1)
    _applied(broker, topic, lambda p: p.max_producers == 1 and p.max_consumers == 1)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=Shared)
    admin.post(f"{NS}/maxProducersPerTopic", 2)
    admin.request("DELETE", f"{NS}/maxConsumersPerTopic")
    _applied(broker, topic, lambda p: p.max_producers == 2 and p.max_consumers == 0)
    p2 = client.create_producer(topic)
    c2 = client.subscribe(topic, "s", consumer_type=Shared)
    p1.send(b"a")
    p2.send(b"b")
    got = []
    for c in (c1, c2):
        try:
            while True:
                got.append(c.receive(500).data())
        except pulsar.Timeout:
            pass
    assert sorted(got) == [b"a", b"b"]


def test_max_unacked_messages_per_consumer_live(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client
) -> None:
    topic = _topic("unacked")
    admin.post(f"{NS}/maxUnackedMessagesPerConsumer", 3)
    consumer = client.subscribe(topic, "s", consumer_type=Shared, receiver_queue_size=100)
    producer = _fill(client, topic, 10)
    got = [consumer.receive(5000) for _ in range(3)]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)  # blocked at 3 unacked
    admin.post(f"{NS}/maxUnackedMessagesPerConsumer", 100)
    _applied(broker, topic, lambda p: p.max_unacked_per_consumer == 100)
    for m in got:
        consumer.acknowledge(m)  # an ack lets dispatch look at the new limit
    rest = [consumer.receive(5000) for _ in range(7)]
    assert len({m.data() for m in got + rest}) == 10
    producer.close()


def test_deduplication_switched_on_live(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client
) -> None:
    topic = _topic("dedup")
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, producer_name="p1", batching_enabled=False)
    producer.send(b"a", sequence_id=5)
    producer.send(b"a-again", sequence_id=5)  # dedup off: stored twice
    admin.post(f"{NS}/deduplication", True)
    _applied(broker, topic, lambda p: p.deduplication)

    def last_sequence_id() -> int:
        async def get() -> int:
            assert broker.service is not None
            return broker.service.topics[topic].dedup.last_sequence_id("p1")

        return int(broker.call(get))

    wait_until(lambda: last_sequence_id() == 5, what="stored sequence ids restored")
    producer.send(b"a-third", sequence_id=5)  # stored before dedup was on: still a duplicate
    producer.send(b"b", sequence_id=6)
    producer.send(b"b-again", sequence_id=6)  # dedup on: dropped
    producer.send(b"c", sequence_id=7)
    got = [consumer.receive(5000).data() for _ in range(4)]
    assert got == [b"a", b"a-again", b"b", b"c"]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)


def test_delayed_delivery_switched_off_live(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client
) -> None:
    topic = _topic("delay")
    consumer = client.subscribe(topic, "s", consumer_type=Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"later", deliver_after=__import__("datetime").timedelta(hours=1))
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)  # held for an hour
    admin.post(f"{NS}/delayedDelivery", {"active": False, "tickTime": 1000})
    _applied(broker, topic, lambda p: not p.delayed_delivery)
    producer.send(b"now", deliver_after=__import__("datetime").timedelta(hours=1))
    assert consumer.receive(5000).data() == b"now"  # delivered at once when disabled


def test_max_delivery_delay_refuses_sends_delayed_beyond_it(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client
) -> None:
    from datetime import timedelta

    from magnetar.client import NotAllowedError
    from magnetar.client.sync import Client as MagnetarClient

    topic = _topic("maxdelay")
    consumer = client.subscribe(topic, "s", consumer_type=Shared)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=2000)
    producer.send(b"far", deliver_after=timedelta(hours=1))  # no cap yet: accepted
    admin.post(
        f"{NS}/delayedDelivery",
        {"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 60_000},
    )
    _applied(broker, topic, lambda p: p.delayed_delivery_max_delay_ms == 60_000)
    # Pulsar answers SEND_ERROR NotAllowedError, which the C++ core under the official client
    # answers by reconnecting and resending forever; we fail the one message instead
    with pytest.raises(pulsar.ChecksumError):
        producer.send(b"too-far", deliver_after=timedelta(hours=1))
    producer.send(b"soon", deliver_after=timedelta(seconds=30))  # within the cap: accepted
    producer.send(b"now")
    assert consumer.receive(5000).data() == b"now"
    # magnetar.client fails just that message with the broker's reason, as Java's does
    with MagnetarClient(broker.service_url) as ours:
        p2 = ours.create_producer(topic, batching_enabled=False)
        with pytest.raises(NotAllowedError, match="max allowed delivery delay"):
            p2.send(b"too-far", deliver_after=timedelta(hours=1))
        p2.send(b"after")
    assert consumer.receive(5000).data() == b"after"


# -- rate limits -------------------------------------------------------------------------------


def test_publish_rate_pauses_only_the_throttled_connection(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client, clock: VirtualClock
) -> None:
    topic = _topic("rate")
    other_topic = _topic("free")
    admin.post(
        f"{NS}/publishRate", {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1}
    )
    producer = client.create_producer(topic, batching_enabled=False)
    _applied(broker, topic, lambda p: p.publish_rate.msgs == 5)
    receipts: list[Any] = []
    # 800 KB of SENDs: more than one socket read, however busy the machine (the broker reads
    # at most one buffer of frames before the limiter pauses the connection)
    n = 200
    for i in range(n):
        producer.send_async(b"%04d" % i + b"r" * 4096, lambda res, mid: receipts.append(res))

    def stats() -> Any:
        async def get() -> Any:
            assert broker.service is not None
            return broker.service.policies.statistics()

        return broker.call(get)

    wait_until(lambda: stats().throttled_publishes >= 1, what="throttled")
    local = topic.split("://", 1)[1]
    assert admin.get(f"/admin/v2/persistent/{local}/stats")["publishRateLimitedTimes"] >= 1
    # another client's connection is not paused
    other = pulsar.Client(broker.service_url, operation_timeout_seconds=5, log_conf_file_path=None)
    try:
        other.create_producer(other_topic).send(b"free")
    finally:
        other.close()
    # the throttled connection reads nothing more until virtual time repays the debt

    def read_by_broker() -> int:
        async def get() -> int:
            assert broker.service is not None
            t = broker.service.topics[topic]
            return sum(p.msg_in for p in t.producers.producers.values())

        return broker.call(get)

    def reading() -> bool:
        """Whether the broker reads the throttled producer's socket (on the broker's loop)."""

        async def get() -> bool:
            assert broker.service is not None
            (cnx,) = [
                c
                for c in broker.service.connections
                if any(s.topic.full_name == topic for s in c.producers.sessions.values())
            ]
            assert cnx.transport is not None
            return bool(cnx.transport.is_reading())

        return broker.call(get)

    # every SEND read before the pause is answered (the rest wait unread in the socket)
    wait_until(lambda: len(receipts) == read_by_broker(), what="receipts of what was read")
    settled = len(receipts)
    assert settled < n
    late: list[Any] = []
    producer.send_async(b"late", lambda res, mid: late.append(res))
    # nothing more can arrive while virtual time stands still: the socket is not read, and
    # only the limiter's timer on the virtual clock resumes it (the loop is live: the other
    # client was served, and each check here is a round trip through the broker's loop)
    assert not reading()
    assert (len(receipts), late, read_by_broker()) == (settled, [], settled)
    assert not reading()

    def advanced(done: Callable[[], bool]) -> bool:
        _advance(broker, clock, 1)
        return done()

    wait_until(lambda: advanced(lambda: bool(late)), 10, "the late send", interval_s=0.01)
    assert late == [pulsar.Result.Ok]
    wait_until(lambda: advanced(lambda: len(receipts) == n), 10, "every receipt", interval_s=0.01)
    assert set(receipts) == {pulsar.Result.Ok}


# -- retention on real storage -----------------------------------------------------------------


def _entry_log_bytes(data_dir: pathlib.Path) -> int:
    """Bytes of the bookie's entry logs (where entries live once flushed from the journal)."""
    return sum(p.stat().st_size for p in (data_dir / "ledgers").glob("*.log") if p.is_file())


@contextlib.contextmanager
def _on_real_storage(
    zookeeper_server: Any,
    bookie_factory: Any,
    *,
    entries_per_ledger: int,
    bookie_args: list[str] | None = None,
    clock: VirtualClock | None = None,
    **managed_ledger: Any,
) -> Iterator[tuple[InProcessBroker, Any, Admin, pulsar.Client]]:
    """(broker, bookie, admin, client): a ZooKeeper-registered bookie process and an
    in-process broker whose managed ledgers (E=Qw=Qa=1, no minimum rollover time, more
    ``managed_ledger`` settings) roll every ``entries_per_ledger`` entries."""
    from support.ledger_cluster import chroot_url, wait_registered

    url = chroot_url(zookeeper_server.url)
    bookie = bookie_factory.start(metadata=url, extra_args=bookie_args or [])
    broker = InProcessBroker(
        metadata_url=url,
        clock=clock,
        managed_ledger={
            "ensemble_size": 1,
            "write_quorum": 1,
            "ack_quorum": 1,
            "min_ledger_rollover_time_ms": 0,
            "max_entries_per_ledger": entries_per_ledger,
            **managed_ledger,
        },
    ).start()
    service = broker.service
    assert service is not None
    broker.call(lambda: wait_registered(service.store, 1), timeout=35)
    admin = Admin(broker)
    client = pulsar.Client(
        broker.service_url, operation_timeout_seconds=10, log_conf_file_path=None
    )
    try:
        yield broker, bookie, admin, client
    finally:
        client.close()
        admin.close()
        broker.stop()


def _ledger_count(broker: InProcessBroker, topic: str) -> int:
    """Ledgers of the loaded topic's managed ledger."""

    async def get() -> int:
        assert broker.service is not None
        return len(broker.service.topics[topic].ledger.ml.ledgers.ids)

    return int(broker.call(get))


def test_retention_trims_and_bookie_disk_bytes_go_down(
    zookeeper_server: Any, bookie_factory: Any, tmp_path: pathlib.Path
) -> None:
    cfg = tmp_path / "bookie.yaml"
    cfg.write_text(
        "engine:\n  entry_log_size_max: 65536\n  checkpoint_interval_ms: 100\n"
        "  write_cache_bytes_max: 262144\n"
    )
    with _on_real_storage(
        zookeeper_server,
        bookie_factory,
        entries_per_ledger=20,
        bookie_args=["--gc-interval-s", "0.2", "--config", str(cfg)],
    ) as (broker, bookie, admin, client):
        admin.post(f"{NS}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
        topic = _topic("retention")
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(200):
            producer.send_async(b"%04d" % i + b"r" * 4000, None)
        producer.flush()
        for _ in range(200):
            consumer.acknowledge(consumer.receive(5000))
        _applied(broker, topic, lambda p: p.retention_time_minutes == -1)
        wait_until(lambda: _backlog(admin, topic, "s") == 0, what="acked")
        assert _ledger_count(broker, topic) >= 10  # consumed, but kept: infinite retention
        wait_until(lambda: _entry_log_bytes(bookie.data_dir) > 600_000, what="flushed")
        before = _entry_log_bytes(bookie.data_dir)
        admin.post(f"{NS}/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
        wait_until(lambda: _ledger_count(broker, topic) == 1, what="trimmed to the current ledger")
        wait_until(lambda: _entry_log_bytes(bookie.data_dir) < before // 4, timeout_s=20, what="GC")


def test_subscription_dispatch_rate_limits_delivery_until_time_passes(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client, clock: VirtualClock
) -> None:
    topic = _topic("drate")
    consumer = client.subscribe(topic, "s", consumer_type=Shared)
    admin.post(
        f"{NS}/subscriptionDispatchRate",
        {
            "dispatchThrottlingRateInMsg": 5,
            "dispatchThrottlingRateInByte": -1,
            "ratePeriodInSecond": 1,
        },
    )
    _applied(broker, topic, lambda p: p.subscription_dispatch_rate.msgs == 5)
    _fill(client, topic, 30)

    def dispatch() -> tuple[bool, int]:
        """(a round under way, messages dispatched) of the subscription, on the broker's loop."""

        async def get() -> tuple[bool, int]:
            assert broker.service is not None
            d = broker.service.topics[topic].subscriptions["s"].dispatcher
            assert d is not None
            return d.running, d.dispatched_messages

        return broker.call(get)

    # barrier: the dispatcher spent the bucket (5 messages) and stopped; its wake-up is on
    # the virtual clock, so what it sent is all the consumer gets while time stands still
    def spent() -> int:
        running, sent = dispatch()
        return sent if not running and sent >= 5 else 0

    sent = wait_until(spent, what="the bucket spent and dispatch idle")
    assert sent < 30  # the bucket's worth, not the backlog
    got = [consumer.receive(5000).data() for _ in range(sent)]
    assert dispatch() == (False, sent)  # nothing more went out

    def advanced() -> bool:
        _advance(broker, clock, 1)
        with contextlib.suppress(pulsar.Timeout):
            got.append(consumer.receive(200).data())
        return len(got) >= 30

    wait_until(advanced, 30, "every message once time passes", interval_s=0.01)
    assert sorted(got) == sorted(b"%05d" % i + b"x" * 95 for i in range(30))
    # removing the rate applies live: the next burst is not throttled
    admin.request("DELETE", f"{NS}/subscriptionDispatchRate")
    _applied(broker, topic, lambda p: not p.subscription_dispatch_rate.enabled)
    _fill(client, topic, 30)
    assert len([consumer.receive(5000) for _ in range(30)]) == 30


# -- retry-letter topics (§3) --------------------------------------------------------------
# pulsar-client 3.13 (Python) has no reconsume_later, so magnetar's client drives the retry
# path; the official client reads the retry topic to show what the broker stored.


def test_retry_topic_holds_reconsumed_messages_for_their_delay(
    broker: InProcessBroker, admin: Admin, client: pulsar.Client
) -> None:
    from magnetar.client import ConsumerDeadLetterPolicy, ConsumerType
    from magnetar.client import Timeout as OurTimeout
    from magnetar.client.sync import Client

    topic = _topic("retry")
    ours = Client(broker.service_url, operation_timeout_seconds=5)
    try:
        consumer = ours.subscribe(
            topic,
            "sub",
            consumer_type=ConsumerType.Shared,
            retry_enable=True,
            dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliver_count=3),
        )
        client.create_producer(topic).send(b"job")
        msg = consumer.receive(5000)
        consumer.reconsume_later(msg, 3_600_000)  # an hour
        # stored on <topic>-<sub>-RETRY as a delayed message with Pulsar's properties
        audit = client.subscribe(f"{topic}-sub-RETRY", "audit", initial_position=Earliest)
        stored = audit.receive(5000)
        assert stored.data() == b"job"
        props = stored.properties()
        assert props["RECONSUMETIMES"] == "1"
        assert props["DELAY_TIME"] == "3600000"
        assert props["REAL_TOPIC"] == topic
        with pytest.raises(OurTimeout):
            consumer.receive(500)  # held by the broker for its delay
        msg2 = client.create_producer(topic).send(b"job2")
        assert msg2 is not None
        got = consumer.receive(5000)
        assert got.data() == b"job2"
        consumer.reconsume_later(got, 50)  # a short delay comes back, counted
        again = consumer.receive(5000)
        assert again.data() == b"job2"
        assert again.properties()["RECONSUMETIMES"] == "1"
        consumer.acknowledge(again)
    finally:
        ours.close()


def test_retention_time_trims_an_idle_topic_at_the_periodic_check(
    zookeeper_server: Any, bookie_factory: Any, clock: VirtualClock
) -> None:
    """Consumed ledgers leave a time-based retention with time alone: nothing acks, rolls
    over or changes a policy after that, so only a periodic check can trim them — the
    broker's, every ``retention_check_interval_in_seconds`` (120 s, Pulsar's
    ``retentionCheckIntervalInSeconds``). The managed ledger's own timer is pushed out of
    the way and the broker's clock is virtual: the check runs when the test moves time."""
    with _on_real_storage(
        zookeeper_server,
        bookie_factory,
        entries_per_ledger=10,
        clock=clock,
        rollover_check_interval_ms=3_600_000,
    ) as (broker, _bookie, admin, client):
        admin.post(f"{NS}/retention", {"retentionTimeInMinutes": 1, "retentionSizeInMB": -1})
        topic = _topic("retention-time")
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        _applied(broker, topic, lambda p: p.retention_time_minutes == 1)
        for i in range(60):
            producer.send_async(b"%04d" % i, None)
        producer.flush()
        for _ in range(60):
            consumer.acknowledge(consumer.receive(5000))
        wait_until(lambda: _backlog(admin, topic, "s") == 0, what="acked")
        assert _ledger_count(broker, topic) >= 5, "consumed, closed under a minute ago: kept"
        # Two minutes pass with no traffic: the broker's retention check fires and trims.
        _advance(broker, clock, 121)
        wait_until(lambda: _ledger_count(broker, topic) == 1, what="trimmed to the current ledger")
