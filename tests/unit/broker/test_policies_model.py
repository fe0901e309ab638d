"""Pure parts of the message lifecycle policies: resolution (broker default -> namespace),
the REST table's validation, and the token buckets, on a virtual clock."""

from __future__ import annotations

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.model import (
    NAMESPACE_POLICIES,
    BacklogQuotaType,
    PolicyError,
    Rate,
    RetentionPolicy,
    remove_backlog_quota,
    resolve_policies,
    set_backlog_quota,
)
from magnetar.broker.policies.rate_limit import RateLimiter, TokenBucket
from magnetar.clock import VirtualClock


def test_broker_defaults_when_the_namespace_has_no_policies() -> None:
    cfg = BrokerConfig(
        ttl_duration_default_in_seconds=30,
        default_retention_time_in_minutes=5,
        default_retention_size_in_mb=-1,
        max_producers_per_topic=7,
        backlog_quota_default_limit_bytes=1000,
        broker_deduplication_enabled=True,
    )
    p = resolve_policies(cfg, {})
    assert p.message_ttl_s == 30
    assert (p.retention_time_ms, p.retention_size_bytes) == (300_000, -1)
    assert p.max_producers == 7
    assert p.deduplication is True
    q = p.quota(BacklogQuotaType.DESTINATION_STORAGE)
    assert q is not None and q.limit_size == 1000
    assert q.policy is RetentionPolicy.PRODUCER_REQUEST_HOLD
    assert p.quota(BacklogQuotaType.MESSAGE_AGE) is None
    assert not p.publish_rate.enabled


def test_namespace_policies_override_the_broker_defaults() -> None:
    cfg = BrokerConfig(ttl_duration_default_in_seconds=30, broker_deduplication_enabled=True)
    ns = {
        "message_ttl_in_seconds": 0,  # 0 is a value, not "unset"
        "retention_policies": {"retentionTimeInMinutes": -1, "retentionSizeInMB": 10},
        "backlog_quota_map": {
            "message_age": {"limitSize": -1, "limitTime": 60, "policy": "producer_exception"}
        },
        "deduplicationEnabled": False,
        "max_unacked_messages_per_consumer": 3,
        "delayed_delivery_policies": {"active": False, "tickTime": 100},
        "publishMaxMessageRate": {
            "standalone": {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1},
            "other": {"publishThrottlingRateInMsg": 1, "publishThrottlingRateInByte": -1},
        },
    }
    p = resolve_policies(cfg, ns)
    assert p.message_ttl_s == 0
    assert (p.retention_time_ms, p.retention_size_bytes) == (-1, 10 << 20)
    q = p.quota(BacklogQuotaType.MESSAGE_AGE)
    assert q is not None and q.limit_time_s == 60
    assert q.policy is RetentionPolicy.PRODUCER_EXCEPTION
    assert p.deduplication is False
    assert p.max_unacked_per_consumer == 3
    assert (p.delayed_delivery, p.delayed_delivery_tick_ms) == (False, 100)
    assert p.publish_rate == Rate(5, -1, 1)  # this cluster's entry only


def test_rest_table_validates_bodies() -> None:
    ttl = NAMESPACE_POLICIES["messageTTL"]
    assert ttl.store(10, {}, "c") == {"message_ttl_in_seconds": 10}
    for bad in ("10", -1, True, None):
        with pytest.raises(PolicyError):
            ttl.store(bad, {}, "c")
    with pytest.raises(PolicyError):
        NAMESPACE_POLICIES["deduplication"].store(1, {}, "c")
    with pytest.raises(PolicyError):
        NAMESPACE_POLICIES["retention"].store({"retentionTimeInMinutes": -2}, {}, "c")
    rate = NAMESPACE_POLICIES["dispatchRate"]
    stored = rate.store({"dispatchThrottlingRateInMsg": 4}, {"topicDispatchRate": {"x": {}}}, "c")
    assert set(stored["topicDispatchRate"]) == {"x", "c"}
    assert rate.clear(stored, "c") == {"topicDispatchRate": {"x": {}}}
    changes = set_backlog_quota({}, {"limitSize": 5, "policy": "consumer_backlog_eviction"}, None)
    assert changes["backlog_quota_map"]["destination_storage"]["limitSize"] == 5
    assert remove_backlog_quota(changes, "destination_storage") == {"backlog_quota_map": {}}
    with pytest.raises(PolicyError):
        set_backlog_quota({}, {"limitSize": 5}, "nope")


def test_token_bucket_refills_over_virtual_time() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(10, 1.0, clock)
    assert bucket.available() == 10
    assert bucket.consume(10) is True
    assert bucket.consume(5) is False  # in debt: the caller pauses
    assert bucket.available() == 0
    assert bucket.delay_s() == pytest.approx(0.5)
    clock.advance(0.5)
    assert bucket.delay_s() == 0.0
    clock.advance(10)
    assert bucket.available() == 10  # capped at one period's worth


def test_rate_limiter_limits_by_messages_and_bytes() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(Rate(100, 1000, 1), clock)
    assert limiter.consume(1, 1500) is False  # bytes cross the limit first
    assert limiter.available_msgs() == 0
    assert limiter.delay_s() == pytest.approx(0.5)
    clock.advance(1)
    assert limiter.available_msgs() == 100  # refilled, capped at one period
    unlimited = RateLimiter(Rate(-1, -1, 1), clock)
    assert unlimited.consume(10**6, 10**9) is True
    assert unlimited.available_msgs() is None
    with pytest.raises(ValueError):
        TokenBucket(0, 1.0, clock)


def test_compaction_threshold_and_max_delivery_delay_resolve_and_validate() -> None:
    cfg = BrokerConfig()
    p = resolve_policies(cfg, {})
    assert (p.compaction_threshold_bytes, p.delayed_delivery_max_delay_ms) == (0, 0)
    ns: dict[str, object] = {}
    route = NAMESPACE_POLICIES["compactionThreshold"]
    ns.update(route.store(10 << 20, ns, "standalone"))
    assert route.show(ns, "standalone") == 10 << 20
    with pytest.raises(PolicyError):
        route.store(-1, ns, "standalone")
    delayed = NAMESPACE_POLICIES["delayedDelivery"]
    ns.update(
        delayed.store(
            {"active": True, "tickTime": 500, "maxDeliveryDelayInMillis": 60_000},
            ns,
            "standalone",
        )
    )
    with pytest.raises(PolicyError):
        delayed.store({"maxDeliveryDelayInMillis": -5}, ns, "standalone")
    p = resolve_policies(cfg, ns)
    assert p.compaction_threshold_bytes == 10 << 20
    assert (p.delayed_delivery_tick_ms, p.delayed_delivery_max_delay_ms) == (500, 60_000)
    ns.update(route.clear(ns, "standalone"))
    assert resolve_policies(cfg, ns).compaction_threshold_bytes == 0


def test_auto_topic_creation_override_resolves_over_the_broker_settings() -> None:
    from magnetar.broker.policies.model import resolve_auto_topic_creation

    cfg = BrokerConfig()
    base = resolve_auto_topic_creation(cfg, {})
    assert (base.allow, base.topic_type, base.default_num_partitions) == (
        True,
        "non-partitioned",
        1,
    )
    route = NAMESPACE_POLICIES["autoTopicCreation"]
    assert not route.topic_level
    stored = route.store({"allowAutoTopicCreation": False}, {}, "c")
    assert stored == {"autoTopicCreationOverride": {"allowAutoTopicCreation": False}}
    assert resolve_auto_topic_creation(cfg, stored).allow is False
    stored = route.store(
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3},
        {},
        "c",
    )
    got = resolve_auto_topic_creation(cfg, stored)
    assert (got.allow, got.topic_type, got.default_num_partitions) == (True, "partitioned", 3)
    assert route.clear(stored, "c") == {"autoTopicCreationOverride": None}
    for bad in (
        None,
        {"allowAutoTopicCreation": 1},
        {"allowAutoTopicCreation": True},
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": -1},
        {"allowAutoTopicCreation": True, "topicType": "non-partitioned", "defaultNumPartitions": 2},
    ):
        with pytest.raises(PolicyError):
            route.store(bad, {}, "c")
    from magnetar.broker.policies.documents import check_policies

    check_policies({"autoTopicCreationOverride": stored["autoTopicCreationOverride"]}, 128)
    for doc in (
        {"autoTopicCreationOverride": {"allowAutoTopicCreation": "yes"}},
        {"autoTopicCreationOverride": {"allowAutoTopicCreation": True, "topicType": "x"}},
        {"autoTopicCreationOverride": {"allowAutoTopicCreation": True, "defaultNumPartitions": -1}},
    ):
        with pytest.raises(PolicyError):
            check_policies(doc, 128)
