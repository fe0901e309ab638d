"""Load-manager simulation: the leader's placement, split and shedding decisions (the pure code
of ``broker/loadbalance``) driven over a large virtual cluster with skewed, shifting traffic.

Virtual time, seeded: the same arguments give the same figures. Each round (one virtual
minute by default) the brokers' load reports are computed from the bundles they own; the
leader then (1) splits bundles over the thresholds (children stay on their broker, and are
unloaded when ``--unload-split``), (2) runs the shedder, (3) places every unloaded bundle with
``LeastResourceUsageWithWeight``. Traffic: each bundle holds 1-20 topics with log-normal
rates; every ``--shift-minutes`` a random ``--shift-fraction`` of topics change their rate by
x0.1-x10 (hot spots move), with the cluster's total kept at ``--target-usage``.
A broker's usage is its bandwidth in percent of ``--broker-capacity-mbytes``; the cluster's
traffic is scaled so the average broker sits at ``--target-usage``.

Reports the max/average broker usage ratio over time (p50, p90, max after the first hour, and
at the end), bundles moved per hour, splits, and the leader's decision time per round
(p50, p99, max), as wall time and as this process's CPU time (the steadier figure on a
loaded machine). Target (issue 15): a round over 10,000 bundles in < 100 ms.

    .venv/bin/python bench/lb_sim.py --brokers 100 --namespaces 100 --bundles-per-namespace 100 \
        --hours 6 --seed 1
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field

from magnetar.broker.loadbalance import (
    BrokerLoadReport,
    BundleData,
    BundleStats,
    LeastResourceUsageWithWeight,
    PlacementConfig,
    ResourceUsage,
    SheddingConfig,
    SplitAlgorithm,
    SplitThresholds,
    ThresholdShedder,
    TopicLoad,
    bundles_to_split,
    split_boundaries,
)
from magnetar.broker.loadbalance.shedding import forget_expired
from magnetar.broker.namespace.bundles import FULL_UPPER, BundleRange

MESSAGE_BYTES = 1024


@dataclass(slots=True)
class Topic:
    hash: int
    rate: float  # bytes/s each way


@dataclass(slots=True)
class Bundle:
    key: str
    range: BundleRange
    topics: list[Topic] = field(default_factory=list)
    owner: str = ""

    @property
    def throughput(self) -> float:
        return sum(t.rate for t in self.topics)


def build(args: argparse.Namespace, rng: random.Random) -> dict[str, Bundle]:
    bundles: dict[str, Bundle] = {}
    step = (FULL_UPPER + 1) // args.bundles_per_namespace
    for ns in range(args.namespaces):
        for i in range(args.bundles_per_namespace):
            lo = i * step
            hi = FULL_UPPER if i == args.bundles_per_namespace - 1 else (i + 1) * step
            r = BundleRange(lo, hi)
            b = Bundle(f"tenant/ns{ns}/{r.name}", r)
            for _ in range(rng.randint(1, 20)):
                b.topics.append(Topic(rng.randrange(lo, hi), rng.lognormvariate(0, 1.5)))
            bundles[b.key] = b
    return bundles


def rescale(bundles: dict[str, Bundle], total: float) -> None:
    now = sum(b.throughput for b in bundles.values())
    k = total / now
    for b in bundles.values():
        for t in b.topics:
            t.rate *= k


def shift(bundles: dict[str, Bundle], rng: random.Random, fraction: float) -> None:
    for b in bundles.values():
        for t in b.topics:
            if rng.random() < fraction:
                t.rate *= math.exp(rng.uniform(math.log(0.1), math.log(10)))


def reports_of(
    bundles: dict[str, Bundle], brokers: list[str], capacity: float, now_ms: int
) -> dict[str, BrokerLoadReport]:
    per: dict[str, dict[str, BundleStats]] = {b: {} for b in brokers}
    for b in bundles.values():
        tp = b.throughput
        rate = tp / MESSAGE_BYTES
        per[b.owner][b.key] = BundleStats(rate, rate, tp, tp, topics=len(b.topics))
    out = {}
    for broker, stats in per.items():
        tp_in = sum(s.msg_throughput_in for s in stats.values())
        out[broker] = BrokerLoadReport(
            broker,
            bandwidth_in=ResourceUsage(tp_in, capacity),
            bandwidth_out=ResourceUsage(tp_in, capacity),
            msg_rate_in=tp_in / MESSAGE_BYTES,
            msg_rate_out=tp_in / MESSAGE_BYTES,
            msg_throughput_in=tp_in,
            msg_throughput_out=tp_in,
            num_topics=sum(s.topics for s in stats.values()),
            bundles=stats,
            last_update_ms=now_ms,
        )
    return out


def split_bundle(bundles: dict[str, Bundle], key: str, unload: bool) -> list[str]:
    """Apply a range_equally_divide split; the children (unloaded when asked) are returned."""
    b = bundles.pop(key)
    topics = [TopicLoad(t.hash, t.rate / MESSAGE_BYTES, t.rate) for t in b.topics]
    (cut,) = split_boundaries(SplitAlgorithm.RANGE_EQUALLY_DIVIDE, b.range, topics=topics)
    ns = key.rsplit("/", 1)[0]
    children = []
    for r in (BundleRange(b.range.lower, cut), BundleRange(cut, b.range.upper)):
        child = Bundle(f"{ns}/{r.name}", r, [t for t in b.topics if r.contains(t.hash)], b.owner)
        bundles[child.key] = child
        children.append(child.key)
    if unload:
        for c in children:
            bundles[c].owner = ""
    return children


def run(args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(args.seed)
    bundles = build(args, rng)
    brokers = [f"broker-{i:03d}" for i in range(args.brokers)]
    capacity = args.broker_capacity_mbytes * 1024 * 1024  # bytes/s each way
    total = len(brokers) * capacity * args.target_usage / 100
    rescale(bundles, total)
    placement = LeastResourceUsageWithWeight(PlacementConfig(), random.Random(args.seed + 1))
    shed_cfg = SheddingConfig(grace_period_ms=args.grace_minutes * 60_000, min_throughput_bytes=0.0)
    shedder = ThresholdShedder(shed_cfg)
    thresholds = SplitThresholds(
        max_msg_rate=args.split_msg_rate, max_bandwidth_mbytes=1e12, max_topics=1000
    )
    data: dict[str, BundleData] = {}
    recently: dict[str, int] = {}
    now_ms = 0
    # Initial placement: every bundle looked up once, in a burst (no report in between).
    reports = reports_of({}, brokers, capacity, now_ms)
    t0 = time.perf_counter()
    for key in sorted(bundles):
        bundles[key].owner = placement.select(key, reports, bundle_data=data)
    initial_placement_s = time.perf_counter() - t0
    round_ms: list[float] = []
    round_cpu_ms: list[float] = []
    ratios: list[tuple[int, float]] = []
    moved_total = 0
    splits_total = 0
    rounds = int(args.hours * 60 / args.round_minutes)
    for rnd in range(rounds):
        now_ms = (rnd + 1) * args.round_minutes * 60_000
        if rnd and rnd % max(1, args.shift_minutes // args.round_minutes) == 0:
            shift(bundles, rng, args.shift_fraction)
            rescale(bundles, total)
        reports = reports_of(bundles, brokers, capacity, now_ms)
        for rep in reports.values():
            for key, stats in rep.bundles.items():
                data.setdefault(key, BundleData()).update(stats)
        # -- the leader's round, timed --
        t0 = time.perf_counter()
        c0 = time.process_time()
        counts: dict[str, int] = {}
        for key in bundles:
            ns = key.rsplit("/", 1)[0]
            counts[ns] = counts.get(ns, 0) + 1
        all_stats = {k: s for rep in reports.values() for k, s in rep.bundles.items()}
        to_split = bundles_to_split(all_stats, counts, thresholds)
        unowned: list[str] = []
        for key, _reason in to_split:
            children = split_bundle(bundles, key, args.unload_split)
            data.pop(key, None)
            splits_total += 1
            if args.unload_split:
                unowned += children
        forget_expired(recently, now_ms, shed_cfg.grace_period_ms)
        for unload in shedder.find(reports, data, recently, now_ms):
            if unload.bundle in bundles:
                bundles[unload.bundle].owner = ""
                recently[unload.bundle] = now_ms
                unowned.append(unload.bundle)
        for key in unowned:
            bundles[key].owner = placement.select(key, reports, bundle_data=data)
        round_ms.append((time.perf_counter() - t0) * 1000)
        round_cpu_ms.append((time.process_time() - c0) * 1000)
        moved_total += len(unowned)
        usage = [r.max_resource_usage() for r in reports.values()]
        ratios.append((now_ms, max(usage) / (sum(usage) / len(usage))))
    settled = [r for t, r in ratios if t > 60 * 60_000] or [r for _, r in ratios]
    round_ms.sort()
    round_cpu_ms.sort()
    return {
        "brokers": args.brokers,
        "bundles_start": args.namespaces * args.bundles_per_namespace,
        "bundles_end": len(bundles),
        "hours": args.hours,
        "rounds": rounds,
        "max_avg_ratio_p50": round(statistics.median(settled), 3),
        "max_avg_ratio_p90": round(sorted(settled)[int(0.9 * (len(settled) - 1))], 3),
        "max_avg_ratio_max_after_1h": round(max(settled), 3),
        "max_avg_ratio_first_round": round(ratios[0][1], 3),
        "max_avg_ratio_end": round(ratios[-1][1], 3),
        "bundles_moved_per_hour": round(moved_total / args.hours, 1),
        "splits": splits_total,
        "round_ms_p50": round(round_ms[len(round_ms) // 2], 2),
        "round_ms_p99": round(round_ms[int(0.99 * (len(round_ms) - 1))], 2),
        "round_ms_max": round(round_ms[-1], 2),
        "round_cpu_ms_p50": round(round_cpu_ms[len(round_cpu_ms) // 2], 2),
        "round_cpu_ms_p99": round(round_cpu_ms[int(0.99 * (len(round_cpu_ms) - 1))], 2),
        "round_cpu_ms_max": round(round_cpu_ms[-1], 2),
        "initial_placement_ms_per_bundle": round(
            1000 * initial_placement_s / max(1, args.namespaces * args.bundles_per_namespace), 4
        ),
        "seed": args.seed,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", type=int, default=100)
    p.add_argument("--namespaces", type=int, default=100)
    p.add_argument("--bundles-per-namespace", type=int, default=100)
    p.add_argument("--hours", type=float, default=6)
    p.add_argument("--round-minutes", type=int, default=1)
    p.add_argument("--shift-minutes", type=int, default=30)
    p.add_argument("--shift-fraction", type=float, default=0.05)
    p.add_argument("--target-usage", type=float, default=50.0, help="average broker usage, %%")
    p.add_argument("--broker-capacity-mbytes", type=float, default=100.0, help="MB/s each way")
    p.add_argument("--grace-minutes", type=int, default=30)
    p.add_argument("--split-msg-rate", type=float, default=30_000)
    p.add_argument("--unload-split", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    print("command:", " ".join([".venv/bin/python", "bench/lb_sim.py", *sys.argv[1:]]))
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
