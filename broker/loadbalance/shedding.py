"""Load shedding: which bundles the leader unloads from which brokers, and when.

Owns: Pulsar's ``ThresholdShedder`` (a broker whose smoothed usage is above the cluster
average by more than ``threshold`` sheds its highest-throughput bundles until about 5 % below
that line) and ``OverloadShedder`` (a broker whose most used resource is over
``overloaded_threshold`` sheds its highest-throughput bundles), the grace period during which
a moved bundle is not moved again, and the minimum throughput worth moving.
A broker with a single bundle never sheds it (it would only move the problem).
Pure: no I/O, no clock (``now_ms`` is passed); the caller unloads what is returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from magnetar.broker.loadbalance.load_data import BrokerLoadReport, BundleData, ResourceWeights

MB = 1024 * 1024
ADDITIONAL_MARGIN_PERCENT = 5.0
"""Shed a little below the line, so a broker is not right back over it (Pulsar's
``ADDITIONAL_THRESHOLD_PERCENT_MARGIN``)."""


@dataclass(frozen=True, slots=True)
class SheddingConfig:
    threshold_percent: float = 10.0  # loadBalancerBrokerThresholdShedderPercentage
    overloaded_threshold_percent: float = 85.0
    """loadBalancerBrokerOverloadedThresholdPercentage"""
    history_fraction: float = 0.9  # loadBalancerHistoryResourcePercentage
    grace_period_ms: int = 30 * 60_000  # loadBalancerSheddingGracePeriodMinutes
    min_throughput_bytes: float = 10 * MB
    """loadBalancerBundleUnloadMinThroughputThreshold (MB): less is not worth a move"""
    weights: ResourceWeights = field(default_factory=ResourceWeights)


@dataclass(frozen=True, slots=True)
class Unload:
    broker: str
    bundle: str
    reason: str


def _by_throughput(
    report: BrokerLoadReport, bundle_data: Mapping[str, BundleData]
) -> list[tuple[float, str]]:
    """The broker's bundles, highest throughput first (short-term average when known)."""
    out = []
    for bundle, stats in report.bundles.items():
        data = bundle_data.get(bundle)
        out.append((data.short_term.throughput if data else stats.throughput, bundle))
    out.sort(key=lambda x: (-x[0], x[1]))
    return out


def _pick(
    broker: str,
    report: BrokerLoadReport,
    bundle_data: Mapping[str, BundleData],
    *,
    to_offload: float,
    recently_unloaded: Mapping[str, int],
    now_ms: int,
    grace_ms: int,
    reason: str,
) -> list[Unload]:
    """Bundles of ``broker`` adding up to ``to_offload`` bytes/s, at least one; never its last
    bundle; never one moved within the grace period."""
    ranked = _by_throughput(report, bundle_data)
    if len(ranked) < 2:
        return []
    chosen: list[Unload] = []
    marked = 0.0
    for throughput, bundle in ranked[:-1]:  # the least loaded one stays
        moved_at = recently_unloaded.get(bundle)
        if moved_at is not None and now_ms - moved_at < grace_ms:
            continue
        if chosen and marked >= to_offload:
            break
        chosen.append(Unload(broker, bundle, reason))
        marked += throughput
    return chosen


class ThresholdShedder:
    """Keeps each broker's usage history between rounds; ``find`` is one round."""

    def __init__(self, config: SheddingConfig) -> None:
        self.config = config
        self._usage: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"<ThresholdShedder brokers={len(self._usage)}>"

    def _update(self, reports: Mapping[str, BrokerLoadReport]) -> dict[str, float]:
        h = self.config.history_fraction
        usage = {}
        for broker, report in reports.items():
            current = report.max_resource_usage(self.config.weights)
            old = self._usage.get(broker)
            usage[broker] = current if old is None else old * h + current * (1 - h)
        self._usage = usage
        return usage

    def find(
        self,
        reports: Mapping[str, BrokerLoadReport],
        bundle_data: Mapping[str, BundleData],
        recently_unloaded: Mapping[str, int],
        now_ms: int,
    ) -> list[Unload]:
        usage = self._update(reports)
        if len(usage) < 2:
            return []
        average = sum(usage.values()) / len(usage)
        line = average + self.config.threshold_percent
        out: list[Unload] = []
        for broker in sorted(usage, key=lambda b: -usage[b]):
            if usage[broker] <= line:
                break
            report = reports[broker]
            fraction = (usage[broker] - line + ADDITIONAL_MARGIN_PERCENT) / 100.0
            to_offload = report.throughput * fraction
            if to_offload < self.config.min_throughput_bytes:
                continue
            reason = (
                f"usage {usage[broker]:.1f}% > average {average:.1f}% "
                f"+ {self.config.threshold_percent:g}%"
            )
            out += _pick(
                broker,
                report,
                bundle_data,
                to_offload=to_offload,
                recently_unloaded=recently_unloaded,
                now_ms=now_ms,
                grace_ms=self.config.grace_period_ms,
                reason=reason,
            )
        return out


class OverloadShedder:
    """Sheds from brokers whose most used resource is over the overload threshold."""

    def __init__(self, config: SheddingConfig) -> None:
        self.config = config

    def find(
        self,
        reports: Mapping[str, BrokerLoadReport],
        bundle_data: Mapping[str, BundleData],
        recently_unloaded: Mapping[str, int],
        now_ms: int,
    ) -> list[Unload]:
        out: list[Unload] = []
        limit = self.config.overloaded_threshold_percent
        for broker in sorted(reports):
            report = reports[broker]
            usage = report.max_resource_usage(self.config.weights)
            if usage <= limit:
                continue
            fraction = (usage - limit + ADDITIONAL_MARGIN_PERCENT) / 100.0
            to_offload = max(report.throughput * fraction, self.config.min_throughput_bytes)
            out += _pick(
                broker,
                report,
                bundle_data,
                to_offload=to_offload,
                recently_unloaded=recently_unloaded,
                now_ms=now_ms,
                grace_ms=self.config.grace_period_ms,
                reason=f"overloaded: {usage:.1f}% > {limit:g}%",
            )
        return out


def forget_expired(recently_unloaded: dict[str, int], now_ms: int, grace_ms: int) -> None:
    """Drop bundles whose grace period is over (keeps the map bounded)."""
    for bundle in [b for b, t in recently_unloaded.items() if now_ms - t >= grace_ms]:
        del recently_unloaded[bundle]


def strategy(name: str, config: SheddingConfig) -> ThresholdShedder | OverloadShedder:
    """The shedder named by Pulsar's ``loadBalancerLoadSheddingStrategy`` (its class name)."""
    simple = name.rsplit(".", 1)[-1]
    if simple == "ThresholdShedder":
        return ThresholdShedder(config)
    if simple == "OverloadShedder":
        return OverloadShedder(config)
    known: Iterable[str] = ("ThresholdShedder", "OverloadShedder")
    raise ValueError(f"unknown load shedding strategy {name!r} (one of: {', '.join(known)})")


__all__ = [
    "OverloadShedder",
    "SheddingConfig",
    "ThresholdShedder",
    "Unload",
    "forget_expired",
    "strategy",
]
