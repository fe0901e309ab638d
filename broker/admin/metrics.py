"""The broker's Prometheus series: Pulsar's metric names and labels, built from live state.

Owns: ``BrokerMetrics`` (a prometheus-client collector over a ``BrokerService``: topic
series labelled ``cluster``/``namespace``/``topic``, or summed per namespace when
``expose_topic_level_metrics_in_prometheus`` is off; subscription series add
``subscription``; managed-ledger series ``pulsar_ml_*`` per namespace; geo-replication's
``pulsar_replication_*`` per remote cluster (``remote_cluster``); broker-wide counts;
the process collector's ``process_*``) and ``RateSampler`` (Pulsar's ``rate_in``/``rate_out``
and ``throughput_*``: counter deltas over the time since the previous sample, resampled at
most once per ``min_interval_s`` so frequent scrapes do not make the rates jumpy).
``render()`` returns the exposition text with ``# HELP``/``# TYPE``. Series are built here,
not in the HTTP handler, so the handler can run this where it likes. Must not know: HTTP.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from magnetar.broker.admin.offload_stats import (
    OFFLOAD_TOPIC_COUNTERS,
    OFFLOAD_TOPIC_GAUGES,
    offload_metric_counters,
    offload_metric_values,
)
from magnetar.broker.topics.contract import Topic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.subscription import Subscription

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

TOPIC_GAUGES: dict[str, str] = {
    "pulsar_subscriptions_count": "Subscriptions of the topic",
    "pulsar_producers_count": "Connected producers",
    "pulsar_consumers_count": "Connected consumers over all subscriptions",
    "pulsar_rate_in": "Messages per second published",
    "pulsar_rate_out": "Messages per second dispatched to consumers",
    "pulsar_throughput_in": "Bytes per second published",
    "pulsar_throughput_out": "Bytes per second dispatched to consumers",
    "pulsar_storage_size": "Bytes stored in the topic's ledgers",
    "pulsar_msg_backlog": "Entries not yet acknowledged, over all subscriptions",
    "pulsar_storage_write_latency_count": "Batches written to storage",
    "pulsar_storage_write_latency_sum": "Milliseconds spent writing batches to storage",
    **OFFLOAD_TOPIC_GAUGES,
}
TOPIC_COUNTERS: dict[str, str] = {
    "pulsar_in_messages": "Messages published",
    "pulsar_in_bytes": "Bytes published",
    "pulsar_out_messages": "Messages dispatched to consumers",
    "pulsar_out_bytes": "Bytes dispatched to consumers",
    "pulsar_out_entries": "Entries dispatched to consumers",
    **OFFLOAD_TOPIC_COUNTERS,
}
SUBSCRIPTION_GAUGES: dict[str, str] = {
    "pulsar_subscription_back_log": "Entries not yet acknowledged by the subscription",
    "pulsar_subscription_unacked_messages": "Messages dispatched and not acknowledged",
    "pulsar_subscription_delayed": "Messages waiting for their delivery time",
    "pulsar_subscription_msg_rate_out": "Messages per second dispatched",
    "pulsar_subscription_msg_throughput_out": "Bytes per second dispatched",
    "pulsar_subscription_msg_rate_redeliver": "Messages per second asked to be redelivered",
    "pulsar_subscription_consumers_count": "Connected consumers",
}
ML_GAUGES: dict[str, str] = {
    "pulsar_ml_AddEntryMessagesRate": "Entries per second added to the namespace's ledgers",
    "pulsar_ml_AddEntryBytesRate": "Bytes per second added to the namespace's ledgers",
    "pulsar_ml_StoredMessagesSize": "Bytes stored by the namespace's managed ledgers",
    "pulsar_ml_NumberOfMessagesInBacklog": "Entries in the namespace's cursors' backlogs",
    "pulsar_ml_AddEntryLatencyBuckets_count": "Batches added to the namespace's ledgers",
}
LATENCY_PREFIX = "pulsar_storage_write_latency_le_"
REPLICATION_GAUGES: dict[str, str] = {
    "pulsar_replication_backlog": "Entries not yet replicated to the remote cluster",
    "pulsar_replication_rate_in": "Messages per second received from the remote cluster",
    "pulsar_replication_rate_out": "Messages per second replicated to the remote cluster",
    "pulsar_replication_throughput_in": "Bytes per second received from the remote cluster",
    "pulsar_replication_throughput_out": "Bytes per second replicated to the remote cluster",
    "pulsar_replication_delay_in_seconds": "Age of the oldest message not yet replicated",
    "pulsar_replication_connected_count": "Replicators connected to the remote cluster",
}


class RateSampler:
    """Per key: rates of change of named counters between two samples."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, min_interval_s: float = 1.0
    ) -> None:
        self.clock = clock
        self.min_interval_s = min_interval_s
        self._last: dict[Any, tuple[float, dict[str, float]]] = {}
        self._rates: dict[Any, dict[str, float]] = {}

    def rates(self, key: Any, counters: dict[str, float]) -> dict[str, float]:
        now = self.clock()
        last = self._last.get(key)
        if last is None:
            self._last[key] = (now, dict(counters))
            return self._rates.setdefault(key, dict.fromkeys(counters, 0.0))
        then, before = last
        elapsed = now - then
        if elapsed >= self.min_interval_s:
            self._rates[key] = {
                k: max(0.0, (v - before.get(k, v)) / elapsed) for k, v in counters.items()
            }
            self._last[key] = (now, dict(counters))
        return self._rates[key]

    def forget_except(self, keys: set[Any]) -> None:
        """Drop keys no longer present (unloaded topics): the memory stays bounded."""
        for key in list(self._last):
            if key not in keys:
                self._last.pop(key, None)
                self._rates.pop(key, None)


class BrokerMetrics:
    def __init__(self, service: BrokerService, *, clock: Callable[[], float] = time.monotonic):
        self.service = service
        self.sampler = RateSampler(clock)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._process)

    def __repr__(self) -> str:
        return f"BrokerMetrics({self.service!r})"

    def render(self) -> str:
        return "".join(self.chunks())

    def chunks(self) -> Iterator[str]:
        """The exposition text in pieces: an empty piece after each topic is measured, then
        one piece per metric family, so a caller (``/metrics``) can let the loop serve
        clients between pieces however many topics there are."""
        families: list[Metric] = []
        for step in self._collect_steps():
            if step is None:
                yield ""
            else:
                families = step
        for collector in (_Families(families), self._process):
            yield generate_latest(collector).decode()  # type: ignore[arg-type]

    # prometheus-client's collector protocol
    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        families: list[Metric] = []
        for step in self._collect_steps():
            if step is not None:
                families = step
        yield from families

    def _collect_steps(self) -> Iterator[list[Metric] | None]:
        """None after each topic, then every family of this collector."""
        cfg = self.service.config
        cluster = cfg.cluster_name
        topic_level = cfg.expose_topic_level_metrics_in_prometheus
        labels = ["cluster", "namespace", "topic"] if topic_level else ["cluster", "namespace"]
        gauges = {n: GaugeMetricFamily(n, h, labels=labels) for n, h in TOPIC_GAUGES.items()}
        for suffix in _latency_suffixes():
            name = LATENCY_PREFIX + suffix
            gauges[name] = GaugeMetricFamily(
                name, "Batches written to storage within this many milliseconds", labels=labels
            )
        counters = {n: CounterMetricFamily(n, h, labels=labels) for n, h in TOPIC_COUNTERS.items()}
        sub_labels = [*labels, "subscription"] if topic_level else None
        subs = (
            {n: GaugeMetricFamily(n, h, labels=sub_labels) for n, h in SUBSCRIPTION_GAUGES.items()}
            if sub_labels
            else {}
        )
        ml = {
            n: GaugeMetricFamily(n, h, labels=["cluster", "namespace"])
            for n, h in ML_GAUGES.items()
        }
        compaction: dict[str, GaugeMetricFamily] = {}
        per_key: dict[tuple[str, ...], dict[str, float]] = {}
        ml_per_ns: dict[str, dict[str, float]] = {}
        live: set[Any] = set()
        for name, t in sorted(self.service.topics.items()):
            ns = t.name.namespace_name
            key: tuple[str, ...] = (cluster, ns, name) if topic_level else (cluster, ns)
            values = per_key.setdefault(key, {})
            topic_values = self._topic_values(name, t, live, subs, (cluster, ns, name))
            for k, v in topic_values.items():
                values[k] = values.get(k, 0.0) + v
            if isinstance(t, PersistentTopic):  # its storage is a managed ledger
                m = ml_per_ns.setdefault(ns, {})
                for metric, value in (
                    ("pulsar_ml_AddEntryMessagesRate", topic_values["entries_rate"]),
                    ("pulsar_ml_AddEntryBytesRate", topic_values["pulsar_throughput_in"]),
                    ("pulsar_ml_StoredMessagesSize", t.ledger.total_size),
                    ("pulsar_ml_NumberOfMessagesInBacklog", topic_values["pulsar_msg_backlog"]),
                    ("pulsar_ml_AddEntryLatencyBuckets_count", t.write_latency.count),
                ):
                    m[metric] = m.get(metric, 0.0) + value
            comp = t.compaction if isinstance(t, PersistentTopic) else None
            if topic_level and comp is not None and (comp.runs or comp.view is not None):
                for metric, value in comp.metrics().items():
                    fam = compaction.setdefault(
                        metric,
                        GaugeMetricFamily(
                            metric, "Topic compaction (see docs/policies.md)", labels=labels
                        ),
                    )
                    fam.add_metric(list(key), value)
            yield None
        self.sampler.forget_except(live)
        for key, values in per_key.items():
            for n, fam in gauges.items():
                fam.add_metric(list(key), values.get(n, 0.0))
            for n, cfam in counters.items():
                cfam.add_metric(list(key), values.get(n, 0.0))
        for ns, values in sorted(ml_per_ns.items()):
            for n, fam in ml.items():
                fam.add_metric([cluster, ns], values.get(n, 0.0))
        yield [
            *gauges.values(),
            *counters.values(),
            *subs.values(),
            *ml.values(),
            *compaction.values(),
            *self._replication_series(cluster, topic_level),
            *self._broker_series(cluster),
        ]

    def _replication_series(self, cluster: str, topic_level: bool) -> list[Metric]:
        """``pulsar_replication_*`` per (topic or namespace, remote cluster), Pulsar's
        ``remote_cluster`` label; none when ``replicationMetricsEnabled`` is off."""
        if not self.service.config.replication_metrics_enabled:
            return []
        labels = ["cluster", "namespace", *(["topic"] if topic_level else []), "remote_cluster"]
        per_key: dict[tuple[str, ...], dict[str, float]] = {}
        for row in self.service.replication.values():
            key: tuple[str, ...] = (cluster, row.namespace)
            key += (row.topic, row.remote) if topic_level else (row.remote,)
            v = per_key.setdefault(key, {})
            for name, value in (
                ("pulsar_replication_backlog", row.backlog),
                ("pulsar_replication_rate_in", row.rate_in),
                ("pulsar_replication_rate_out", row.rate_out),
                ("pulsar_replication_throughput_in", row.throughput_in),
                ("pulsar_replication_throughput_out", row.throughput_out),
                ("pulsar_replication_connected_count", 1.0 if row.connected else 0.0),
            ):
                v[name] = v.get(name, 0.0) + value
            delay = "pulsar_replication_delay_in_seconds"
            v[delay] = max(v.get(delay, 0.0), row.delay_s)
        families: list[Metric] = []
        for name, help_text in REPLICATION_GAUGES.items():
            fam = GaugeMetricFamily(name, help_text, labels=labels)
            for key, values in sorted(per_key.items()):
                fam.add_metric(list(key), values.get(name, 0.0))
            families.append(fam)
        return families

    def _topic_values(
        self,
        name: str,
        t: Topic,
        live: set[Any],
        subs: dict[str, GaugeMetricFamily],
        labels: tuple[str, str, str],
    ) -> dict[str, float]:
        c = t.counters
        out_msgs = out_bytes = out_entries = 0
        consumers = 0
        backlog = 0
        for sub_name, s in t.subscriptions.items():
            stats = s.statistics()
            own = s if isinstance(s, Subscription) else None  # dispatched from storage
            d = own.dispatcher if own is not None else None
            sub_out = (d.dispatched_messages, d.dispatched_bytes) if d is not None else (0, 0)
            out_msgs += sub_out[0]
            out_bytes += sub_out[1]
            out_entries += d.dispatched_entries if d is not None else 0
            consumers += stats.consumers
            backlog += stats.backlog
            if subs:
                key = (name, sub_name)
                live.add(key)
                redeliver = own.redelivery_requests if own is not None else 0
                r = self.sampler.rates(
                    key, {"out": sub_out[0], "bytes": sub_out[1], "redeliver": redeliver}
                )
                index = own.delayed_index if own is not None else None
                delayed = index.size() if index is not None else 0
                sub_labels = [*labels, sub_name]
                for metric, value in (
                    ("pulsar_subscription_back_log", stats.backlog),
                    ("pulsar_subscription_unacked_messages", stats.unacked),
                    ("pulsar_subscription_delayed", delayed),
                    ("pulsar_subscription_msg_rate_out", r["out"]),
                    ("pulsar_subscription_msg_throughput_out", r["bytes"]),
                    ("pulsar_subscription_msg_rate_redeliver", r["redeliver"]),
                    ("pulsar_subscription_consumers_count", stats.consumers),
                ):
                    subs[metric].add_metric(sub_labels, value)
        live.add(name)
        ledger = t.ledger if isinstance(t, PersistentTopic) else None
        offload_counters = offload_metric_counters(ledger)
        rates = self.sampler.rates(
            name,
            {
                "in": c.msg_in,
                "in_bytes": c.bytes_in,
                "entries": c.entries_in,
                "out": out_msgs,
                "out_bytes": out_bytes,
                **offload_counters,
            },
        )
        values: dict[str, float] = {
            "pulsar_subscriptions_count": len(t.subscriptions),
            "pulsar_producers_count": len(t.producers.producers),
            "pulsar_consumers_count": consumers,
            "pulsar_rate_in": rates["in"],
            "pulsar_rate_out": rates["out"],
            "pulsar_throughput_in": rates["in_bytes"],
            "pulsar_throughput_out": rates["out_bytes"],
            "entries_rate": rates["entries"],
            "pulsar_storage_size": t.storage_size,
            "pulsar_msg_backlog": backlog,
            "pulsar_in_messages": c.msg_in,
            "pulsar_in_bytes": c.bytes_in,
            "pulsar_out_messages": out_msgs,
            "pulsar_out_bytes": out_bytes,
            "pulsar_out_entries": out_entries,
            **offload_metric_values(ledger, rates),
        }
        buckets = t.write_latency if isinstance(t, PersistentTopic) else None
        if buckets is not None:
            for suffix, count in buckets.items():
                values[LATENCY_PREFIX + suffix] = count
            values["pulsar_storage_write_latency_count"] = buckets.count
            values["pulsar_storage_write_latency_sum"] = buckets.sum_ms
        return values

    def _load_manager_series(self, cluster: str) -> Iterator[Metric]:
        """``pulsar_lb_*``: the load manager as this broker sees it (none when disabled)."""
        values = _lb_values(self.service)
        if values is None:
            return
        for name, help_text in LB_GAUGES.items():
            gauge = GaugeMetricFamily(name, help_text, labels=["cluster"])
            gauge.add_metric([cluster], values[name])
            yield gauge
        for name, help_text in LB_COUNTERS.items():
            counter = CounterMetricFamily(name, help_text, labels=["cluster"])
            counter.add_metric([cluster], values[name])
            yield counter

    def _broker_series(self, cluster: str) -> Iterator[Metric]:
        topics = self.service.topics
        per_ns: dict[str, int] = {}
        for t in topics.values():
            per_ns[t.name.namespace_name] = per_ns.get(t.name.namespace_name, 0) + 1
        ns_topics = GaugeMetricFamily(
            "pulsar_topics_count", "Topics loaded on this broker", labels=["cluster", "namespace"]
        )
        for ns, n in sorted(per_ns.items()):
            ns_topics.add_metric([cluster, ns], n)
        yield ns_topics
        yield from self._load_manager_series(cluster)
        for name, help_text, value in (
            ("pulsar_broker_topics_count", "Topics loaded on this broker", len(topics)),
            ("pulsar_active_connections", "Open client connections", len(self.service.connections)),
            (
                "pulsar_ml_count",
                "Managed ledgers open on this broker",
                sum(1 for t in topics.values() if isinstance(t, PersistentTopic)),
            ),
        ):
            fam = GaugeMetricFamily(name, help_text, labels=["cluster"])
            fam.add_metric([cluster], value)
            yield fam
        yield from self._memory_series(cluster)

    def _memory_series(self, cluster: str) -> Iterator[Metric]:
        """The entry cache (Pulsar's ``pulsar_ml_cache_used_size``), the broker-wide
        read-ahead budget (``managed_ledger_read_ahead_total_max_size_bytes``: Magnetar's) and
        the ledgers given up for want of bookies."""
        mem = self.service.storage.memory_statistics()
        failures = self.service.storage.failure_statistics()
        gauge, counter = GaugeMetricFamily, CounterMetricFamily
        series: tuple[tuple[_Family, str, str, int], ...] = (
            (
                gauge,
                "pulsar_ml_cache_used_size",
                "Bytes held by the entry cache",
                mem.cache_used_bytes,
            ),
            (
                gauge,
                "magnetar_ml_read_ahead_held_bytes",
                "Bytes all cursors' read-ahead holds or has in flight",
                mem.read_ahead_held_bytes,
            ),
            (
                gauge,
                "magnetar_ml_read_ahead_max_bytes",
                "The broker-wide read-ahead budget",
                mem.read_ahead_max_bytes,
            ),
            (
                counter,
                "magnetar_ml_read_ahead_refused",
                "Times a cursor's read-ahead found the broker-wide budget spent",
                mem.read_ahead_refused,
            ),
            (
                counter,
                "magnetar_ml_ledgers_given_up",
                "Ledgers closed at their last confirmed entry for want of bookies",
                failures.ledgers_given_up,
            ),
            (
                counter,
                "magnetar_ml_adds_moved",
                "Unconfirmed adds of given-up ledgers, re-added to the next ledger",
                failures.adds_moved,
            ),
        )
        yield from _broker_families(cluster, series)
        yield from self._offload_worker_series(cluster)

    def _offload_worker_series(self, cluster: str) -> Iterator[Metric]:
        """The broker's offload worker process (``managedLedgerOffloadWorker``; Magnetar's:
        Pulsar offloads on the broker's own threads)."""
        w = self.service.storage.offload_worker_statistics()
        gauge, counter = GaugeMetricFamily, CounterMetricFamily
        series: tuple[tuple[_Family, str, str, int], ...] = (
            (
                gauge,
                "magnetar_offload_worker_running",
                "1 while the broker's offload worker process is alive",
                int(w.running),
            ),
            (
                counter,
                "magnetar_offload_worker_starts",
                "Offload worker processes started",
                w.starts,
            ),
            (
                counter,
                "magnetar_offload_worker_jobs",
                "Ledger offloads given to the worker",
                w.jobs,
            ),
            (
                counter,
                "magnetar_offload_worker_jobs_failed",
                "Worker offloads that failed (in the worker, or because it exited)",
                w.jobs_failed,
            ),
        )
        yield from _broker_families(cluster, series)


_Family = type[GaugeMetricFamily] | type[CounterMetricFamily]


def _broker_families(
    cluster: str, series: tuple[tuple[_Family, str, str, int], ...]
) -> Iterator[Metric]:
    """One family a (kind, name, help, value), labelled with the cluster only."""
    for kind, name, help_text, value in series:
        fam = kind(name, help_text, labels=["cluster"])
        fam.add_metric([cluster], value)
        yield fam


LB_GAUGES: dict[str, str] = {
    "pulsar_lb_is_leader": "1 while this broker is the load-manager leader",
    "pulsar_lb_brokers": "Brokers with a load report, as this broker sees them",
    "pulsar_lb_cpu_usage": "This broker's CPU usage in its last load report (percent)",
    "pulsar_lb_memory_usage": "This broker's memory usage in its last load report (percent)",
    "pulsar_lb_bandwidth_in_usage": "This broker's inbound bandwidth usage (percent)",
    "pulsar_lb_bandwidth_out_usage": "This broker's outbound bandwidth usage (percent)",
}
LB_COUNTERS: dict[str, str] = {
    "pulsar_lb_bundles_assigned": "Unowned bundles placed by this broker as leader",
    "pulsar_lb_bundles_split": "Bundles split by this broker as leader",
    "pulsar_lb_unload_bundle": "Bundles unloaded (shed) by this broker as leader",
    "pulsar_lb_brokers_declared_dead": "Brokers found dead by this broker's probes",
    "pulsar_lb_leader_changes": "Times this broker became or stopped being the leader",
}


class _Families:
    """Families already collected, as a collector ``generate_latest`` can format."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def _lb_values(service: BrokerService) -> dict[str, float] | None:
    cluster = service.cluster
    manager = None if cluster is None else cluster.manager
    if cluster is None or manager is None:
        return None
    st = manager.statistics()
    report = None if cluster.reporter is None else cluster.reporter.latest
    return {
        "pulsar_lb_is_leader": float(st.is_leader),
        "pulsar_lb_brokers": st.brokers,
        "pulsar_lb_cpu_usage": report.cpu.percent() if report else 0.0,
        "pulsar_lb_memory_usage": report.memory.percent() if report else 0.0,
        "pulsar_lb_bandwidth_in_usage": report.bandwidth_in.percent() if report else 0.0,
        "pulsar_lb_bandwidth_out_usage": report.bandwidth_out.percent() if report else 0.0,
        "pulsar_lb_bundles_assigned": st.bundles_assigned,
        "pulsar_lb_bundles_split": st.bundles_split,
        "pulsar_lb_unload_bundle": st.bundles_unloaded,
        "pulsar_lb_brokers_declared_dead": st.brokers_declared_dead,
        "pulsar_lb_leader_changes": st.leader_changes,
    }


def _latency_suffixes() -> list[str]:
    from magnetar.broker.topics.stats_buckets import StatsBuckets

    return [suffix for suffix, _ in StatsBuckets().items()]


__all__ = ["BrokerMetrics", "RateSampler"]
