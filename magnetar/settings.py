"""Operator settings: every name a setting answers to, and how a process reads them.

Owns: the ONE table of names (our snake_case name, the Pulsar ``broker.conf`` /
BookKeeper ``bk_server.conf`` camelCase name where the setting is shared, and its
``MAGNETAR_*`` environment variable), reading ``key=value`` / YAML files, overriding from
the environment, typed coercion, sorting every key of a file into implemented (an alias or
our own name), accepted (``magnetar.settings_accepted``: a Pulsar/BookKeeper key whose value
asks for what Magnetar does anyway) or refused (a value Magnetar cannot honour, or a key it
does not know) with a clear error, and rendering the effective configuration with secrets
masked. The broker (``broker/config.py``), the
bookie (``bookie/main.py``) and the docs (``tools/settings_table.py``) all use it.
Must not know: what any setting does, or any other Magnetar module (it is imported by the
bookie and the broker alike).

Precedence, lowest first: defaults, the config file, ``MAGNETAR_*`` environment variables,
command-line flags.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import pathlib
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.settings_accepted import ACCEPTED_BOOKIE, ACCEPTED_BROKER, Accepted

Convert = Callable[[Any], Any]


class UnknownSettingError(ValueError):
    """A config file or the environment named a setting that does not exist."""


class RefusedSettingError(ValueError):
    """A Pulsar/BookKeeper key whose value asks for something Magnetar does not do."""


NOT_GIVEN = object()
"""What an ``Alias.convert`` returns for a value that means "the default" (a deprecated
alias left at its "unset" value must not override the current name)."""


@dataclass(frozen=True, slots=True)
class Alias:
    """``alias`` (Pulsar/BookKeeper camelCase) means our setting ``name``; ``convert`` turns
    a value written for the alias into ours (units, URL schemes), None when identical."""

    alias: str
    name: str
    convert: Convert | None = None
    note: str = ""


def _pulsar_metadata_url(value: Any) -> Any:
    """Pulsar writes ``zk:host:2181[,host:2181][/chroot]``; we write ``zk://...``."""
    text = str(value).strip()
    if text.startswith("zk:") and not text.startswith("zk://"):
        return "zk://" + text[3:]
    return text


def _zookeeper_servers(value: Any) -> Any:
    """``zookeeperServers`` / ``zkServers``: a bare ``host:port[,host:port]`` list."""
    text = str(value).strip()
    return text if "://" in text else f"zk://{text}"


def _bookkeeper_metadata_uri(value: Any) -> Any:
    """``zk+hierarchical://host:2181[;host:2181]/ledgers`` -> ``zk://host:2181[,...]``: our
    metadata paths already start with ``/ledgers``, so that suffix is not a chroot."""
    text = str(value).strip()
    match = re.fullmatch(r"zk(?:\+[a-z]+)?://([^/]+)(/.*)?", text)
    if match is None:
        return text
    hosts = match.group(1).replace(";", ",")
    chroot = (match.group(2) or "").removesuffix("/ledgers").rstrip("/")
    return f"zk://{hosts}{chroot}"


def _millis_to_seconds(value: Any) -> Any:
    return float(value) / 1000.0


def _positive_or_not_given(value: Any) -> Any:
    """A deprecated Pulsar alias whose 0 or -1 means "unset" (the current name decides)."""
    try:
        return value if float(value) > 0 else NOT_GIVEN
    except (TypeError, ValueError):
        return value  # coercion names the bad value


def _gigabytes_to_bytes(value: Any) -> Any:
    """Pulsar's deprecated ``backlogQuotaDefaultLimitGB``: a positive size in GiB, else unset
    (so ``backlogQuotaDefaultLimitBytes`` decides)."""
    try:
        gigabytes = float(value)
    except (TypeError, ValueError):
        return value  # coercion names the bad value
    return int(gigabytes * (1 << 30)) if gigabytes > 0 else NOT_GIVEN


# -- the table ------------------------------------------------------------------------------

SWEEPER = "inactive-topic deletion: see docs/policies.md"
OFFLOAD = "tiered storage: the broker's offloadPolicies (docs/tiered-storage.md)"

BROKER_ALIASES: tuple[Alias, ...] = (
    Alias("clusterName", "cluster_name"),
    Alias("bindAddress", "bind_address"),
    Alias("advertisedAddress", "advertised_address"),
    Alias("advertisedListeners", "advertised_listeners"),
    Alias("internalListenerName", "internal_listener_name"),
    Alias("brokerServicePort", "broker_service_port"),
    Alias("webServicePort", "web_service_port"),
    Alias("metadataStoreUrl", "metadata_store_url", _pulsar_metadata_url, "zk:host:port -> zk://"),
    Alias("zookeeperServers", "metadata_store_url", _zookeeper_servers, "host:port -> zk://"),
    Alias(
        "configurationMetadataStoreUrl",
        "configuration_metadata_store_url",
        _pulsar_metadata_url,
        "zk:host:port -> zk://",
    ),
    Alias(
        "configurationStoreServers",
        "configuration_metadata_store_url",
        _zookeeper_servers,
        "host:port -> zk://",
    ),
    Alias(
        "globalZookeeperServers",
        "configuration_metadata_store_url",
        _zookeeper_servers,
        "host:port -> zk://",
    ),
    Alias("metadataStoreSessionTimeoutMillis", "metadata_store_session_timeout_millis"),
    Alias(
        "zooKeeperSessionTimeoutMillis",
        "metadata_store_session_timeout_millis",
        _positive_or_not_given,
        "deprecated in Pulsar: -1 (its default) leaves metadataStoreSessionTimeoutMillis",
    ),
    Alias("maxMessageSize", "max_message_size"),
    Alias("keepAliveIntervalSeconds", "keep_alive_interval_seconds"),
    Alias("maxPendingPublishRequestsPerConnection", "max_pending_publish_requests_per_connection"),
    Alias("allowAutoTopicCreation", "allow_auto_topic_creation"),
    Alias("allowAutoTopicCreationType", "allow_auto_topic_creation_type"),
    Alias("defaultNumPartitions", "default_num_partitions"),
    Alias("allowAutoSubscriptionCreation", "allow_auto_subscription_creation"),
    Alias("defaultNumberOfNamespaceBundles", "default_number_of_namespace_bundles"),
    Alias("brokerDeduplicationEnabled", "broker_deduplication_enabled"),
    Alias("brokerDeduplicationEntriesInterval", "broker_deduplication_entries_interval"),
    Alias("schemaCompatibilityStrategy", "schema_compatibility_strategy"),
    Alias("isAllowAutoUpdateSchemaEnabled", "is_allow_auto_update_schema_enabled"),
    Alias("isSchemaValidationEnforced", "is_schema_validation_enforced"),
    Alias("maxUnackedMessagesPerConsumer", "max_unacked_messages_per_consumer"),
    Alias("maxUnackedMessagesPerSubscription", "max_unacked_messages_per_subscription"),
    Alias("dispatcherMaxReadBatchSize", "dispatcher_max_read_batch_size"),
    Alias("dispatcherMaxReadSizeBytes", "dispatcher_max_read_size_bytes"),
    Alias("dispatcherMinReadBatchSize", "dispatcher_min_read_batch_size"),
    Alias("basicAuthConf", "basic_auth_conf"),
    Alias("subscriptionRedeliveryTrackerEnabled", "subscription_redelivery_tracker_enabled"),
    Alias("managedLedgerDefaultEnsembleSize", "managed_ledger_default_ensemble_size"),
    Alias("managedLedgerDefaultWriteQuorum", "managed_ledger_default_write_quorum"),
    Alias("managedLedgerDefaultAckQuorum", "managed_ledger_default_ack_quorum"),
    Alias("managedLedgerMaxEntriesPerLedger", "managed_ledger_max_entries_per_ledger"),
    Alias(
        "managedLedgerMaxLedgerRolloverTimeMinutes",
        "managed_ledger_max_ledger_rollover_time_minutes",
    ),
    Alias(
        "managedLedgerMinLedgerRolloverTimeMinutes",
        "managed_ledger_min_ledger_rollover_time_minutes",
    ),
    Alias("managedLedgerCacheSizeMB", "managed_ledger_cache_size_mb"),
    Alias("defaultRetentionTimeInMinutes", "default_retention_time_in_minutes"),
    Alias("defaultRetentionSizeInMB", "default_retention_size_in_mb"),
    Alias("retentionCheckIntervalInSeconds", "retention_check_interval_in_seconds"),
    Alias("ttlDurationDefaultInSeconds", "ttl_duration_default_in_seconds"),
    Alias("messageExpiryCheckIntervalInMinutes", "message_expiry_check_interval_in_minutes"),
    Alias("backlogQuotaCheckEnabled", "backlog_quota_check_enabled"),
    Alias("backlogQuotaCheckIntervalInSeconds", "backlog_quota_check_interval_in_seconds"),
    Alias("backlogQuotaDefaultLimitBytes", "backlog_quota_default_limit_bytes"),
    Alias(
        "backlogQuotaDefaultLimitGB",
        "backlog_quota_default_limit_bytes",
        _gigabytes_to_bytes,
        "deprecated in Pulsar: GiB -> bytes, when positive",
    ),
    Alias("backlogQuotaDefaultLimitSecond", "backlog_quota_default_limit_second"),
    Alias("backlogQuotaDefaultRetentionPolicy", "backlog_quota_default_retention_policy"),
    Alias("maxProducersPerTopic", "max_producers_per_topic"),
    Alias("maxConsumersPerTopic", "max_consumers_per_topic"),
    Alias("delayedDeliveryEnabled", "delayed_delivery_enabled"),
    Alias("delayedDeliveryTickTimeMillis", "delayed_delivery_tick_time_millis"),
    Alias("delayedDeliveryMaxDelayInMillis", "delayed_delivery_max_delay_in_millis"),
    Alias("maxPublishRatePerTopicInMessages", "max_publish_rate_per_topic_in_messages"),
    Alias("maxPublishRatePerTopicInBytes", "max_publish_rate_per_topic_in_bytes"),
    Alias("dispatchThrottlingRatePerTopicInMsg", "dispatch_throttling_rate_per_topic_in_msg"),
    Alias("dispatchThrottlingRatePerTopicInByte", "dispatch_throttling_rate_per_topic_in_byte"),
    Alias(
        "dispatchThrottlingRatePerSubscriptionInMsg",
        "dispatch_throttling_rate_per_subscription_in_msg",
    ),
    Alias(
        "dispatchThrottlingRatePerSubscriptionInByte",
        "dispatch_throttling_rate_per_subscription_in_byte",
    ),
    Alias(
        "brokerServiceCompactionMonitorIntervalInSeconds",
        "broker_service_compaction_monitor_interval_seconds",
    ),
    Alias(
        "brokerServiceCompactionThresholdInBytes", "broker_service_compaction_threshold_in_bytes"
    ),
    Alias("replicationProducerQueueSize", "replication_producer_queue_size"),
    Alias("replicationPolicyCheckDurationSeconds", "replication_policy_check_duration_seconds"),
    Alias("replicationMetricsEnabled", "replication_metrics_enabled"),
    Alias("enableReplicatedSubscriptions", "enable_replicated_subscriptions"),
    Alias(
        "replicatedSubscriptionsSnapshotFrequencyMillis",
        "replicated_subscriptions_snapshot_frequency_millis",
    ),
    Alias(
        "replicatedSubscriptionsSnapshotTimeoutSeconds",
        "replicated_subscriptions_snapshot_timeout_seconds",
    ),
    Alias(
        "replicatedSubscriptionsSnapshotMaxCachedPerSubscription",
        "replicated_subscriptions_snapshot_max_cached_per_subscription",
    ),
    Alias("managedLedgerCacheEvictionWatermark", "managed_ledger_cache_eviction_watermark"),
    Alias(
        "managedLedgerCacheEvictionTimeThresholdMillis",
        "managed_ledger_cache_eviction_time_threshold_millis",
    ),
    Alias("managedLedgerCacheEvictionIntervalMs", "managed_ledger_cache_eviction_interval_ms"),
    Alias("managedLedgerCursorBackloggedThreshold", "managed_ledger_cursor_backlogged_threshold"),
    Alias("managedLedgerCursorMaxEntriesPerLedger", "managed_ledger_cursor_max_entries_per_ledger"),
    Alias(
        "managedLedgerCursorRolloverTimeInSeconds",
        "managed_ledger_cursor_rollover_time_in_seconds",
    ),
    Alias(
        "managedLedgerReadAheadEntries",
        "managed_ledger_read_ahead_entries",
        note="Magnetar only: bookie reads kept in flight ahead of a cursor behind the cache",
    ),
    Alias(
        "managedLedgerReadAheadMaxSizeBytes",
        "managed_ledger_read_ahead_max_size_bytes",
        note="Magnetar only: the read-ahead's bound in bytes",
    ),
    Alias(
        "managedLedgerReadAheadTotalMaxSizeBytes",
        "managed_ledger_read_ahead_total_max_size_bytes",
        note="Magnetar only: what all cursors' read-ahead of a broker hold together",
    ),
    Alias(
        "bookkeeperClientMinNumRacksPerWriteQuorum",
        "bookkeeper_client_min_num_racks_per_write_quorum",
    ),
    Alias(
        "bookkeeperClientEnforceMinNumRacksPerWriteQuorum",
        "bookkeeper_client_enforce_min_num_racks_per_write_quorum",
    ),
    Alias("loadBalancerEnabled", "load_balancer_enabled"),
    Alias(
        "loadBalancerReportUpdateThresholdPercentage",
        "load_balancer_report_update_threshold_percentage",
    ),
    Alias(
        "loadBalancerReportUpdateMinIntervalMillis",
        "load_balancer_report_update_min_interval_millis",
    ),
    Alias(
        "loadBalancerReportUpdateMaxIntervalMinutes",
        "load_balancer_report_update_max_interval_minutes",
    ),
    Alias("loadBalancerHistoryResourcePercentage", "load_balancer_history_resource_percentage"),
    Alias(
        "loadBalancerAverageResourceUsageDifferenceThresholdPercentage",
        "load_balancer_average_resource_usage_difference_threshold_percentage",
    ),
    Alias("loadBalancerCPUResourceWeight", "load_balancer_cpu_resource_weight"),
    Alias("loadBalancerMemoryResourceWeight", "load_balancer_memory_resource_weight"),
    Alias("loadBalancerBandwithInResourceWeight", "load_balancer_bandwidth_in_resource_weight"),
    Alias("loadBalancerBandwidthInResourceWeight", "load_balancer_bandwidth_in_resource_weight"),
    Alias("loadBalancerBandwithOutResourceWeight", "load_balancer_bandwidth_out_resource_weight"),
    Alias("loadBalancerBandwidthOutResourceWeight", "load_balancer_bandwidth_out_resource_weight"),
    Alias("loadBalancerOverrideBrokerNicSpeedGbps", "load_balancer_override_broker_nic_speed_gbps"),
    Alias("loadBalancerSheddingEnabled", "load_balancer_shedding_enabled"),
    Alias("loadBalancerLoadSheddingStrategy", "load_balancer_load_shedding_strategy"),
    Alias("loadBalancerSheddingIntervalMinutes", "load_balancer_shedding_interval_minutes"),
    Alias("loadBalancerSheddingGracePeriodMinutes", "load_balancer_shedding_grace_period_minutes"),
    Alias(
        "loadBalancerBrokerThresholdShedderPercentage",
        "load_balancer_broker_threshold_shedder_percentage",
    ),
    Alias(
        "loadBalancerBrokerOverloadedThresholdPercentage",
        "load_balancer_broker_overloaded_threshold_percentage",
    ),
    Alias(
        "loadBalancerBundleUnloadMinThroughputThreshold",
        "load_balancer_bundle_unload_min_throughput_threshold",
    ),
    Alias("loadBalancerAutoBundleSplitEnabled", "load_balancer_auto_bundle_split_enabled"),
    Alias(
        "loadBalancerAutoUnloadSplitBundlesEnabled",
        "load_balancer_auto_unload_split_bundles_enabled",
    ),
    Alias("loadBalancerSplitIntervalMinutes", "load_balancer_split_interval_minutes"),
    Alias(
        "loadBalancerNamespaceBundleSplitIntervalMinutes",
        "load_balancer_split_interval_minutes",
        note="Pulsar 2.x name",
    ),
    Alias("loadBalancerNamespaceBundleMaxTopics", "load_balancer_namespace_bundle_max_topics"),
    Alias("loadBalancerNamespaceBundleMaxSessions", "load_balancer_namespace_bundle_max_sessions"),
    Alias("loadBalancerNamespaceBundleMaxMsgRate", "load_balancer_namespace_bundle_max_msg_rate"),
    Alias(
        "loadBalancerNamespaceBundleMaxBandwidthMbytes",
        "load_balancer_namespace_bundle_max_bandwidth_mbytes",
    ),
    Alias("loadBalancerNamespaceMaximumBundles", "load_balancer_namespace_maximum_bundles"),
    Alias("defaultNamespaceBundleSplitAlgorithm", "default_namespace_bundle_split_algorithm"),
    Alias("loadBalancerBrokerProbeIntervalMillis", "load_balancer_broker_probe_interval_millis"),
    Alias("loadBalancerBrokerProbeFailures", "load_balancer_broker_probe_failures"),
    Alias(
        "loadBalancerBrokerUnresponsiveTimeoutMillis",
        "load_balancer_broker_unresponsive_timeout_millis",
    ),
    Alias("exposeTopicLevelMetricsInPrometheus", "expose_topic_level_metrics_in_prometheus"),
    Alias("brokerServicePortTls", "broker_service_port_tls"),
    Alias("webServicePortTls", "web_service_port_tls"),
    Alias("tlsCertificateFilePath", "tls_certificate_file_path"),
    Alias("tlsKeyFilePath", "tls_key_file_path"),
    Alias("tlsTrustCertsFilePath", "tls_trust_certs_file_path"),
    Alias("tlsRequireTrustedClientCertOnConnect", "tls_require_trusted_client_cert_on_connect"),
    Alias("tlsProtocols", "tls_protocols"),
    Alias("tlsCiphers", "tls_ciphers"),
    Alias("tlsCertRefreshCheckDurationSec", "tls_cert_refresh_check_duration_sec"),
    Alias("authenticationEnabled", "authentication_enabled"),
    Alias("authenticationProviders", "authentication_providers"),
    Alias("authenticationRefreshCheckSeconds", "authentication_refresh_check_seconds"),
    Alias("anonymousUserRole", "anonymous_user_role"),
    Alias("tokenSecretKey", "token_secret_key"),
    Alias("tokenPublicKey", "token_public_key"),
    Alias("tokenPublicAlg", "token_public_alg"),
    Alias("tokenAuthClaim", "token_auth_claim"),
    Alias("tokenAudienceClaim", "token_audience_claim"),
    Alias("tokenAudience", "token_audience"),
    Alias("authorizationEnabled", "authorization_enabled"),
    Alias("superUserRoles", "superuser_roles"),
    Alias(
        "bookkeeperUseV2WireProtocol",
        "bookkeeper_fast_add_enabled",
        None,
        "Pulsar's lighter bookie wire protocol; here: adds over the fast add port",
    ),
    Alias("bookkeeperTLSTrustCertsFilePath", "bookkeeper_tls_trust_certs_file_path"),
    Alias("bookkeeperTLSClientAuthentication", "bookkeeper_tls_client_authentication"),
    Alias("bookkeeperTLSCertificateFilePath", "bookkeeper_tls_certificate_file_path"),
    Alias("bookkeeperTLSKeyFilePath", "bookkeeper_tls_key_file_path"),
    Alias("brokerClientAuthenticationPlugin", "broker_client_authentication_plugin"),
    Alias("brokerClientAuthenticationParameters", "broker_client_authentication_parameters"),
    Alias("brokerClientTlsEnabled", "broker_client_tls_enabled"),
    Alias("brokerClientTrustCertsFilePath", "broker_client_trust_certs_file_path"),
    Alias("brokerClientCertificateFilePath", "broker_client_certificate_file_path"),
    Alias("brokerClientKeyFilePath", "broker_client_key_file_path"),
    Alias("maxNumPartitionsPerPartitionedTopic", "max_num_partitions_per_partitioned_topic"),
    Alias("maxBufferedPartialFramesSizeInMb", "max_buffered_partial_frames_size_in_mb"),
    Alias("topicLevelPoliciesEnabled", "topic_level_policies_enabled"),
    # -- tiered storage: the broker's offloadPolicies (broker/offload/) -------------------
    Alias("managedLedgerOffloadDriver", "managed_ledger_offload_driver", note=OFFLOAD),
    Alias("managedLedgerOffloadMaxThreads", "managed_ledger_offload_max_threads", note=OFFLOAD),
    Alias(
        "managedLedgerOffloadPrefetchRounds",
        "managed_ledger_offload_prefetch_rounds",
        note=OFFLOAD,
    ),
    Alias(
        "managedLedgerOffloadAutoTriggerSizeThresholdBytes",
        "managed_ledger_offload_auto_trigger_size_threshold_bytes",
        note=OFFLOAD,
    ),
    Alias(
        "managedLedgerOffloadThresholdInBytes",
        "managed_ledger_offload_auto_trigger_size_threshold_bytes",
        note="the offloadPolicies JSON name",
    ),
    Alias(
        "managedLedgerOffloadThresholdInSeconds",
        "managed_ledger_offload_threshold_in_seconds",
        note=OFFLOAD,
    ),
    Alias(
        "managedLedgerOffloadDeletionLagMs",
        "managed_ledger_offload_deletion_lag_ms",
        note=OFFLOAD,
    ),
    Alias(
        "managedLedgerOffloadDeletionLagInMillis",
        "managed_ledger_offload_deletion_lag_ms",
        note="the offloadPolicies JSON name",
    ),
    Alias("managedLedgerDataReadPriority", "managed_ledger_data_read_priority", note=OFFLOAD),
    Alias(
        "managedLedgerOffloadedReadPriority",
        "managed_ledger_data_read_priority",
        note="the offloadPolicies JSON name",
    ),
    Alias("managedLedgerOffloadBucket", "managed_ledger_offload_bucket", note=OFFLOAD),
    Alias("managedLedgerOffloadRegion", "managed_ledger_offload_region", note=OFFLOAD),
    Alias(
        "managedLedgerOffloadServiceEndpoint",
        "managed_ledger_offload_service_endpoint",
        note=OFFLOAD,
    ),
    Alias(
        "managedLedgerOffloadMaxBlockSizeInBytes",
        "managed_ledger_offload_max_block_size_in_bytes",
        note=OFFLOAD,
    ),
    Alias(
        "managedLedgerOffloadReadBufferSizeInBytes",
        "managed_ledger_offload_read_buffer_size_in_bytes",
        note=OFFLOAD,
    ),
    Alias("s3ManagedLedgerOffloadRegion", "s3_managed_ledger_offload_region", note=OFFLOAD),
    Alias("s3ManagedLedgerOffloadBucket", "s3_managed_ledger_offload_bucket", note=OFFLOAD),
    Alias(
        "s3ManagedLedgerOffloadServiceEndpoint",
        "s3_managed_ledger_offload_service_endpoint",
        note=OFFLOAD,
    ),
    Alias(
        "s3ManagedLedgerOffloadMaxBlockSizeInBytes",
        "s3_managed_ledger_offload_max_block_size_in_bytes",
        note=OFFLOAD,
    ),
    Alias(
        "s3ManagedLedgerOffloadReadBufferSizeInBytes",
        "s3_managed_ledger_offload_read_buffer_size_in_bytes",
        note=OFFLOAD,
    ),
    Alias(
        "s3ManagedLedgerOffloadCredentialId",
        "s3_managed_ledger_offload_credential_id",
        note=OFFLOAD,
    ),
    Alias(
        "s3ManagedLedgerOffloadCredentialSecret",
        "s3_managed_ledger_offload_credential_secret",
        note=OFFLOAD,
    ),
    Alias("s3ManagedLedgerOffloadRole", "s3_managed_ledger_offload_role", note=OFFLOAD),
    Alias(
        "s3ManagedLedgerOffloadRoleSessionName",
        "s3_managed_ledger_offload_role_session_name",
        note=OFFLOAD,
    ),
    Alias("gcsManagedLedgerOffloadRegion", "gcs_managed_ledger_offload_region", note=OFFLOAD),
    Alias("gcsManagedLedgerOffloadBucket", "gcs_managed_ledger_offload_bucket", note=OFFLOAD),
    Alias(
        "gcsManagedLedgerOffloadMaxBlockSizeInBytes",
        "gcs_managed_ledger_offload_max_block_size_in_bytes",
        note=OFFLOAD,
    ),
    Alias(
        "gcsManagedLedgerOffloadReadBufferSizeInBytes",
        "gcs_managed_ledger_offload_read_buffer_size_in_bytes",
        note=OFFLOAD,
    ),
    Alias(
        "gcsManagedLedgerOffloadServiceAccountKeyFile",
        "gcs_managed_ledger_offload_service_account_key_file",
        note=OFFLOAD,
    ),
    Alias("fileSystemURI", "file_system_uri", note=OFFLOAD),
    Alias("fileSystemProfilePath", "file_system_profile_path", note=OFFLOAD),
    Alias(
        "managedLedgerOffloadStoreTimeoutMs",
        "managed_ledger_offload_store_timeout_ms",
        note="Magnetar only: one object-store request's timeout",
    ),
    Alias(
        "managedLedgerOffloadStoreRetries",
        "managed_ledger_offload_store_retries",
        note="Magnetar only: the object-store library's retries of one request",
    ),
    Alias(
        "managedLedgerOffloadReadDeadlineMs",
        "managed_ledger_offload_read_deadline_ms",
        note="Magnetar only: how long an offloaded read waits for an unavailable store",
    ),
    Alias(
        "managedLedgerOffloadFlowPermitsPerSecond",
        "managed_ledger_offload_flow_permits_per_second",
        note="tiered storage: bytes/s the broker's offloads read from the bookies, <= 0 unlimited",
    ),
    Alias(
        "managedLedgerOffloadWorker",
        "managed_ledger_offload_worker",
        note="Magnetar only: offloads run in a child process at idle CPU priority (idle), "
        "at normal priority (normal), or on the broker's loop (off)",
    ),
    # -- inactive-topic deletion (policies/inactive.py; the namespace and topic policy
    # inactiveTopicPolicies overrides them) ----------------------------------------------
    Alias(
        "brokerDeleteInactiveTopicsEnabled",
        "broker_delete_inactive_topics_enabled",
        note=SWEEPER,
    ),
    Alias(
        "brokerDeleteInactiveTopicsFrequencySeconds",
        "broker_delete_inactive_topics_frequency_seconds",
        note=SWEEPER,
    ),
    Alias("brokerDeleteInactiveTopicsMode", "broker_delete_inactive_topics_mode", note=SWEEPER),
    Alias(
        "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds",
        "broker_delete_inactive_topics_max_inactive_duration_seconds",
        note=SWEEPER,
    ),
    Alias(
        "brokerDeleteInactivePartitionedTopicMetadataEnabled",
        "broker_delete_inactive_partitioned_topic_metadata_enabled",
        note=SWEEPER,
    ),
)

BOOKIE_ALIASES: tuple[Alias, ...] = (
    Alias("bookiePort", "port"),
    Alias("journalDirectories", "journal_dir", note="one directory"),
    Alias("ledgerDirectories", "ledger_dir", note="one directory"),
    Alias("zkTimeout", "zk_timeout_ms"),
    Alias("authorizedRoles", "authorized_roles"),
    Alias("bookieId", "bookie_id"),
    Alias("httpServerPort", "http_port"),
    Alias("httpServerEnabled", "http_server_enabled"),
    Alias("journalSyncData", "journal_sync"),
    Alias("journalPreAllocSizeMB", "journal_pre_alloc_size_mb"),
    Alias("gcWaitTime", "gc_interval_s", _millis_to_seconds, "milliseconds -> seconds"),
    Alias(
        "metadataServiceUri",
        "metadata",
        _bookkeeper_metadata_uri,
        "zk+hierarchical://h:p/ledgers -> zk://h:p",
    ),
    Alias("zkServers", "metadata", _zookeeper_servers, "host:port -> zk://"),
)


@dataclass(frozen=True, slots=True)
class Component:
    """One process kind's naming rules."""

    name: str
    env_prefix: str
    aliases: tuple[Alias, ...]
    accepted: tuple[Accepted, ...] = ()
    secrets: frozenset[str] = frozenset()
    # Environment variables this component reads that are not settings (flags' defaults).
    extra_env: frozenset[str] = frozenset()
    # Prefixes of other components' variables, ignored here (standalone runs both).
    foreign_env_prefixes: tuple[str, ...] = ()

    def env_name(self, name: str) -> str:
        return self.env_prefix + name.upper()

    def alias_map(self) -> dict[str, Alias]:
        return {a.alias: a for a in self.aliases}

    def aliases_of(self, name: str) -> list[Alias]:
        return [a for a in self.aliases if a.name == name]

    def accepted_map(self) -> dict[str, Accepted]:
        return {a.key: a for a in self.accepted}


# Variables of tools and tests, never settings: ignored by every process.
TOOL_ENV_PREFIXES = (
    "MAGNETAR_TEST_",
    "MAGNETAR_CHAOS_",
    "MAGNETAR_FUZZ_",
    "MAGNETAR_BENCH_",
    "MAGNETAR_KEEP_",
)

BROKER = Component(
    name="broker",
    env_prefix="MAGNETAR_",
    aliases=BROKER_ALIASES,
    accepted=ACCEPTED_BROKER,
    extra_env=frozenset({"MAGNETAR_LOG_LEVEL"}),
    secrets=frozenset({"basic_auth_conf"}),  # may hold the password file itself (base64)
    foreign_env_prefixes=("MAGNETAR_BOOKIE_", *TOOL_ENV_PREFIXES),
)
BOOKIE = Component(
    name="bookie",
    env_prefix="MAGNETAR_BOOKIE_",
    aliases=BOOKIE_ALIASES,
    accepted=ACCEPTED_BOOKIE,
)

_SECRET_WORDS = re.compile(
    r"password|secret|token|credential|private_key|auth_params|authentication_parameters"
)
_URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<userinfo>[^@/\s]+)@", re.I)
MASK = "******"


# -- reading --------------------------------------------------------------------------------


def read_config_file(path: str | pathlib.Path) -> dict[str, Any]:
    """A YAML mapping (``.yaml``/``.yml``/``.json``) or a ``key=value`` properties file
    (anything else, as Pulsar's ``broker.conf``). An empty properties value (``key=``) is kept
    as ``""``: it means "use the default", as in Pulsar, but the key must still be known."""
    path = pathlib.Path(path)
    text = path.read_text()
    if path.suffix in (".yaml", ".yml", ".json"):
        import yaml

        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of setting names to values")
        return {str(k): v for k, v in data.items()}
    values: dict[str, Any] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            raise ValueError(f"{path}:{lineno}: expected key=value, got {line!r}")
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


@dataclass(frozen=True, slots=True)
class AcceptedKey:
    """A key of a file accepted as a no-op: its value and the row that says why."""

    key: str
    value: str
    row: Accepted


@dataclass(slots=True)
class Classified:
    """Every key of a file, sorted: ``implemented`` (our name -> value, converted),
    ``accepted`` (no-ops), ``refused`` (messages) and ``unknown`` (keys)."""

    implemented: dict[str, Any] = dataclasses.field(default_factory=dict)
    accepted: list[AcceptedKey] = dataclasses.field(default_factory=list)
    refused: list[str] = dataclasses.field(default_factory=list)
    unknown: list[str] = dataclasses.field(default_factory=list)


def _is_default(value: Any) -> bool:
    return isinstance(value, str) and not value.strip()


def classify(
    component: Component, values: Mapping[str, Any], known: Mapping[str, Any]
) -> Classified:
    """Sort each key (snake_case, kebab-case, or a Pulsar/BookKeeper camelCase alias or
    accepted key) into the four kinds. An empty value of a known key is left out of
    ``implemented`` (the default stays); an alias conversion may say ``NOT_GIVEN``."""
    aliases = component.alias_map()
    accepted = component.accepted_map()
    out = Classified()
    for raw_key, value in values.items():
        key = str(raw_key).strip()
        snake = key.replace("-", "_")
        if snake in known:
            if not _is_default(value):
                out.implemented[snake] = value
        elif key in aliases:
            if _is_default(value):
                continue
            alias = aliases[key]
            converted = alias.convert(value) if alias.convert is not None else value
            if converted is not NOT_GIVEN:
                out.implemented[alias.name] = converted
        elif key in accepted:
            row = accepted[key]
            text = "" if value is None else str(value).strip()
            if not text or row.fits(text):
                out.accepted.append(AcceptedKey(key, text, row))
            else:
                out.refused.append(
                    f"{key}={text} asks for something Magnetar does not do "
                    f"(supported: {row.supported}; {row.reason})"
                )
        else:
            out.unknown.append(key)
    return out


def normalise(
    component: Component, values: Mapping[str, Any], known: Mapping[str, Any], origin: str
) -> dict[str, Any]:
    """Our name -> value for every implemented key of ``values``; a refused value raises
    ``RefusedSettingError`` and unknown keys ``UnknownSettingError``, naming all of them
    (with the closest known names)."""
    sorted_keys = classify(component, values, known)
    if sorted_keys.unknown:
        raise UnknownSettingError(
            f"unknown {component.name} configuration keys in {origin}: "
            + "; ".join(_suggest(component, key, known) for key in sorted(sorted_keys.unknown))
        )
    if sorted_keys.refused:
        raise RefusedSettingError(
            f"{component.name} configuration refused in {origin}: " + "; ".join(sorted_keys.refused)
        )
    return sorted_keys.implemented


def accepted_keys(
    component: Component, values: Mapping[str, Any], known: Mapping[str, Any]
) -> list[AcceptedKey]:
    """The keys of ``values`` accepted as no-ops (for the start-up log)."""
    return classify(component, values, known).accepted


def accepted_log_lines(component: Component, accepted: list[AcceptedKey]) -> list[str]:
    """One line per accepted key: ``key=value accepted as a no-op: reason``."""
    return [
        f"{a.key}={a.value or '(default)'} accepted without a setting of its own: {a.row.reason}"
        for a in accepted
    ]


def _suggest(component: Component, key: str, known: Mapping[str, Any]) -> str:
    candidates = [*known, *component.alias_map(), *component.accepted_map()]
    close = difflib.get_close_matches(key.replace("-", "_"), candidates, n=1, cutoff=0.75)
    return f"{key} (did you mean {close[0]}?)" if close else key


def from_environment(
    component: Component, environ: Mapping[str, str], known: Mapping[str, Any]
) -> dict[str, str]:
    """``MAGNETAR_<NAME>`` (broker) / ``MAGNETAR_BOOKIE_<NAME>`` (bookie) variables; other
    variables with the prefix are refused, so a typo never goes unnoticed."""
    out: dict[str, str] = {}
    unknown: list[str] = []
    by_env = {component.env_name(name): name for name in known}
    for var, value in environ.items():
        if not var.startswith(component.env_prefix):
            continue
        if var in by_env:
            out[by_env[var]] = value
        elif var not in component.extra_env and not var.startswith(component.foreign_env_prefixes):
            unknown.append(var)
    if unknown:
        suggestions = []
        for var in sorted(unknown):
            close = difflib.get_close_matches(var, list(by_env), n=1, cutoff=0.8)
            suggestions.append(f"{var} (did you mean {close[0]}?)" if close else var)
        raise UnknownSettingError(
            f"unknown {component.name} environment variables: {'; '.join(suggestions)}"
        )
    return out


def field_types(cls: type) -> dict[str, Any]:
    """Field name -> resolved type hint of a settings dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def coerce(name: str, value: Any, hint: Any) -> Any:
    """``value`` (from YAML, a properties file or the environment) as type ``hint``."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
            return None
        (hint,) = [a for a in args if a is not type(None)]
    if name.endswith(("_port", "_port_tls")) and isinstance(value, str) and not value.strip():
        return -1  # Pulsar's broker.conf leaves optional ports empty (brokerServicePortTls=)
    if hint is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{name}: expected a boolean, got {value!r}")
    origin = typing.get_origin(hint) or hint
    if origin is dict:
        if isinstance(value, dict):
            return value
        try:
            parsed = json.loads(str(value))
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ValueError(f"{name}: expected a mapping (JSON object), got {value!r}")
        return parsed
    if hint is int and isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{name}: expected int, got {value!r}")
    if hint is int and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ValueError(f"{name}: expected int, got {value!r}") from None
    try:
        return hint(value)
    except (TypeError, ValueError):
        kind = getattr(hint, "__name__", str(hint))
        raise ValueError(f"{name}: expected {kind}, got {value!r}") from None


def resolve(
    component: Component,
    cls: type,
    *,
    file_values: Mapping[str, Any] | None = None,
    file_origin: str = "the config file",
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Typed values for ``cls(**values)``: file, then environment, then overrides (flags;
    None means "not given")."""
    hints = field_types(cls)
    values: dict[str, Any] = {}
    if file_values:
        values.update(normalise(component, file_values, hints, file_origin))
    if environ is not None:
        values.update(from_environment(component, environ, hints))
    if overrides:
        given = {k: v for k, v in overrides.items() if v is not None}
        values.update(normalise(component, given, hints, "the command line"))
    return {key: coerce(key, value, hints[key]) for key, value in values.items()}


# -- printing -------------------------------------------------------------------------------


def is_secret(component: Component, name: str) -> bool:
    return name in component.secrets or _SECRET_WORDS.search(name) is not None


def mask_value(value: Any) -> Any:
    """Credentials inside URLs (``scheme://user:password@host``) become ``******``."""
    if isinstance(value, str):
        return _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", value)
    if isinstance(value, dict):
        return {
            k: MASK if _SECRET_WORDS.search(str(k)) else mask_value(v) for k, v in value.items()
        }
    return value


def masked(component: Component, config: Any) -> dict[str, Any]:
    """The effective configuration of a settings dataclass, secrets masked."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        out[f.name] = MASK if is_secret(component, f.name) and value else mask_value(value)
    return out


def effective_config_line(component: Component, config: Any) -> str:
    """One log line: ``effective configuration {json}`` (sorted keys, secrets masked)."""
    return "effective configuration " + json.dumps(
        masked(component, config), sort_keys=True, default=str
    )


# -- docs -----------------------------------------------------------------------------------


def markdown_table(component: Component, cls: type) -> str:
    """The operations chapter's table for ``component`` (``tools/settings_table.py``)."""
    defaults = cls()
    rows = [
        f"| setting | environment variable | {'Pulsar' if component is BROKER else 'BookKeeper'}"
        " name | default |",
        "|---|---|---|---|",
    ]
    for f in dataclasses.fields(cls):
        names = ", ".join(
            f"`{a.alias}`" + (f" ({a.note})" if a.note else "")
            for a in component.aliases_of(f.name)
        )
        default = getattr(defaults, f.name)
        rows.append(
            f"| `{f.name}` | `{component.env_name(f.name)}` | {names or '-'} | `{default}` |"
        )
    return "\n".join(rows)


def markdown_accepted_table(component: Component) -> str:
    """The keys ``component`` accepts without a setting of its own: the values that fit and
    why (docs/operations.md, ``tools/settings_table.py``)."""
    rows = ["| key | accepted values | why that is what Magnetar does |", "|---|---|---|"]
    for row in sorted(component.accepted, key=lambda r: r.key.lower()):
        why = row.reason.replace("|", "\\|") + (" (logged as a WARNING)" if row.warn else "")
        supported = row.supported.replace("|", "\\|")
        rows.append(f"| `{row.key}` | {supported} | {why} |")
    return "\n".join(rows)


__all__ = [
    "BOOKIE",
    "BOOKIE_ALIASES",
    "BROKER",
    "BROKER_ALIASES",
    "MASK",
    "NOT_GIVEN",
    "AcceptedKey",
    "Alias",
    "Classified",
    "Component",
    "RefusedSettingError",
    "UnknownSettingError",
    "accepted_keys",
    "accepted_log_lines",
    "classify",
    "coerce",
    "effective_config_line",
    "field_types",
    "from_environment",
    "markdown_accepted_table",
    "markdown_table",
    "masked",
    "normalise",
    "read_config_file",
    "resolve",
]
