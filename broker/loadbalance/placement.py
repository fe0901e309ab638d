"""Placement: which broker gets an unowned bundle (Pulsar's ``LeastResourceUsageWithWeight``).

Owns: each broker's smoothed usage (``history x old + (1 - history) x current`` of its
weighted max resource usage), the estimate of bundles assigned since a broker's last report
(so a burst of lookups between two reports does not land on one broker), and the choice:
brokers at least ``threshold`` percentage points below the candidates' average usage are the
best; one of them is chosen at random (seeded); when none is, the least used broker.
Draining brokers and brokers not in ``candidates`` are never chosen.
Pure: no I/O, no clock; the caller passes reports and a seeded ``random.Random``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from magnetar.broker.loadbalance.load_data import (
    DEFAULT_BUNDLE_THROUGHPUT,
    BrokerLoadReport,
    BundleData,
    ResourceWeights,
)


class NoBrokerAvailable(Exception):
    """No broker may take a bundle (none registered, or all draining)."""


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    history_fraction: float = 0.9  # loadBalancerHistoryResourcePercentage
    average_difference_threshold_percent: float = 10.0
    """loadBalancerAverageResourceUsageDifferenceThresholdPercentage"""
    weights: ResourceWeights = field(default_factory=ResourceWeights)


class LeastResourceUsageWithWeight:
    """Chooses the broker for a bundle; remembers usage history and pending assignments."""

    def __init__(self, config: PlacementConfig, rng: random.Random) -> None:
        self.config = config
        self._rng = rng
        self._usage: dict[str, float] = {}
        self._seen_update: dict[str, int] = {}
        self._pending: dict[str, list[str]] = {}  # broker -> bundles placed since its report

    def __repr__(self) -> str:
        return f"<LeastResourceUsageWithWeight brokers={len(self._usage)}>"

    def usage(self, broker: str) -> float | None:
        return self._usage.get(broker)

    def update(self, reports: Mapping[str, BrokerLoadReport]) -> None:
        """Fold new reports into the smoothed usage (a report counts once, by its
        ``last_update_ms``); forget brokers without a report."""
        h = self.config.history_fraction
        for broker in list(self._usage):
            if broker not in reports:
                del self._usage[broker]
                self._seen_update.pop(broker, None)
                self._pending.pop(broker, None)
        for broker, report in reports.items():
            if self._seen_update.get(broker) == report.last_update_ms:
                continue
            self._seen_update[broker] = report.last_update_ms
            current = report.max_resource_usage(self.config.weights)
            old = self._usage.get(broker)
            self._usage[broker] = current if old is None else old * h + current * (1 - h)
            self._pending.pop(broker, None)  # the new report includes what was placed

    def _estimated(
        self, broker: str, report: BrokerLoadReport, bundle_data: Mapping[str, BundleData]
    ) -> float:
        usage = self._usage.get(broker, 0.0)
        pending = self._pending.get(broker)
        if not pending:
            return usage
        # Pending bundles add their share of the broker's throughput-based usage.
        per_byte = usage / report.throughput if report.throughput > 0 else 0.0
        extra = 0.0
        for bundle in pending:
            data = bundle_data.get(bundle)
            throughput = data.long_term.throughput if data else 2 * DEFAULT_BUNDLE_THROUGHPUT
            extra += throughput * per_byte if per_byte else 1.0
        return usage + extra

    def select(
        self,
        bundle: str,
        reports: Mapping[str, BrokerLoadReport],
        candidates: Iterable[str] | None = None,
        bundle_data: Mapping[str, BundleData] | None = None,
    ) -> str:
        """The broker for ``bundle``, noted as pending on it. Raises ``NoBrokerAvailable``."""
        self.update(reports)
        names = reports if candidates is None else candidates
        eligible = sorted(b for b in names if b in reports and not reports[b].draining)
        if not eligible:
            raise NoBrokerAvailable(f"no broker can own {bundle}")
        data = bundle_data or {}
        usage = {b: self._estimated(b, reports[b], data) for b in eligible}
        average = sum(usage.values()) / len(usage)
        threshold = self.config.average_difference_threshold_percent
        best = [b for b in eligible if usage[b] + threshold <= average]
        if best:
            chosen = self._rng.choice(best)
        else:
            low = min(usage.values())
            chosen = self._rng.choice([b for b in eligible if usage[b] == low])
        self._pending.setdefault(chosen, []).append(bundle)
        return chosen


__all__ = ["LeastResourceUsageWithWeight", "NoBrokerAvailable", "PlacementConfig"]
