"""Bundle split: which bundles are too hot or too big, and where to cut them.

Owns: the split thresholds (Pulsar's ``loadBalancerNamespaceBundleMax{Topics,Sessions,MsgRate,
BandwidthMbytes}`` and ``loadBalancerNamespaceMaximumBundles``), the choice of bundles to
split in one round (hottest first, at most ``max_splits_per_round``, never past a namespace's
maximum), and the four split algorithms of Pulsar: ``range_equally_divide``,
``topic_count_equally_divide``, ``specified_positions_divide``, ``flow_or_qps_equally_divide``.
Each algorithm returns the new boundaries strictly inside the bundle's range.
Pure: no I/O; the caller applies boundaries to the namespace (``bundles.NamespaceBundles``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from magnetar.broker.loadbalance.load_data import BundleStats
from magnetar.broker.namespace.bundles import BundleRange

MB = 1024 * 1024


class SplitAlgorithm(Enum):
    RANGE_EQUALLY_DIVIDE = "range_equally_divide"
    TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
    SPECIFIED_POSITIONS_DIVIDE = "specified_positions_divide"
    FLOW_OR_QPS_EQUALLY_DIVIDE = "flow_or_qps_equally_divide"

    @classmethod
    def parse(cls, name: str) -> SplitAlgorithm:
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(a.value for a in cls)
            raise SplitError(f"unknown split algorithm {name!r} (one of: {known})") from None


class SplitError(ValueError):
    """A bundle cannot be split the way asked (too small, bad positions, unknown algorithm)."""


@dataclass(frozen=True, slots=True)
class SplitThresholds:
    max_topics: int = 1000  # loadBalancerNamespaceBundleMaxTopics
    max_sessions: int = 1000  # loadBalancerNamespaceBundleMaxSessions (<= 0: no limit)
    max_msg_rate: float = 30_000  # loadBalancerNamespaceBundleMaxMsgRate (in + out)
    max_bandwidth_mbytes: float = 100  # loadBalancerNamespaceBundleMaxBandwidthMbytes
    max_bundles: int = 128  # loadBalancerNamespaceMaximumBundles
    max_splits_per_round: int = 10
    flow_or_qps_difference_threshold_percent: float = 10.0
    """flowOrQpsDifferenceThresholdPercentage"""


def split_reason(stats: BundleStats, t: SplitThresholds) -> str | None:
    """Why a bundle should split, or None. A bundle with fewer than two topics never splits
    (both halves would not carry load)."""
    if stats.topics < 2:
        return None
    if stats.topics > t.max_topics:
        return f"topics {stats.topics} > {t.max_topics}"
    if t.max_sessions > 0 and stats.sessions > t.max_sessions:
        return f"sessions {stats.sessions} > {t.max_sessions}"
    if stats.msg_rate > t.max_msg_rate:
        return f"msg rate {stats.msg_rate:.0f}/s > {t.max_msg_rate:.0f}/s"
    if stats.throughput > t.max_bandwidth_mbytes * MB:
        return f"bandwidth {stats.throughput / MB:.1f} MB/s > {t.max_bandwidth_mbytes} MB/s"
    return None


def namespace_of(bundle: str) -> str:
    """``tenant/ns`` of a bundle key ``tenant/ns/0xLOWER_0xUPPER``."""
    return bundle.rsplit("/", 1)[0]


def bundles_to_split(
    stats: Mapping[str, BundleStats],
    bundle_counts: Mapping[str, int],
    t: SplitThresholds,
) -> list[tuple[str, str]]:
    """(bundle, reason) of the bundles to split this round, hottest (msg rate) first; a
    namespace never passes ``max_bundles`` (each split adds one)."""
    over = []
    for bundle, s in stats.items():
        reason = split_reason(s, t)
        if reason is not None:
            over.append((s.msg_rate, s.throughput, bundle, reason))
    over.sort(reverse=True)
    counts = dict(bundle_counts)
    chosen: list[tuple[str, str]] = []
    for _, _, bundle, reason in over:
        if len(chosen) >= t.max_splits_per_round:
            break
        ns = namespace_of(bundle)
        if counts.get(ns, 1) >= t.max_bundles:
            continue
        counts[ns] = counts.get(ns, 1) + 1
        chosen.append((bundle, reason))
    return chosen


@dataclass(frozen=True, slots=True)
class TopicLoad:
    """A topic of the bundle being split: its hash and its rates (for the flow algorithm)."""

    hash: int
    msg_rate: float = 0.0
    throughput: float = 0.0


def _inside(bundle: BundleRange, points: Sequence[int]) -> list[int]:
    return sorted({p for p in points if bundle.lower < p < bundle.upper})


def split_boundaries(
    algorithm: SplitAlgorithm,
    bundle: BundleRange,
    *,
    topics: Sequence[TopicLoad] = (),
    positions: Sequence[int] = (),
    thresholds: SplitThresholds = SplitThresholds(),
) -> list[int]:
    """New boundaries strictly inside ``bundle``. Raises ``SplitError`` when it cannot be
    split that way."""
    if bundle.upper - bundle.lower <= 1:
        raise SplitError(f"bundle {bundle} is too small to split")
    if algorithm is SplitAlgorithm.RANGE_EQUALLY_DIVIDE:
        return [bundle.lower + (bundle.upper - bundle.lower) // 2]
    if algorithm is SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE:
        inside = _inside(bundle, positions)
        if not inside:
            raise SplitError(
                f"split positions must lie inside {bundle}, its ends excluded "
                f"(given: {', '.join(hex(p) for p in positions) or 'none'})"
            )
        return inside
    ordered = sorted((t for t in topics if bundle.contains(t.hash)), key=lambda t: t.hash)
    if algorithm is SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE:
        hashes = sorted({t.hash for t in ordered})
        if len(hashes) < 2:
            raise SplitError(f"bundle {bundle} has fewer than two distinct topic hashes")
        mid = len(hashes) // 2
        return _inside(bundle, [(hashes[mid - 1] + hashes[mid]) // 2 + 1])
    return _flow_or_qps(bundle, ordered, thresholds)


def _flow_or_qps(
    bundle: BundleRange, ordered: Sequence[TopicLoad], t: SplitThresholds
) -> list[int]:
    """Walk topics in hash order, cutting before the topic that would take the running msg
    rate or throughput past the bundle maximum (Pulsar's flow_or_qps_equally_divide); a
    bundle not over its maxima by the difference threshold is not split."""
    if len(ordered) < 2:
        raise SplitError(f"bundle {bundle} has fewer than two topics")
    margin = 1 + t.flow_or_qps_difference_threshold_percent / 100
    rate_max = t.max_msg_rate
    bytes_max = t.max_bandwidth_mbytes * MB
    total_rate = sum(x.msg_rate for x in ordered)
    total_bytes = sum(x.throughput for x in ordered)
    if total_rate < rate_max * margin and total_bytes < bytes_max * margin:
        raise SplitError(f"bundle {bundle} is not over its msg-rate or bandwidth maximum")
    cuts: list[int] = []
    rate = bytes_ = 0.0
    previous: TopicLoad | None = None
    for topic in ordered:
        over = rate + topic.msg_rate > rate_max or bytes_ + topic.throughput > bytes_max
        if over and previous is not None and previous.hash != topic.hash and rate + bytes_ > 0:
            cuts.append((previous.hash + topic.hash) // 2 + 1)
            rate = bytes_ = 0.0
        rate += topic.msg_rate
        bytes_ += topic.throughput
        previous = topic
    inside = _inside(bundle, cuts)
    if not inside:
        raise SplitError(f"bundle {bundle}: one topic carries the load, nothing to divide")
    return inside


__all__ = [
    "SplitAlgorithm",
    "SplitError",
    "SplitThresholds",
    "TopicLoad",
    "bundles_to_split",
    "namespace_of",
    "split_boundaries",
    "split_reason",
]
