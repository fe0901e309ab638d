"""The load manager's pure decisions: reports, placement, split, shedding."""

from __future__ import annotations

import random

import pytest

from magnetar.broker.loadbalance import (
    BrokerLoadReport,
    BundleData,
    BundleStats,
    LeastResourceUsageWithWeight,
    NoBrokerAvailable,
    OverloadShedder,
    PlacementConfig,
    ReportPolicy,
    ResourceUsage,
    SheddingConfig,
    SplitAlgorithm,
    SplitError,
    SplitThresholds,
    ThresholdShedder,
    TopicLoad,
    bundles_to_split,
    needs_report,
    split_boundaries,
)
from magnetar.broker.loadbalance.shedding import forget_expired, strategy
from magnetar.broker.loadbalance.split import split_reason
from magnetar.broker.namespace.bundles import BundleRange

MB = 1024 * 1024


def report(
    name: str,
    cpu: float = 0.0,
    *,
    bundles: dict[str, float] | None = None,
    update_ms: int = 1,
    draining: bool = False,
) -> BrokerLoadReport:
    """A broker at ``cpu`` percent, its bundles carrying the given MB/s each way."""
    stats = {
        b: BundleStats(100, 100, mbs * MB, mbs * MB, topics=3) for b, mbs in (bundles or {}).items()
    }
    total = sum(s.msg_throughput_in for s in stats.values())
    return BrokerLoadReport(
        name,
        cpu=ResourceUsage(cpu, 100.0),
        msg_throughput_in=total,
        msg_throughput_out=total,
        bundles=stats,
        last_update_ms=update_ms,
        draining=draining,
    )


# -- reports --


def test_report_json_round_trip_keeps_every_figure() -> None:
    r = BrokerLoadReport(
        "b1:8080",
        "pulsar://b1:6650",
        "http://b1:8080",
        cpu=ResourceUsage(50, 200),
        memory=ResourceUsage(100, 1000),
        bandwidth_in=ResourceUsage(1, 10),
        bandwidth_out=ResourceUsage(2, 10),
        process_cpu=ResourceUsage(30, 200),
        msg_rate_in=10,
        msg_rate_out=20,
        msg_throughput_in=1000,
        msg_throughput_out=2000,
        num_topics=3,
        num_producers=1,
        num_consumers=2,
        bundles={"t/ns/0x00000000_0x40000000": BundleStats(1, 2, 3, 4, 5, 6, 7)},
        last_update_ms=123,
        draining=True,
    )
    assert BrokerLoadReport.decode(r.encode()) == r
    assert r.to_json()["numBundles"] == 1
    assert r.max_resource_usage() == 25.0  # cpu 25 %, memory 10 %, bandwidth 10 % and 20 %


@pytest.mark.parametrize("raw", [b"", b"[]", b'{"cpu": {}}', b'{"brokerId": "b", "cpu": 5}'])
def test_a_report_that_is_not_one_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not a load report"):
        BrokerLoadReport.decode(raw)


def test_time_average_weighs_samples_up_to_its_maximum() -> None:
    data = BundleData()
    assert data.long_term.msg_rate_in == 50  # a bundle never reported: Pulsar's default
    for _ in range(100):
        data.update(BundleStats(1000, 0, 0, 0))
    data.update(BundleStats(0, 0, 0, 0))
    assert data.short_term.msg_rate_in == pytest.approx(900)  # the mean of the last ten
    assert data.long_term.msg_rate_in == pytest.approx(1000 * 100 / 101)  # of all 101
    assert data.last == BundleStats(0, 0, 0, 0)


def test_report_is_rewritten_on_change_within_its_intervals() -> None:
    policy = ReportPolicy(threshold_percent=10, min_interval_ms=5_000, max_interval_ms=60_000)
    last = report("b", 20, update_ms=0)
    assert needs_report(None, last, 0, policy)
    assert not needs_report(last, report("b", 90), 4_999, policy)  # min interval first
    assert needs_report(last, report("b", 31), 5_000, policy)  # 11 points of CPU
    assert not needs_report(last, report("b", 29), 5_000, policy)
    assert needs_report(last, report("b", 20), 60_000, policy)  # max interval
    moved = report("b", 20, bundles={"t/n/0x00000000_0xffffffff": 1})
    assert needs_report(last, moved, 5_000, policy)  # bundle set changed


# -- placement --


def test_placement_prefers_brokers_well_below_average() -> None:
    p = LeastResourceUsageWithWeight(PlacementConfig(), random.Random(1))
    reports = {"a": report("a", 80), "b": report("b", 10), "c": report("c", 60)}
    assert {p.select(f"t/n/{i}", reports) for i in range(5)} == {"b"}


def test_placement_spreads_a_burst_over_idle_brokers() -> None:
    p = LeastResourceUsageWithWeight(PlacementConfig(), random.Random(7))
    reports = {n: report(n, 0) for n in ("a", "b", "c")}
    chosen = [p.select(f"t/n/{i}", reports) for i in range(9)]
    assert sorted(chosen.count(n) for n in "abc") == [3, 3, 3]


def test_placement_never_chooses_draining_or_excluded_brokers() -> None:
    p = LeastResourceUsageWithWeight(PlacementConfig(), random.Random(3))
    reports = {"a": report("a", 0, draining=True), "b": report("b", 90), "c": report("c", 5)}
    assert {p.select(f"t/n/{i}", reports, candidates=["a", "b"]) for i in range(5)} == {"b"}
    with pytest.raises(NoBrokerAvailable):
        p.select("t/n/x", reports, candidates=["a"])
    with pytest.raises(NoBrokerAvailable):
        p.select("t/n/x", {})


def test_placement_smooths_usage_with_history() -> None:
    p = LeastResourceUsageWithWeight(PlacementConfig(history_fraction=0.9), random.Random(0))
    p.update({"a": report("a", 100, update_ms=1)})
    p.update({"a": report("a", 0, update_ms=2)})
    assert p.usage("a") == pytest.approx(90)
    p.update({"a": report("a", 0, update_ms=2)})  # the same report counts once
    assert p.usage("a") == pytest.approx(90)


# -- split --


def test_split_reasons_follow_every_threshold() -> None:
    t = SplitThresholds(max_topics=10, max_sessions=10, max_msg_rate=100, max_bandwidth_mbytes=1)
    assert split_reason(BundleStats(topics=11), t) is not None
    assert split_reason(BundleStats(topics=2, producer_count=6, consumer_count=5), t) is not None
    assert split_reason(BundleStats(60, 50, topics=2), t) is not None
    assert split_reason(BundleStats(0, 0, MB, 1, topics=2), t) is not None
    assert split_reason(BundleStats(50, 49, 1, 1, topics=10), t) is None
    assert split_reason(BundleStats(10**6, 10**6, topics=1), t) is None  # one topic: never


def test_bundles_to_split_hottest_first_within_namespace_and_round_limits() -> None:
    t = SplitThresholds(max_msg_rate=100, max_bundles=3, max_splits_per_round=2)
    stats = {
        "t/a/0x00000000_0x80000000": BundleStats(500, 0, topics=2),
        "t/a/0x80000000_0xffffffff": BundleStats(900, 0, topics=2),
        "t/b/0x00000000_0xffffffff": BundleStats(700, 0, topics=2),
        "t/c/0x00000000_0xffffffff": BundleStats(50, 0, topics=2),
    }
    chosen = bundles_to_split(stats, {"t/a": 2, "t/b": 1}, t)
    assert [b for b, _ in chosen] == ["t/a/0x80000000_0xffffffff", "t/b/0x00000000_0xffffffff"]
    # t/a is at its maximum once one more split is planned
    chosen = bundles_to_split(
        stats, {"t/a": 2, "t/b": 3}, SplitThresholds(max_msg_rate=100, max_bundles=3)
    )
    assert [b for b, _ in chosen] == ["t/a/0x80000000_0xffffffff"]


FULL = BundleRange(0, 0xFFFFFFFF)


def test_range_equally_divide_cuts_at_the_midpoint() -> None:
    assert split_boundaries(SplitAlgorithm.RANGE_EQUALLY_DIVIDE, BundleRange(0, 100)) == [50]
    with pytest.raises(SplitError, match="too small"):
        split_boundaries(SplitAlgorithm.RANGE_EQUALLY_DIVIDE, BundleRange(7, 8))


def test_topic_count_equally_divide_leaves_half_the_topics_each_side() -> None:
    topics = [TopicLoad(h) for h in (10, 20, 30, 40, 50, 60)]
    (cut,) = split_boundaries(SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE, FULL, topics=topics)
    assert 30 < cut <= 40
    assert sum(t.hash < cut for t in topics) == 3
    with pytest.raises(SplitError):
        split_boundaries(SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE, FULL, topics=topics[:1])


def test_specified_positions_must_lie_inside_the_bundle() -> None:
    b = BundleRange(100, 200)
    assert split_boundaries(
        SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE, b, positions=[150, 120, 100, 250, 150]
    ) == [120, 150]
    with pytest.raises(SplitError, match="must lie inside"):
        split_boundaries(SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE, b, positions=[100, 200])


def test_flow_or_qps_divides_by_accumulated_load() -> None:
    t = SplitThresholds(max_msg_rate=100, max_bandwidth_mbytes=1000)
    topics = [TopicLoad(h * 10, msg_rate=40) for h in range(1, 9)]  # 320 msg/s in all
    cuts = split_boundaries(
        SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE, FULL, topics=topics, thresholds=t
    )
    parts = [
        sum(1 for x in topics if lo <= x.hash < hi)
        for lo, hi in zip([0, *cuts], [*cuts, 2**32], strict=True)
    ]
    assert all(40 * n <= 100 for n in parts) and sum(parts) == 8
    with pytest.raises(SplitError, match="not over"):
        split_boundaries(
            SplitAlgorithm.FLOW_OR_QPS_EQUALLY_DIVIDE, FULL, topics=topics[:2], thresholds=t
        )


def test_unknown_algorithm_names_the_known_ones() -> None:
    with pytest.raises(SplitError, match="range_equally_divide"):
        SplitAlgorithm.parse("halves")


# -- shedding --


def test_threshold_shedder_unloads_only_the_broker_above_average_plus_threshold() -> None:
    # Pulsar's example: 40 %, 10 %, 10 % -> average 20 %: only the first (> 30 %) sheds.
    cfg = SheddingConfig(min_throughput_bytes=0)
    reports = {
        "b1": report("b1", 40, bundles={"t/n/a": 30, "t/n/b": 20, "t/n/c": 10}),
        "b2": report("b2", 10, bundles={"t/n/d": 10, "t/n/e": 5}),
        "b3": report("b3", 10, bundles={"t/n/f": 10, "t/n/g": 5}),
    }
    unloads = ThresholdShedder(cfg).find(reports, {}, {}, now_ms=0)
    assert [(u.broker, u.bundle) for u in unloads] == [("b1", "t/n/a")]


def test_threshold_shedder_respects_grace_period_minimum_and_last_bundle() -> None:
    cfg = SheddingConfig(min_throughput_bytes=0, grace_period_ms=1000)
    reports = {
        "b1": report("b1", 90, bundles={"t/n/a": 30, "t/n/b": 20, "t/n/c": 10}),
        "b2": report("b2", 0, bundles={"t/n/d": 1}),
    }
    unloads = ThresholdShedder(cfg).find(reports, {}, {"t/n/a": 500}, now_ms=1000)
    assert [u.bundle for u in unloads] == ["t/n/b"]  # a moved 500 ms ago
    assert ThresholdShedder(cfg).find(reports, {}, {"t/n/a": 0}, now_ms=1000)[0].bundle == "t/n/a"
    lone = {"b1": report("b1", 90, bundles={"t/n/a": 30}), "b2": report("b2", 0)}
    assert ThresholdShedder(cfg).find(lone, {}, {}, now_ms=0) == []
    big_min = SheddingConfig(min_throughput_bytes=10**12)
    assert ThresholdShedder(big_min).find(reports, {}, {}, now_ms=0) == []


def test_overload_shedder_sheds_only_from_overloaded_brokers() -> None:
    cfg = SheddingConfig(overloaded_threshold_percent=85, min_throughput_bytes=0)
    reports = {
        "b1": report("b1", 95, bundles={"t/n/a": 1, "t/n/b": 50}),
        "b2": report("b2", 80, bundles={"t/n/c": 1, "t/n/d": 50}),
    }
    unloads = OverloadShedder(cfg).find(reports, {}, {}, now_ms=0)
    assert [(u.broker, u.bundle) for u in unloads] == [("b1", "t/n/b")]


def test_strategy_by_pulsar_class_name_and_expiry_of_the_grace_map() -> None:
    cfg = SheddingConfig()
    assert isinstance(
        strategy("org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder", cfg),
        ThresholdShedder,
    )
    assert isinstance(strategy("OverloadShedder", cfg), OverloadShedder)
    with pytest.raises(ValueError, match="ThresholdShedder"):
        strategy("Nope", cfg)
    moved = {"a": 0, "b": 900}
    forget_expired(moved, now_ms=1000, grace_ms=500)
    assert moved == {"b": 900}
