"""A replicator's numbers, with Pulsar's names: the ``replication`` map of topic stats.

Owns: ``ReplicatorCounters`` (running totals a replicator adds to: messages and bytes sent,
messages expired, skipped, retries), ``RateMeter`` (rates of change of those totals between
two samples, on an injected clock), ``InboundReplication`` (what the remote side measures
of a link, from the replicator producer connected to it) and
``ReplicatorStatistics``, whose ``to_json`` is Pulsar's ``ReplicatorStats``:
``msgRateIn``, ``msgThroughputIn``, ``msgRateOut``, ``msgThroughputOut``,
``msgRateExpired``, ``replicationBacklog``, ``connected``, ``replicationDelayInSeconds``,
``inboundConnection``, ``inboundConnectedSince``, ``outboundConnection``,
``outboundConnectedSince`` (``InboundReplication.to_json``: a cluster only received from);
Magnetar adds ``state``, ``lastError`` (why the replicator is
not replicating, kept until it replicates again) and ``retries``.
Pure. Must not know: cursors, producers.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from magnetar.clock import Clock


@dataclass(slots=True)
class ReplicatorCounters:
    messages_out: int = 0
    bytes_out: int = 0
    entries_out: int = 0
    messages_expired: int = 0
    entries_skipped: int = 0
    retries: int = 0


@dataclass(slots=True)
class RateMeter:
    """Per-second rates of named totals, measured between samples at least
    ``min_interval_s`` apart (the last rates are repeated in between)."""

    clock: Clock
    min_interval_s: float = 1.0
    _at_ms: float | None = None
    _before: dict[str, float] = field(default_factory=dict)
    _rates: dict[str, float] = field(default_factory=dict)

    def rates(self, totals: dict[str, float]) -> dict[str, float]:
        now = self.clock.monotonic_ms()
        if self._at_ms is None:
            self._at_ms, self._before = now, dict(totals)
            self._rates = dict.fromkeys(totals, 0.0)
        elif now - self._at_ms >= self.min_interval_s * 1000:
            elapsed_s = (now - self._at_ms) / 1000
            self._rates = {
                k: max(0.0, (v - self._before.get(k, v)) / elapsed_s) for k, v in totals.items()
            }
            self._at_ms, self._before = now, dict(totals)
        return dict(self._rates)


@dataclass(frozen=True, slots=True)
class InboundReplication:
    """The remote side's view of a link: the replicator producer connected to it."""

    msg_rate_in: float = 0.0
    msg_throughput_in: float = 0.0
    connection: str = ""
    connected_since_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        """Pulsar's ``ReplicatorStats`` of a cluster this topic only receives from."""
        return {
            "msgRateIn": self.msg_rate_in,
            "msgThroughputIn": self.msg_throughput_in,
            "msgRateOut": 0.0,
            "msgThroughputOut": 0.0,
            "msgRateExpired": 0.0,
            "replicationBacklog": 0,
            "connected": False,
            "replicationDelayInSeconds": 0,
            "inboundConnection": self.connection,
            "inboundConnectedSince": _iso(self.connected_since_ms),
            "outboundConnection": "",
            "outboundConnectedSince": "",
        }


def _iso(ms: int) -> str:
    if ms <= 0:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat()


@dataclass(frozen=True, slots=True)
class ReplicatorStatistics:
    remote: str
    state: str
    connected: bool
    msg_rate_out: float
    msg_throughput_out: float
    msg_rate_expired: float
    replication_backlog: int
    replication_delay_s: float
    outbound_connection: str
    outbound_connected_since_ms: int
    in_flight: int
    last_error: str
    counters: ReplicatorCounters

    def to_json(self, inbound: InboundReplication | None = None) -> dict[str, Any]:
        """Pulsar's ``ReplicatorStats`` JSON (plus ``state``, ``lastError``, ``retries``)."""
        inbound = inbound or InboundReplication()
        return {
            "msgRateIn": inbound.msg_rate_in,
            "msgThroughputIn": inbound.msg_throughput_in,
            "msgRateOut": self.msg_rate_out,
            "msgThroughputOut": self.msg_throughput_out,
            "msgRateExpired": self.msg_rate_expired,
            "replicationBacklog": self.replication_backlog,
            "connected": self.connected,
            "replicationDelayInSeconds": int(self.replication_delay_s),
            "inboundConnection": inbound.connection,
            "inboundConnectedSince": _iso(inbound.connected_since_ms),
            "outboundConnection": self.outbound_connection,
            "outboundConnectedSince": _iso(self.outbound_connected_since_ms),
            "state": self.state,
            "lastError": self.last_error,
            "retries": self.counters.retries,
        }


_SUMMED = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "msgRateExpired",
    "replicationBacklog",
    "retries",
)


def merge_replication(maps: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``replication`` maps of a partitioned topic's partitions as one (Pulsar's
    ``ReplicatorStatsImpl.add``): rates, throughputs, backlogs and retries summed, the delay
    the largest, ``connected`` only when every partition's replicator is."""
    out: dict[str, dict[str, Any]] = {}
    for replication in maps:
        for remote, stats in replication.items():
            into = out.get(remote)
            if into is None:
                out[remote] = dict(stats)
                continue
            for key in _SUMMED:
                if key in stats:
                    into[key] = into.get(key, 0) + stats[key]
            into["replicationDelayInSeconds"] = max(
                into.get("replicationDelayInSeconds", 0), stats.get("replicationDelayInSeconds", 0)
            )
            into["connected"] = bool(into.get("connected")) and bool(stats.get("connected"))
            if stats.get("lastError") and not into.get("lastError"):
                into["lastError"] = stats["lastError"]
    return out


__all__ = [
    "InboundReplication",
    "RateMeter",
    "ReplicatorCounters",
    "ReplicatorStatistics",
    "merge_replication",
]
