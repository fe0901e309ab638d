"""Load figures the load manager decides on: per-bundle stats, their time averages, and one
broker's load report (Pulsar's ``NamespaceBundleStats``, ``TimeAverageMessageData``,
``BundleData`` and ``LocalBrokerData``), with their JSON in Pulsar's field names.

Owns: the records, the moving averages, the weighted "max resource usage" of a broker
(Pulsar's ``getMaxResourceUsageWithWeight``), and the rule deciding when a broker rewrites
its report (``needs_report``).
Pure: no I/O, no clock (times are passed in ms), no knowledge of topics or ZooKeeper.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BUNDLE_MSG_RATE = 50.0
"""A bundle never reported yet is assumed to carry this many msg/s each way (Pulsar's
``defaultMsgRate``), and ``DEFAULT_BUNDLE_THROUGHPUT`` bytes/s."""
DEFAULT_BUNDLE_THROUGHPUT = 50_000.0


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """``usage`` of ``limit`` (CPU in percent of one core x cores, memory and bandwidth in
    MB or Mbit/s as Pulsar reports them); ``limit <= 0`` means unknown."""

    usage: float = 0.0
    limit: float = 0.0

    def percent(self) -> float:
        return 0.0 if self.limit <= 0 else 100.0 * self.usage / self.limit

    def to_json(self) -> dict[str, float]:
        return {"usage": self.usage, "limit": self.limit}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> ResourceUsage:
        data = data or {}
        return cls(float(data.get("usage", 0.0)), float(data.get("limit", 0.0)))


@dataclass(frozen=True, slots=True)
class BundleStats:
    """One bundle's figures as its owner measured them over the last report interval."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0  # bytes/s
    msg_throughput_out: float = 0.0
    topics: int = 0
    producer_count: int = 0
    consumer_count: int = 0

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    @property
    def sessions(self) -> int:
        return self.producer_count + self.consumer_count

    def to_json(self) -> dict[str, Any]:
        return {
            "msgRateIn": self.msg_rate_in,
            "msgRateOut": self.msg_rate_out,
            "msgThroughputIn": self.msg_throughput_in,
            "msgThroughputOut": self.msg_throughput_out,
            "topics": self.topics,
            "producerCount": self.producer_count,
            "consumerCount": self.consumer_count,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BundleStats:
        return cls(
            float(data.get("msgRateIn", 0.0)),
            float(data.get("msgRateOut", 0.0)),
            float(data.get("msgThroughputIn", 0.0)),
            float(data.get("msgThroughputOut", 0.0)),
            int(data.get("topics", 0)),
            int(data.get("producerCount", 0)),
            int(data.get("consumerCount", 0)),
        )


@dataclass(slots=True)
class TimeAverage:
    """A moving average over at most ``max_samples`` samples (Pulsar's
    ``TimeAverageMessageData``): each new sample weighs 1/(n+1), n capped at the maximum."""

    max_samples: int
    num_samples: int = 0
    msg_rate_in: float = DEFAULT_BUNDLE_MSG_RATE
    msg_rate_out: float = DEFAULT_BUNDLE_MSG_RATE
    msg_throughput_in: float = DEFAULT_BUNDLE_THROUGHPUT
    msg_throughput_out: float = DEFAULT_BUNDLE_THROUGHPUT

    def update(self, stats: BundleStats) -> None:
        n = min(self.num_samples, self.max_samples - 1)
        w = 1.0 / (n + 1)
        self.msg_rate_in += (stats.msg_rate_in - self.msg_rate_in) * w
        self.msg_rate_out += (stats.msg_rate_out - self.msg_rate_out) * w
        self.msg_throughput_in += (stats.msg_throughput_in - self.msg_throughput_in) * w
        self.msg_throughput_out += (stats.msg_throughput_out - self.msg_throughput_out) * w
        self.num_samples = min(self.num_samples + 1, self.max_samples)

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out


SHORT_TERM_SAMPLES = 10
LONG_TERM_SAMPLES = 1000


@dataclass(slots=True)
class BundleData:
    """What the leader remembers of a bundle across reports and owners (Pulsar's
    ``BundleData``): short- and long-term averages and the latest stats."""

    short_term: TimeAverage = field(default_factory=lambda: TimeAverage(SHORT_TERM_SAMPLES))
    long_term: TimeAverage = field(default_factory=lambda: TimeAverage(LONG_TERM_SAMPLES))
    last: BundleStats = field(default_factory=BundleStats)

    def update(self, stats: BundleStats) -> None:
        self.short_term.update(stats)
        self.long_term.update(stats)
        self.last = stats


@dataclass(frozen=True, slots=True)
class ResourceWeights:
    """Weights of each resource in a broker's usage (Pulsar's
    ``loadBalancer{CPU,Memory,DirectMemory,BandwidthIn,BandwidthOut}ResourceWeight``)."""

    cpu: float = 1.0
    memory: float = 1.0
    bandwidth_in: float = 1.0
    bandwidth_out: float = 1.0


@dataclass(frozen=True, slots=True)
class BrokerLoadReport:
    """One broker's load report (Pulsar's ``LocalBrokerData``), written to
    ``/loadbalance/brokers/<broker-id>``."""

    broker_id: str
    pulsar_service_url: str = ""
    web_service_url: str = ""
    cpu: ResourceUsage = ResourceUsage()
    memory: ResourceUsage = ResourceUsage()
    bandwidth_in: ResourceUsage = ResourceUsage()
    bandwidth_out: ResourceUsage = ResourceUsage()
    process_cpu: ResourceUsage = ResourceUsage()
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    num_topics: int = 0
    num_producers: int = 0
    num_consumers: int = 0
    bundles: Mapping[str, BundleStats] = field(default_factory=dict)
    """Per-bundle stats, keyed ``tenant/namespace/0xLOWER_0xUPPER``."""
    last_update_ms: int = 0
    draining: bool = False
    """Set by a broker that is shutting down: never a placement candidate."""

    @property
    def num_bundles(self) -> int:
        return len(self.bundles)

    @property
    def throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    def max_resource_usage(self, weights: ResourceWeights = ResourceWeights()) -> float:
        """The most used resource, in percent, each scaled by its weight."""
        return max(
            self.cpu.percent() * weights.cpu,
            self.memory.percent() * weights.memory,
            self.bandwidth_in.percent() * weights.bandwidth_in,
            self.bandwidth_out.percent() * weights.bandwidth_out,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "pulsarServiceUrl": self.pulsar_service_url,
            "webServiceUrl": self.web_service_url,
            "cpu": self.cpu.to_json(),
            "memory": self.memory.to_json(),
            "bandwidthIn": self.bandwidth_in.to_json(),
            "bandwidthOut": self.bandwidth_out.to_json(),
            "processCpu": self.process_cpu.to_json(),
            "msgRateIn": self.msg_rate_in,
            "msgRateOut": self.msg_rate_out,
            "msgThroughputIn": self.msg_throughput_in,
            "msgThroughputOut": self.msg_throughput_out,
            "numTopics": self.num_topics,
            "numBundles": self.num_bundles,
            "numProducers": self.num_producers,
            "numConsumers": self.num_consumers,
            "bundles": sorted(self.bundles),
            "lastStats": {name: s.to_json() for name, s in sorted(self.bundles.items())},
            "lastUpdate": self.last_update_ms,
            "draining": self.draining,
        }

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> BrokerLoadReport:
        """Raises ``ValueError`` for a report that is not one."""
        try:
            data = json.loads(raw)
            return cls(
                broker_id=str(data["brokerId"]),
                pulsar_service_url=str(data.get("pulsarServiceUrl", "")),
                web_service_url=str(data.get("webServiceUrl", "")),
                cpu=ResourceUsage.from_json(data.get("cpu")),
                memory=ResourceUsage.from_json(data.get("memory")),
                bandwidth_in=ResourceUsage.from_json(data.get("bandwidthIn")),
                bandwidth_out=ResourceUsage.from_json(data.get("bandwidthOut")),
                process_cpu=ResourceUsage.from_json(data.get("processCpu")),
                msg_rate_in=float(data.get("msgRateIn", 0.0)),
                msg_rate_out=float(data.get("msgRateOut", 0.0)),
                msg_throughput_in=float(data.get("msgThroughputIn", 0.0)),
                msg_throughput_out=float(data.get("msgThroughputOut", 0.0)),
                num_topics=int(data.get("numTopics", 0)),
                num_producers=int(data.get("numProducers", 0)),
                num_consumers=int(data.get("numConsumers", 0)),
                bundles={
                    str(k): BundleStats.from_json(v)
                    for k, v in (data.get("lastStats") or {}).items()
                },
                last_update_ms=int(data.get("lastUpdate", 0)),
                draining=bool(data.get("draining", False)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a load report: {exc}") from None


@dataclass(frozen=True, slots=True)
class ReportPolicy:
    """When a broker rewrites its report (Pulsar's ``needBrokerDataUpdate``)."""

    threshold_percent: float = 10.0  # loadBalancerReportUpdateThresholdPercentage
    min_interval_ms: int = 5_000  # loadBalancerReportUpdateMinIntervalMillis
    max_interval_ms: int = 15 * 60_000  # loadBalancerReportUpdateMaxIntervalMinutes


def _changed_percent(old: float, new: float) -> float:
    if old == new:
        return 0.0
    if old == 0:
        return 100.0
    return 100.0 * abs(new - old) / abs(old)


def needs_report(
    last: BrokerLoadReport | None, current: BrokerLoadReport, now_ms: int, policy: ReportPolicy
) -> bool:
    """True when ``current`` should replace the published ``last``: never within the minimum
    interval, always after the maximum, else when any figure moved by more than the
    threshold (usage in percentage points, rates and counts relative to their old value)."""
    if last is None:
        return True
    elapsed = now_ms - last.last_update_ms
    if elapsed < policy.min_interval_ms:
        return False
    if elapsed >= policy.max_interval_ms:
        return True
    if set(last.bundles) != set(current.bundles) or last.draining != current.draining:
        return True
    t = policy.threshold_percent
    usages = (
        (last.cpu, current.cpu),
        (last.memory, current.memory),
        (last.bandwidth_in, current.bandwidth_in),
        (last.bandwidth_out, current.bandwidth_out),
    )
    if any(abs(a.percent() - b.percent()) > t for a, b in usages):
        return True
    figures = (
        (last.msg_rate_in, current.msg_rate_in),
        (last.msg_rate_out, current.msg_rate_out),
        (last.msg_throughput_in, current.msg_throughput_in),
        (last.msg_throughput_out, current.msg_throughput_out),
        (last.num_topics, current.num_topics),
        (last.num_producers + last.num_consumers, current.num_producers + current.num_consumers),
    )
    return any(_changed_percent(a, b) > t for a, b in figures)


__all__ = [
    "DEFAULT_BUNDLE_MSG_RATE",
    "DEFAULT_BUNDLE_THROUGHPUT",
    "BrokerLoadReport",
    "BundleData",
    "BundleStats",
    "ReportPolicy",
    "ResourceUsage",
    "ResourceWeights",
    "TimeAverage",
    "needs_report",
]
