"""Broker configuration: Pulsar's ``broker.conf`` settings (snake_case) and defaults.

Owns: the ``BrokerConfig`` dataclass and loading it from a YAML/``key=value`` file, the
``MAGNETAR_*`` environment and overrides. Names (Pulsar's camelCase aliases, environment
variables), reading and masking live in ``magnetar.settings``, shared with the bookie; a
new setting here needs its Pulsar alias in ``settings.BROKER_ALIASES``. Unknown keys are
rejected with a clear error. Must not know: who reads it.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar import settings
from magnetar.broker.listeners import parse_advertised_listeners

INACTIVE_TOPIC_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")
OFFLOAD_WORKER_MODES = ("idle", "normal", "off")
"""Where offloads run (``managedLedgerOffloadWorker``): see ``broker.offload.worker``."""


@dataclass(slots=True)
class BrokerConfig:
    # identity and listeners
    cluster_name: str = "standalone"
    bind_address: str = "127.0.0.1"
    advertised_address: str = "localhost"
    # Pulsar's advertisedListeners: "name:pulsar://host:port,name:pulsar+ssl://host:port";
    # a lookup naming a listener gets its URLs (broker/listeners.py)
    advertised_listeners: str = ""
    internal_listener_name: str = ""  # empty: the first listener
    broker_service_port: int = 6650
    web_service_port: int = 8080
    metadata_store_url: str = "memory://default"
    # Pulsar's configuration store: clusters, tenants, namespace and topic policies and
    # partitioned-topic metadata, shared by every cluster of an instance (zk/routing.py);
    # empty: kept in metadata_store_url with the rest
    configuration_metadata_store_url: str = ""
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
    # entries stored between two deduplication snapshots (what a new owner reads again)
    broker_deduplication_entries_interval: int = 1000
    # the topic-level policy endpoints (/admin/v2/{domain}/{t}/{ns}/{topic}/...policies);
    # off: they answer 405 as Pulsar's topicLevelPoliciesEnabled=false
    topic_level_policies_enabled: bool = True
    # -- inactive-topic deletion (policies/inactive.py) ---------------------------------
    # Pulsar's brokerDeleteInactiveTopics* (mode: delete_when_no_subscriptions or
    # delete_when_subscriptions_caught_up; max inactive duration None: the frequency)
    broker_delete_inactive_topics_enabled: bool = True
    broker_delete_inactive_topics_frequency_seconds: int = 60
    broker_delete_inactive_topics_mode: str = "delete_when_no_subscriptions"
    broker_delete_inactive_topics_max_inactive_duration_seconds: int | None = None
    broker_delete_inactive_partitioned_topic_metadata_enabled: bool = False
    # schema registry (broker/schema/)
    schema_compatibility_strategy: str = "FULL"
    is_allow_auto_update_schema_enabled: bool = True
    is_schema_validation_enforced: bool = False
    # subscriptions
    max_unacked_messages_per_consumer: int = 50_000
    max_unacked_messages_per_subscription: int = 200_000
    dispatcher_max_read_batch_size: int = 100
    # bytes at most per dispatcher read, estimated from the average entry (0: no limit)
    dispatcher_max_read_size_bytes: int = 5 << 20
    # entries a read asks for right after a failed read (doubling back on success)
    dispatcher_min_read_batch_size: int = 1
    subscription_redelivery_tracker_enabled: bool = True
    # managed ledger
    managed_ledger_default_ensemble_size: int = 1
    managed_ledger_default_write_quorum: int = 1
    managed_ledger_default_ack_quorum: int = 1
    managed_ledger_max_entries_per_ledger: int = 50_000
    managed_ledger_max_ledger_rollover_time_minutes: int = 240
    managed_ledger_min_ledger_rollover_time_minutes: int = 10
    # the entry cache: ONE budget for every topic of the broker (Pulsar's
    # managedLedgerCacheSizeMB; 0 = no cache); see docs/operations.md "Memory"
    managed_ledger_cache_size_mb: int = 256
    managed_ledger_cache_eviction_watermark: float = 0.9
    managed_ledger_cache_eviction_time_threshold_millis: int = 1000
    managed_ledger_cache_eviction_interval_ms: int = 10
    managed_ledger_cursor_backlogged_threshold: int = 1000
    # a cursor's own ledger rolls over at its next write once it holds this many entries or
    # is this old (Pulsar's defaults): keeps cursor ledgers, and their metadata, small
    managed_ledger_cursor_max_entries_per_ledger: int = 50_000
    managed_ledger_cursor_rollover_time_in_seconds: int = 14_400
    # adds over the bookies' fast add transport (plain TCP, bookie/fast_add.py) where they
    # announce one (fast_add_port), else over the gRPC Add stream; never with bookie TLS
    bookkeeper_fast_add_enabled: bool = True
    # a cursor behind the entry cache keeps bookie reads in flight ahead of its read
    # position, up to this many entries and bytes (0 entries: one read at a time)
    managed_ledger_read_ahead_entries: int = 10_000
    managed_ledger_read_ahead_max_size_bytes: int = 4 << 20
    # ... and every cursor's read-ahead of the broker together holds at most this many bytes
    managed_ledger_read_ahead_total_max_size_bytes: int = 64 << 20
    # placement of ledger ensembles on bookies that announce a rack (bookie_rack)
    bookkeeper_client_min_num_racks_per_write_quorum: int = 2
    bookkeeper_client_enforce_min_num_racks_per_write_quorum: bool = False
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
    delayed_delivery_max_delay_in_millis: int = 0  # 0: no limit
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
    # geo-replication (docs/geo-replication.md): replicators' pending messages, the
    # periodic re-check of every topic's replicators against its policies, replicated
    # subscriptions (PIP-33) and their snapshots
    replication_producer_queue_size: int = 1000
    replication_policy_check_duration_seconds: int = 600
    replication_metrics_enabled: bool = True
    enable_replicated_subscriptions: bool = True
    replicated_subscriptions_snapshot_frequency_millis: int = 1000
    replicated_subscriptions_snapshot_timeout_seconds: int = 30
    replicated_subscriptions_snapshot_max_cached_per_subscription: int = 10
    # load manager (Pulsar's loadBalancer* names; docs/cluster.md): reports, placement,
    # bundle split, shedding, and failure detection of dead brokers
    load_balancer_enabled: bool = True
    load_balancer_report_update_threshold_percentage: float = 10.0
    load_balancer_report_update_min_interval_millis: int = 5_000
    load_balancer_report_update_max_interval_minutes: float = 15.0
    load_balancer_history_resource_percentage: float = 0.9
    load_balancer_average_resource_usage_difference_threshold_percentage: float = 10.0
    load_balancer_cpu_resource_weight: float = 1.0
    load_balancer_memory_resource_weight: float = 1.0
    load_balancer_bandwidth_in_resource_weight: float = 1.0
    load_balancer_bandwidth_out_resource_weight: float = 1.0
    load_balancer_override_broker_nic_speed_gbps: float = 0.0  # 0: unknown (usage 0 %)
    load_balancer_shedding_enabled: bool = True
    load_balancer_load_shedding_strategy: str = (
        "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder"
    )
    load_balancer_shedding_interval_minutes: float = 1.0
    load_balancer_shedding_grace_period_minutes: float = 30.0
    load_balancer_broker_threshold_shedder_percentage: float = 10.0
    load_balancer_broker_overloaded_threshold_percentage: float = 85.0
    load_balancer_bundle_unload_min_throughput_threshold: float = 10.0  # MB/s
    load_balancer_auto_bundle_split_enabled: bool = True
    load_balancer_auto_unload_split_bundles_enabled: bool = True
    load_balancer_split_interval_minutes: float = 1.0
    load_balancer_namespace_bundle_max_topics: int = 1000
    load_balancer_namespace_bundle_max_sessions: int = 1000
    load_balancer_namespace_bundle_max_msg_rate: int = 30_000
    load_balancer_namespace_bundle_max_bandwidth_mbytes: int = 100
    load_balancer_namespace_maximum_bundles: int = 128
    default_namespace_bundle_split_algorithm: str = "range_equally_divide"
    load_balancer_broker_probe_interval_millis: int = 500
    load_balancer_broker_probe_failures: int = 2
    load_balancer_broker_unresponsive_timeout_millis: int = 2_500
    # metrics: per-topic series on /metrics (off: summed per namespace, as Pulsar's
    # exposeTopicLevelMetricsInPrometheus=false; subscription series need topic level)
    expose_topic_level_metrics_in_prometheus: bool = True
    # TLS (broker/security/tls.py): a port of -1 (or empty) is off; the plain port may be -1 too
    broker_service_port_tls: int = -1
    web_service_port_tls: int = -1
    tls_certificate_file_path: str = ""
    tls_key_file_path: str = ""
    tls_trust_certs_file_path: str = ""
    tls_require_trusted_client_cert_on_connect: bool = False
    tls_protocols: str = ""  # e.g. "TLSv1.3,TLSv1.2"; empty = TLS 1.2 and newer
    tls_ciphers: str = ""  # OpenSSL cipher string; empty = Python's secure default
    tls_cert_refresh_check_duration_sec: int = 300
    # authentication and authorization (broker/security/)
    authentication_enabled: bool = False
    authentication_providers: str = ""  # comma list: token, tls (or Pulsar class names)
    authentication_refresh_check_seconds: int = 60
    anonymous_user_role: str = ""
    token_secret_key: str = ""  # file:///path or data:;base64,... (HS256)
    # basic authentication's htpasswd file: a path, file:/data: URL or base64 content
    basic_auth_conf: str = ""
    token_public_key: str = ""  # file:///path or data:;base64,... (RS256/ES256)
    token_public_alg: str = "RS256"
    token_auth_claim: str = "sub"
    token_audience_claim: str = "aud"
    token_audience: str = ""
    authorization_enabled: bool = False
    superuser_roles: str = ""  # comma list
    # broker -> bookie gRPC over TLS (Pulsar's bookkeeperTLS* settings, PEM): on when a trusted
    # CA is set; a client certificate when bookkeeper_tls_client_authentication
    bookkeeper_tls_trust_certs_file_path: str = ""
    bookkeeper_tls_client_authentication: bool = False
    bookkeeper_tls_certificate_file_path: str = ""
    bookkeeper_tls_key_file_path: str = ""
    # this broker as a client of other brokers (broker/security/broker_client.py): its role
    # for the load manager's admin calls (unload, split) and lookups through the leader
    broker_client_authentication_plugin: str = ""  # token, tls (or Pulsar class names)
    broker_client_authentication_parameters: str = ""  # token:<jwt>, file:///path, tlsCertFile:..
    broker_client_tls_enabled: bool = False
    broker_client_trust_certs_file_path: str = ""
    broker_client_certificate_file_path: str = ""
    broker_client_key_file_path: str = ""
    # -- tiered storage (broker/offload/, docs/tiered-storage.md) -------------------------
    # the broker's offloadPolicies: namespace and topic offloadPolicies override them field
    # by field. No driver: nothing is offloaded (offloaded ledgers are still read). A size
    # left unset (None) is the driver-specific one, else the universal one, else Pulsar's
    # default (64 MiB blocks written, 1 MiB blocks read); a threshold < 0 is off
    managed_ledger_offload_driver: str = ""
    managed_ledger_offload_max_threads: int = 2
    managed_ledger_offload_prefetch_rounds: int = 1
    managed_ledger_offload_auto_trigger_size_threshold_bytes: int = -1
    managed_ledger_offload_threshold_in_seconds: int = -1
    managed_ledger_offload_deletion_lag_ms: int = 14_400_000
    managed_ledger_data_read_priority: str = "tiered-storage-first"
    managed_ledger_offload_bucket: str = ""
    managed_ledger_offload_region: str = ""
    managed_ledger_offload_service_endpoint: str = ""
    managed_ledger_offload_max_block_size_in_bytes: int | None = None
    managed_ledger_offload_read_buffer_size_in_bytes: int | None = None
    s3_managed_ledger_offload_region: str = ""
    s3_managed_ledger_offload_bucket: str = ""
    s3_managed_ledger_offload_service_endpoint: str = ""
    s3_managed_ledger_offload_max_block_size_in_bytes: int | None = None
    s3_managed_ledger_offload_read_buffer_size_in_bytes: int | None = None
    s3_managed_ledger_offload_credential_id: str = ""
    s3_managed_ledger_offload_credential_secret: str = ""
    s3_managed_ledger_offload_role: str = ""
    s3_managed_ledger_offload_role_session_name: str = "pulsar-s3-offload"
    gcs_managed_ledger_offload_region: str = ""
    gcs_managed_ledger_offload_bucket: str = ""
    gcs_managed_ledger_offload_max_block_size_in_bytes: int | None = None
    gcs_managed_ledger_offload_read_buffer_size_in_bytes: int | None = None
    gcs_managed_ledger_offload_service_account_key_file: str = ""
    file_system_uri: str = ""
    file_system_profile_path: str = ""
    # Magnetar only: how long one object-store request may take, how often the library
    # retries it, and how long a read of an offloaded ledger waits for an unavailable store
    # before it fails (retriably: the dispatcher reads again, nothing is skipped)
    managed_ledger_offload_store_timeout_ms: int = 30_000
    managed_ledger_offload_store_retries: int = 10
    managed_ledger_offload_read_deadline_ms: int = 120_000
    # Pulsar's offload flow permits: bytes/s the broker's offloads together read from the
    # bookies (<= 0: unlimited, Pulsar's default), so offloading leaves the loop to publishes
    managed_ledger_offload_flow_permits_per_second: int = -1
    # Magnetar only: where offloads run. idle: a child process in the SCHED_IDLE class (the
    # CPU it uses is only ever what the broker and bookies leave); normal: a child process at
    # normal priority; off: on the broker's event loop, as Pulsar's run in the broker's JVM
    managed_ledger_offload_worker: str = "idle"
    # bounds against hostile input (docs/operations.md "Hostile input")
    max_num_partitions_per_partitioned_topic: int = 0  # 0: Magnetar's ceiling, 65,536
    max_buffered_partial_frames_size_in_mb: int = 128

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised_address}:{self.broker_service_port}"

    @property
    def web_service_url(self) -> str:
        return f"http://{self.advertised_address}:{self.web_service_port}"

    @property
    def tls_enabled(self) -> bool:
        return self.broker_service_port_tls >= 0 or self.web_service_port_tls >= 0

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def load(
        cls,
        path: str | pathlib.Path | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> BrokerConfig:
        """Defaults, then the file at ``path`` (our snake_case names or Pulsar's camelCase
        ones), then ``MAGNETAR_*`` variables of ``environ`` (None: ignore the environment),
        then ``overrides`` (flags; None values are "not given"). Unknown keys raise
        ``UnknownSettingError`` (a ``ValueError``)."""
        file_values = settings.read_config_file(path) if path is not None else None
        values = settings.resolve(
            settings.BROKER,
            cls,
            file_values=file_values,
            file_origin=str(path),
            environ=environ,
            overrides=overrides,
        )
        config = cls(**values)
        if config.broker_deduplication_entries_interval < 1:
            raise ValueError(
                "brokerDeduplicationEntriesInterval: expected a positive number of entries, "
                f"got {config.broker_deduplication_entries_interval}"
            )
        if config.managed_ledger_offload_worker not in OFFLOAD_WORKER_MODES:
            raise ValueError(
                "managedLedgerOffloadWorker: expected one of "
                f"{', '.join(OFFLOAD_WORKER_MODES)}, got "
                f"{config.managed_ledger_offload_worker!r}"
            )
        if config.broker_delete_inactive_topics_mode not in INACTIVE_TOPIC_MODES:
            raise ValueError(
                "brokerDeleteInactiveTopicsMode: expected one of "
                f"{', '.join(INACTIVE_TOPIC_MODES)}, got "
                f"{config.broker_delete_inactive_topics_mode!r}"
            )
        # a listener setting Pulsar refuses is a configuration error at start
        parse_advertised_listeners(config.advertised_listeners, config.internal_listener_name)
        return config

    def effective_config_line(self) -> str:
        """``effective configuration {...}``: every setting, secrets masked."""
        return settings.effective_config_line(settings.BROKER, self)


__all__ = ["INACTIVE_TOPIC_MODES", "BrokerConfig"]
