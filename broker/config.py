"""Broker configuration: Pulsar's ``broker.conf`` names (snake_case) and defaults.

Owns: the ``BrokerConfig`` dataclass and loading it from a YAML/``key=value`` file plus
overrides. Unknown keys are rejected with a clear error. Must not know: who reads it.
"""

from __future__ import annotations

import dataclasses
import pathlib
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class BrokerConfig:
    # identity and listeners
    cluster_name: str = "standalone"
    bind_address: str = "127.0.0.1"
    advertised_address: str = "localhost"
    broker_service_port: int = 6650
    web_service_port: int = 8080
    metadata_store_url: str = "memory://default"
    metadata_store_session_timeout_millis: int = 30_000
    # protocol
    max_message_size: int = 5 * 1024 * 1024
    keep_alive_interval_seconds: int = 30
    max_pending_publish_requests_per_connection: int = 1000
    # topics and namespaces
    allow_auto_topic_creation: bool = True
    allow_auto_topic_creation_type: str = "non-partitioned"  # or "partitioned"
    default_num_partitions: int = 1
    allow_auto_subscription_creation: bool = True
    default_number_of_namespace_bundles: int = 4
    broker_deduplication_enabled: bool = False
    # subscriptions
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    dispatcher_max_read_batch_size: int = 100
    subscription_redelivery_tracker_enabled: bool = True
    # managed ledger
    managed_ledger_default_ensemble_size: int = 1
    managed_ledger_default_write_quorum: int = 1
    managed_ledger_default_ack_quorum: int = 1
    managed_ledger_max_entries_per_ledger: int = 50_000
    managed_ledger_max_ledger_rollover_time_minutes: int = 240
    managed_ledger_min_ledger_rollover_time_minutes: int = 10
    managed_ledger_cache_size_mb: int = 256
    # retention defaults (0 = keep nothing after acknowledgement, as Pulsar)
    default_retention_time_in_minutes: int = 0
    default_retention_size_in_mb: int = 0
    retention_check_interval_in_seconds: int = 120
    # message lifecycle policies (broker defaults; namespace policies override them)
    ttl_duration_default_in_seconds: int = 0
    message_expiry_check_interval_in_minutes: int = 5
    backlog_quota_check_enabled: bool = True
    backlog_quota_check_interval_in_seconds: int = 60
    backlog_quota_default_limit_bytes: int = -1
    backlog_quota_default_limit_second: int = -1
    backlog_quota_default_retention_policy: str = "producer_request_hold"
    max_producers_per_topic: int = 0
    max_consumers_per_topic: int = 0
    delayed_delivery_enabled: bool = True
    delayed_delivery_tick_time_millis: int = 1000
    max_publish_rate_per_topic_in_messages: int = 0
    max_publish_rate_per_topic_in_bytes: int = 0
    dispatch_throttling_rate_per_topic_in_msg: int = 0
    dispatch_throttling_rate_per_topic_in_byte: int = 0
    dispatch_throttling_rate_per_subscription_in_msg: int = 0
    dispatch_throttling_rate_per_subscription_in_byte: int = 0
    # topic compaction: automatic once a topic's bytes not yet compacted exceed the
    # threshold (namespace / topic policy ``compaction_threshold`` overrides; 0 = off)
    broker_service_compaction_monitor_interval_seconds: int = 60
    broker_service_compaction_threshold_in_bytes: int = 0
    # bounds against hostile input (docs/operations.md "Hostile input")
    max_num_partitions_per_partitioned_topic: int = 0  # 0: Magnetar's ceiling, 65,536
    load_balancer_namespace_maximum_bundles: int = 128
    max_buffered_partial_frames_size_in_mb: int = 128

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised_address}:{self.broker_service_port}"

    @property
    def web_service_url(self) -> str:
        return f"http://{self.advertised_address}:{self.web_service_port}"

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def load(cls, path: str | pathlib.Path | None = None, **overrides: Any) -> BrokerConfig:
        values: dict[str, Any] = {}
        if path is not None:
            values.update(_read_file(pathlib.Path(path)))
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown broker configuration keys: {', '.join(unknown)}")
        typed: dict[str, Any] = {}
        for key, value in values.items():
            default = getattr(cls(), key)
            typed[key] = _coerce(key, value, type(default))
        return cls(**typed)


def _read_file(path: pathlib.Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping")
        return {str(k).replace("-", "_"): v for k, v in data.items()}
    values: dict[str, Any] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ValueError(f"{path}:{lineno}: expected key=value")
        key, _, value = line.partition("=")
        values[key.strip().replace("-", "_")] = value.strip()
    return values


def _coerce(key: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{key}: expected a boolean, got {value!r}")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key}: expected {kind.__name__}, got {value!r}") from None


__all__ = ["BrokerConfig"]
