"""What a topic's stats and metrics show of its tiered storage.

Owns: ``offload_contexts`` (each ledger's offload context, for the ledger layouts a reader
outside the broker plans with), ``offload_topic_stats`` (the fields Pulsar's topic stats
carry: ``offloadedStorageSize``, ``lastOffloadLedgerId``, ``lastOffloadSuccessTimeStamp``,
``lastOffloadFailureTimeStamp``),
``OFFLOAD_TOPIC_GAUGES`` / ``OFFLOAD_TOPIC_COUNTERS`` and ``offload_metric_values``: Pulsar's
series (``pulsar_storage_offloaded_size``, ``LedgerOffloaderStats``' ``brk_ledgeroffloader_*``)
for ``/metrics``, and ``offload_metric_counters`` (what their rates are sampled from).
A topic whose storage keeps no ledgers (non-persistent, in memory) shows none of them.
Must not know: HTTP, how offloading works.
"""

from __future__ import annotations

from typing import Any

from magnetar.broker.storage.managed_adapter import ManagedLedgerAdapter


def offload_contexts(ledger: object) -> dict[int, dict[str, Any]]:
    """Each ledger's offload context (``offloadContext`` of internal stats) by ledger id,
    for the ledgers that have one."""
    if not isinstance(ledger, ManagedLedgerAdapter):
        return {}
    return {
        info.ledger_id: info.offload.to_json()
        for info in ledger.ml.ledgers.ledgers
        if info.offload is not None
    }


def offload_topic_stats(ledger: object) -> dict[str, Any]:
    """Pulsar's tiered-storage fields of topic stats (none for a topic whose storage keeps
    no ledgers: non-persistent, or in memory)."""
    if not isinstance(ledger, ManagedLedgerAdapter):
        return {}
    stats = ledger.ml.offloading.statistics()
    return {
        "offloadedStorageSize": stats.offloaded_size_bytes,
        "lastOffloadLedgerId": stats.last_offload_ledger_id,
        "lastOffloadSuccessTimeStamp": stats.last_offload_success_ms,
        "lastOffloadFailureTimeStamp": stats.last_offload_failure_ms,
    }


OFFLOAD_TOPIC_GAUGES: dict[str, str] = {
    "pulsar_storage_offloaded_size": "Bytes of the topic's ledgers offloaded to tiered storage",
    "brk_ledgeroffloader_offload_rate": "Bytes per second offloaded to tiered storage",
    "brk_ledgeroffloader_read_offload_rate": "Bytes per second read from tiered storage",
    "brk_ledgeroffloader_read_offload_index_latency_count": "Offloaded ledgers opened",
    "brk_ledgeroffloader_read_offload_index_latency_sum": (
        "Milliseconds spent opening offloaded ledgers (their index read)"
    ),
    "brk_ledgeroffloader_read_offload_data_latency_count": "Reads from tiered storage",
    "brk_ledgeroffloader_read_offload_data_latency_sum": (
        "Milliseconds spent reading entries from tiered storage"
    ),
}
"""Pulsar's tiered-storage series (``pulsar_storage_offloaded_size`` and
``LedgerOffloaderStats``' ``brk_ledgeroffloader_*``), per topic; latencies as count and sum
in milliseconds, as the storage write latency."""
OFFLOAD_TOPIC_COUNTERS: dict[str, str] = {
    "brk_ledgeroffloader_offload_error": "Offloads of a ledger that failed",
    "brk_ledgeroffloader_read_offload_error": "Reads from tiered storage that failed",
    "brk_ledgeroffloader_delete_offload_ops": "Offloaded objects deleted (attempts, ledgers)",
}


def offload_metric_counters(ledger: object) -> dict[str, float]:
    """The counters rates are sampled from (``RateSampler``): bytes offloaded and read."""
    if not isinstance(ledger, ManagedLedgerAdapter):
        return {}
    stats = ledger.ml.offloading.statistics()
    return {
        "offload_bytes": stats.offloaded_bytes_total,
        "offload_read_bytes": stats.store_read_bytes,
    }


def offload_metric_values(ledger: object, rates: dict[str, float]) -> dict[str, float]:
    """The topic's tiered-storage series by name (``rates``: the sampled rates)."""
    if not isinstance(ledger, ManagedLedgerAdapter):
        return {}
    s = ledger.ml.offloading.statistics()
    return {
        "pulsar_storage_offloaded_size": s.offloaded_size_bytes,
        "brk_ledgeroffloader_offload_rate": rates.get("offload_bytes", 0.0),
        "brk_ledgeroffloader_read_offload_rate": rates.get("offload_read_bytes", 0.0),
        "brk_ledgeroffloader_read_offload_index_latency_count": s.store_opens,
        "brk_ledgeroffloader_read_offload_index_latency_sum": s.store_open_ms_total,
        "brk_ledgeroffloader_read_offload_data_latency_count": s.store_reads,
        "brk_ledgeroffloader_read_offload_data_latency_sum": s.store_read_ms_total,
        "brk_ledgeroffloader_offload_error": s.offloads_failed,
        "brk_ledgeroffloader_read_offload_error": s.store_read_errors,
        "brk_ledgeroffloader_delete_offload_ops": s.objects_deleted,
    }


__all__ = [
    "OFFLOAD_TOPIC_COUNTERS",
    "OFFLOAD_TOPIC_GAUGES",
    "offload_contexts",
    "offload_metric_counters",
    "offload_metric_values",
    "offload_topic_stats",
]
